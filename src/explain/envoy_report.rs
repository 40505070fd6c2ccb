//! What an Envoy config sends for a request (`envoy_config::predict`), as data for
//! `--json` and as the request `explain` then walks through the limits.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::Serialize;

use crate::envoy_config::evaluate::{Descriptor, Outcome};
use crate::envoy_config::predict::{Evaluated, Prediction, Routing};

/// One rate limit filter's view of the request.
#[derive(Debug, Clone, Serialize)]
pub struct FilterReport {
    pub listener: String,
    /// The filter's name and place (none for a route configuration alone).
    pub filter: Option<String>,
    pub domain: String,
    /// The virtual host and route, or why there is none.
    pub routing: String,
    /// Route conditions that were not evaluated.
    pub unevaluated_conditions: Vec<String>,
    pub why_none: Option<String>,
    /// Each policy: where it is, where it came from, what it gave.
    pub policies: Vec<PolicyReport>,
    /// Some policy or condition was not evaluated: the calls below may not be all.
    pub uncertain: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    pub at: String,
    pub origin: &'static str,
    /// Sent once the stream is done.
    pub on_stream_done: bool,
    /// `sent`, `not_sent` or `not_evaluated`.
    pub outcome: &'static str,
    /// The entries (`key=value`), when sent.
    pub entries: Vec<(String, String)>,
    /// The action that made each entry, in order.
    pub actions: Vec<String>,
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: the hits are given back.
    pub refund: bool,
    /// Why not sent (or not evaluated), or what a `skip_if_absent` left out.
    pub notes: Vec<String>,
}

impl FilterReport {
    pub fn new(prediction: &Prediction<'_>) -> Self {
        let (routing, unevaluated) = match &prediction.routing {
            Routing::NoRoutes => ("no route configuration".to_owned(), Vec::new()),
            Routing::NoVirtualHost => ("no virtual host for the authority".to_owned(), Vec::new()),
            Routing::NoRoute(vh) => (
                format!(
                    "no route of virtual host `{}` ({}) matches",
                    vh.name, vh.place
                ),
                Vec::new(),
            ),
            Routing::Route(vh, route, unknown) => (
                format!(
                    "route `{}` ({}) of virtual host `{}`",
                    route.name, route.place, vh.name
                ),
                unknown.clone(),
            ),
        };
        let policies = prediction
            .request
            .iter()
            .chain(&prediction.stream_done)
            .map(policy_report)
            .collect();
        Self {
            listener: prediction.manager.listener.clone(),
            filter: prediction
                .filter
                .map(|f| format!("{} ({})", f.name, f.place)),
            domain: prediction.domain.clone(),
            routing,
            unevaluated_conditions: unevaluated,
            why_none: prediction.why_none.clone(),
            policies,
            uncertain: prediction.is_uncertain(),
        }
    }
}

fn policy_report(evaluated: &Evaluated<'_>) -> PolicyReport {
    let mut report = PolicyReport {
        at: evaluated.policy.place.to_string(),
        origin: evaluated.origin.name(),
        on_stream_done: evaluated.policy.apply_on_stream_done,
        outcome: "sent",
        entries: Vec::new(),
        actions: Vec::new(),
        hits_addend: None,
        refund: false,
        notes: Vec::new(),
    };
    match &evaluated.outcome {
        Outcome::Sent(descriptor) => {
            report.entries = descriptor
                .entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect();
            report.actions = descriptor
                .entries
                .iter()
                .map(|e| e.action.clone())
                .collect();
            report.hits_addend = descriptor.hits_addend;
            report.refund = descriptor.refund;
            report.notes.clone_from(&descriptor.skipped);
            if descriptor.limit_override {
                report.notes.push(
                    "its `limit` override comes from dynamic metadata, not known here".to_owned(),
                );
            }
        }
        Outcome::NotSent { place, why } => {
            report.outcome = "not_sent";
            report.notes.push(at(why, place));
        }
        Outcome::Unknown { place, why } => {
            report.outcome = "not_evaluated";
            report.notes.push(at(why, place));
        }
    }
    report
}

fn at(why: &str, place: &crate::config::Place) -> String {
    if place.file.is_empty() {
        why.to_owned()
    } else {
        format!("{why} ({place})")
    }
}

/// The request-time call as the service would receive it.
pub fn rls_request(domain: &str, descriptors: &[&Descriptor]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| Entry {
                        key: e.key.clone(),
                        value: e.value.clone(),
                    })
                    .collect(),
                hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                is_negative_hits: d.refund,
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}
