use super::*;
use crate::rls::answer::CurrentLimit;

fn status(name: &str, remaining: u32, reset_ms: u64) -> Status {
    Status {
        current_limit: Some(CurrentLimit {
            name: Some(name.into()),
            requests_per_unit: 100,
            ..Default::default()
        }),
        limit_remaining: remaining,
        until_reset_ms: Some(reset_ms),
        ..Status::ok()
    }
}

fn pairs(headers: &[HeaderValue]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect()
}

/// The headers of an answer with one regular status, over its limit or not.
fn one_regular(status: Status, window_s: u64, over: bool) -> Vec<HeaderValue> {
    headers(&[status], &[Role::Regular { over }], &[window_s], over)
}

#[test]
fn the_drafts_example_and_a_retry_after_when_over() {
    let under = one_regular(status("", 50, 30_000), 60, false);
    assert_eq!(
        pairs(&under),
        [
            ("RateLimit-Policy", "\"default\";q=100;w=60"),
            ("RateLimit", "\"default\";r=50;t=30"),
        ]
    );
    let over = one_regular(status("per \"ip\"\n", 0, 1_500), 1, true);
    assert_eq!(
        pairs(&over),
        [
            ("RateLimit-Policy", "\"per \\\"ip\\\"?\";q=100;w=1"),
            ("RateLimit", "\"per \\\"ip\\\"?\";r=0;t=2"),
            ("Retry-After", "2"),
        ]
    );
}
