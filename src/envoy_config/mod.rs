//! What an Envoy config makes its rate limit filter send: read from a bootstrap, a listener,
//! a route configuration or an admin `/config_dump`, and evaluated on one request as Envoy
//! 1.40 does (its `router_ratelimit.cc`, `ratelimit_config.cc` and the filter's
//! `ratelimit.cc`). `explain` shows the result; `check-config --envoy` lints it against the
//! limits.
//!
//! - `yaml`: the file as a tree with lines (field names in either protobuf spelling).
//! - `parse`: the tree to `model` (managers, routes, filters, policies, actions); what is
//!   found but not evaluated is listed, never dropped silently.
//! - `matchers`: string, header, query and route matchers. `request`: the request, and
//!   Envoy's trusted client address.
//! - `evaluate`: one policy's actions on a request. `predict`: the route, the policies the
//!   filter picks, and the descriptors of each call.

pub mod evaluate;
pub mod matchers;
pub mod model;
mod parse;
pub mod predict;
pub mod request;
pub mod yaml;

use std::path::Path;

pub use model::EnvoyConfig;
pub use predict::{Prediction, predict};
pub use request::HttpRequest;

/// Reads and parses the Envoy config at `path`.
pub fn load(path: &Path) -> Result<EnvoyConfig, yaml::YamlError> {
    let document = yaml::Document::read(path)?;
    Ok(parse::parse(&document))
}

/// Parses an Envoy config held in memory; `file` names it in messages.
pub fn load_str(file: &str, text: &str) -> Result<EnvoyConfig, yaml::YamlError> {
    let document = yaml::Document::parse(file, text)?;
    Ok(parse::parse(&document))
}
