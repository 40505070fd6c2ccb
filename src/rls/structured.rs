//! The IETF draft's structured rate-limit headers (draft-ietf-httpapi-ratelimit-headers,
//! since draft 07): `RateLimit-Policy: "default";q=100;w=60` (the quota `q` per window of
//! `w` seconds) and `RateLimit: "default";r=50;t=30` (`r` left, `t` seconds until the
//! quota resets, or until a denied request would pass). A header style beside the draft-03
//! `RateLimit-Limit/-Remaining/-Reset` that Envoy itself and upstream write.

use super::answer::Status;
use super::overall::Role;
use super::response::{constrained, header};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;

/// Which response headers `--response-headers` adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `RateLimit-Limit`, `-Remaining`, `-Reset` (names settable), as upstream.
    #[default]
    Draft03,
    /// `RateLimit-Policy` and `RateLimit` (structured fields, the draft's latest form).
    Structured,
}

/// The policy name of a limit without a `name`.
const DEFAULT_POLICY: &str = "default";

/// `RateLimit-Policy` and `RateLimit` for the most constrained descriptor, plus
/// `Retry-After` when over. `windows_s[i]`: the window of descriptor `i` in seconds.
pub fn headers(
    statuses: &[Status],
    roles: &[Role],
    windows_s: &[u64],
    over_limit: bool,
) -> Vec<HeaderValue> {
    let Some(index) = constrained(statuses, roles) else {
        return Vec::new();
    };
    let (Some(status), Some(window)) = (statuses.get(index), windows_s.get(index)) else {
        return Vec::new();
    };
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let name = match limit.name.as_deref() {
        None | Some("") => DEFAULT_POLICY,
        Some(name) => name,
    };
    let name = sf_string(name);
    let reset = status.reset_seconds();
    let mut headers = vec![
        header(
            "RateLimit-Policy",
            format!("{name};q={};w={window}", limit.requests_per_unit),
        ),
        header(
            "RateLimit",
            format!("{name};r={};t={reset}", status.limit_remaining),
        ),
    ];
    if over_limit {
        headers.push(header("Retry-After", reset.to_string()));
    }
    headers
}

/// A structured-field string (RFC 9651 §3.3.3): printable ASCII in quotes, `"` and `\`
/// escaped; any other byte (a rule name is free text) becomes `?`.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
