//! The label values every series of the registry shares: the rule's domain and name as a
//! [`SharedLabel`], and the outcomes and entry points a request or decision is counted under.
//! Kept apart from [`super::metrics`] so the per-rule series (`rule_series`, `upstream_stats`)
//! name their labels without reaching back into the registry.

use std::fmt::Write;
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// A label value shared with the compiled config: recording a decision clones an `Arc`
/// instead of allocating a `String`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedLabel(pub Arc<str>);

impl EncodeLabelValue for SharedLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    Ok,
    OverLimit,
    InvalidArgument,
    /// Refused by the transport's bounds: a message over `--max-request-bytes`, or the
    /// buffered-bytes budget spent.
    ResourceExhausted,
}

/// Which entry point answered a request, for `rls_request_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestMethod {
    /// gRPC `RateLimitService/ShouldRateLimit`.
    ShouldRateLimit,
    /// `POST /json` on the admin port.
    Json,
}

impl EncodeLabelValue for RequestMethod {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::ShouldRateLimit => "should_rate_limit",
            Self::Json => "json",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionOutcome {
    WithinLimit,
    OverLimit,
    /// Over the limit, but answered OK because of shadow mode.
    ShadowOverLimit,
    Unlimited,
}

/// Prometheus label values are snake_case by convention.
impl EncodeLabelValue for RequestOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Ok => "ok",
            Self::OverLimit => "over_limit",
            Self::InvalidArgument => "invalid_argument",
            Self::ResourceExhausted => "resource_exhausted",
        })
    }
}

impl EncodeLabelValue for DecisionOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::WithinLimit => "within_limit",
            Self::OverLimit => "over_limit",
            Self::ShadowOverLimit => "shadow_over_limit",
            Self::Unlimited => "unlimited",
        })
    }
}
