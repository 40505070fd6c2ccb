//! The rule named where operators look: which rule refused a request, in the answer's
//! dynamic metadata (`limitedBy`, under the rate limit filter's namespace in Envoy, where an
//! access log reads it with `%DYNAMIC_METADATA(envoy.filters.http.ratelimit:limitedBy)%`),
//! in a response header when asked (`--rule-header`), in the decision span and in the
//! denial's debug log line; and the request as received, logged at debug.
//!
//! A rule is named by its `name`, or its path when it has none. Only an OVER_LIMIT answer
//! names one: the descriptor that denies it, as `response::constrained` picks it. Its metadata
//! is a `Struct` built per denied request (a few small allocations): the one thing an answer
//! allocates on the warm path, and only when it denies.

use std::fmt;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};

use super::answer::Status;
use super::overall::Role;
use super::plan::Plan;
use super::response;

/// The dynamic metadata field that names the refusing rule.
pub const METADATA_FIELD: &str = "limitedBy";

/// The label of a request override's limit (no rule of the config).
const OVERRIDE: &str = "override";

/// The rule that refused an OVER_LIMIT request: the denying descriptor's rule label (its
/// `name`, else its path), or `override` for a limit the request carried itself.
pub fn refusing_rule(
    plans: &[Plan<'_>],
    statuses: &[Status],
    roles: &[Role],
    over_limit: bool,
) -> Option<Arc<str>> {
    if !over_limit {
        return None;
    }
    let index = response::constrained(statuses, roles)?;
    match plans.get(index)? {
        Plan::Limited(limited) => Some(
            limited
                .rule
                .as_ref()
                .map_or_else(|| Arc::from(OVERRIDE), |rule| Arc::clone(rule.label())),
        ),
        Plan::NoLimit | Plan::Unlimited(_) => None,
    }
}

/// Adds `limitedBy` to the answer's metadata, creating it when the service does not send
/// metadata otherwise.
pub fn add_to_metadata(metadata: &mut Option<Box<Struct>>, rule: &str) {
    let metadata = metadata.get_or_insert_with(Box::default);
    metadata.fields.insert(
        METADATA_FIELD.to_owned(),
        Value {
            kind: Some(Kind::StringValue(rule.to_owned())),
        },
    );
}

/// The rule named in an answer's metadata, if any.
pub fn in_metadata(metadata: Option<&Struct>) -> Option<&str> {
    match metadata?.fields.get(METADATA_FIELD)?.kind.as_ref()? {
        Kind::StringValue(rule) => Some(rule),
        _ => None,
    }
}

/// A request's descriptors as JSON, for the debug log of what the service received: the
/// entries as `[key, value]` pairs, and `hits_addend`, `is_negative_hits` and `limit` when
/// set. Written only when the line is logged.
pub struct Received<'r>(pub &'r [RateLimitDescriptor]);

impl fmt::Display for Received<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |text: &str| serde_json::Value::String(text.to_owned()).to_string();
        f.write_str("[")?;
        for (i, descriptor) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str("{\"entries\":[")?;
            for (j, entry) in descriptor.entries.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                write!(f, "[{},{}]", quoted(&entry.key), quoted(&entry.value))?;
            }
            f.write_str("]")?;
            if let Some(hits) = &descriptor.hits_addend {
                write!(f, ",\"hits_addend\":{}", hits.value)?;
            }
            if descriptor.is_negative_hits {
                f.write_str(",\"is_negative_hits\":true")?;
            }
            if let Some(limit) = &descriptor.limit {
                let unit =
                    super::units::from_proto(limit.unit).map_or("UNKNOWN", |u| u.as_proto_name());
                write!(
                    f,
                    ",\"limit\":{{\"requests_per_unit\":{},\"unit\":\"{unit}\"}}",
                    limit.requests_per_unit
                )?;
            }
            f.write_str("}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests;
