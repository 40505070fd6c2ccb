//! "Why was this request limited?": `gcounter-rls explain`.
//!
//! Given the limits and a request (its descriptors, upstream's JSON form, or an HTTP request
//! through an Envoy config's `rate_limits`), it shows the decision path: each entry's node
//! and how it matched, the rule and its limits, the counter a hit lands on; against a running
//! service, the answer it would give now, asked without consuming.
//!
//! - `report`: the explanation as data (`--json`). `render`: as text.
//! - `envoy_report`: what an Envoy filter sends for the request (`crate::envoy_config`).
//! - `service`, `http`: the running service (`/rlconfig`, `POST /json` with `hitsAddend: 0`).
//! - `args`, `run`: the command line and the command.
//! - `lint`: `check-config --envoy`, the limits against an Envoy config.

mod args;
mod envoy_report;
mod http;
pub mod lint;
mod render;
mod report;
mod run;
mod service;

pub use args::ExplainArgs;
pub use report::{Explanation, explain};
pub use run::{ExplainError, run};
