//! The YAML file as written (envoyproxy/ratelimit format plus our extensions).
//!
//! Fields that validation reports on are `Spanned` so that errors carry a
//! line. Fields that may be absent are `Option` so that one missing field does
//! not hide the other problems of the file.

use serde::Deserialize;
use serde_saphyr::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawFile {
    pub domain: Option<Spanned<String>>,
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawDescriptor {
    pub key: Option<Spanned<String>>,
    pub value: Option<Spanned<String>>,
    pub rate_limit: Option<Spanned<RawRateLimit>>,
    /// Our extension: several limits on one descriptor (each its own counter; a request passes
    /// only if every one does). Exclusive with `rate_limit`.
    pub rate_limits: Option<Spanned<Vec<Spanned<RawRateLimit>>>>,
    pub descriptors: Option<Vec<Spanned<RawDescriptor>>>,
    pub shadow_mode: Option<bool>,
    pub detailed_metric: Option<bool>,
    /// Upstream's quota mode: over this limit, the request is over only when every quota
    /// descriptor of the request is.
    pub quota_mode: Option<bool>,
    /// Upstream's `share_threshold`: on a wildcard value, every value it matches counts on one
    /// counter.
    pub share_threshold: Option<Spanned<bool>>,
    /// Upstream's `metadata`: any mapping, returned in the response's dynamic metadata when
    /// this descriptor's rule passes.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Upstream's `value_to_metric`: metric names carry the request's value at this level.
    pub value_to_metric: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawRateLimit {
    pub unit: Option<Spanned<String>>,
    pub requests_per_unit: Option<Spanned<u32>>,
    pub unlimited: Option<Spanned<bool>>,
    pub name: Option<Spanned<String>>,
    pub replaces: Option<Vec<Spanned<RawReplaces>>>,
    /// Our extension: windows of `unit × unit_multiplier`.
    pub unit_multiplier: Option<Spanned<u32>>,
    /// Our extension: a client that goes over stays denied this long (`5m`; `penalty`).
    pub penalty: Option<Spanned<String>>,
    /// Our extension: `never_below` (the default) or `never_above` (`guarantee`).
    pub guarantee: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RawReplaces {
    pub name: Option<Spanned<String>>,
}
