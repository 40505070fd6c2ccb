//! Statuses and response headers, shaped as envoyproxy/ratelimit answers them.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use super::answer::{CurrentLimit, Status};
use super::overall::Role;
use super::plan::{LimitWindow, Limited, Plan};
use super::units;
use gcounter_engine::Verdict;

/// Names of the optional response headers (IETF draft `RateLimit-*` fields by default).
#[derive(Debug, Clone)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

pub fn no_limit() -> Status {
    Status::ok()
}

/// As envoyproxy/ratelimit: unlimited answers OK with the whole u32 range remaining.
pub fn unlimited() -> Status {
    Status {
        limit_remaining: u32::MAX,
        ..Status::ok()
    }
}

/// The status of a limited descriptor; `window` is the limit the verdict is about (with
/// several limits, the most constrained one, or the one that denied).
pub fn limited(
    limited: &Limited<'_>,
    window: LimitWindow,
    verdict: &Verdict,
    code: Code,
) -> Status {
    Status {
        code: code as i32,
        current_limit: Some(CurrentLimit {
            // The rule's own `Arc`: no copy of the name per answer.
            name: limited.name().cloned(),
            requests_per_unit: window.requests_per_unit,
            unit: units::to_proto(window.unit) as i32,
        }),
        limit_remaining: u32::try_from(verdict.remaining).unwrap_or(u32::MAX),
        until_reset_ms: Some(verdict.until_reset_ms),
    }
}

/// The quota policies of every limit of the request's limited descriptors, in the IETF draft-03
/// form (`, 10;w=1, 10000;w=86400`: requests per window of `w` seconds), when a descriptor has
/// several limits (`rate_limits`); `None` otherwise, so `RateLimit-Limit` stays upstream's
/// single number for files without the extension.
pub fn policies(plans: &[Plan<'_>]) -> Option<String> {
    let limited = || {
        plans.iter().filter_map(|plan| match plan {
            Plan::Limited(limited) => Some(limited),
            Plan::NoLimit | Plan::Unlimited(_) => None,
        })
    };
    if !limited().any(Limited::has_more_limits) {
        return None;
    }
    let mut out = String::new();
    for window in limited().flat_map(Limited::windows) {
        out.push_str(&format!(
            ", {};w={}",
            window.requests_per_unit,
            window.duration_ms / 1_000
        ));
    }
    Some(out)
}

/// The most constrained limited descriptor, by index. As envoyproxy/ratelimit picks it: the
/// first with the fewest remaining, unless a regular (not quota) descriptor is over its
/// limit, which wins (the last such one) because it is what denies the request.
pub fn constrained(statuses: &[Status], roles: &[Role]) -> Option<usize> {
    let mut constrained = None;
    let mut least = u32::MAX;
    for (index, (status, role)) in statuses.iter().zip(roles).enumerate() {
        if status.current_limit.is_some() && status.limit_remaining < least {
            constrained = Some(index);
            least = status.limit_remaining;
        }
        if *role == (Role::Regular { over: true }) {
            constrained = Some(index);
            least = 0;
        }
    }
    constrained
}

/// `RateLimit-Limit/-Remaining/-Reset` for the most constrained limited descriptor
/// ([`constrained`]), plus `Retry-After` when the request is over. `policies` (see
/// [`policies`]) follow the limit in `RateLimit-Limit`, as the draft-03 header lists them.
pub fn headers(
    names: &HeaderNames,
    statuses: &[Status],
    roles: &[Role],
    over_limit: bool,
    policies: Option<&str>,
) -> Vec<HeaderValue> {
    let Some(status) = constrained(statuses, roles).and_then(|index| statuses.get(index)) else {
        return Vec::new();
    };
    let reset_seconds = status.reset_seconds();
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let mut headers = vec![
        header(
            &names.limit,
            format!("{limit}{}", policies.unwrap_or_default()),
        ),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, reset_seconds.to_string()),
    ];
    if over_limit {
        headers.push(header("Retry-After", reset_seconds.to_string()));
    }
    headers
}

pub fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
