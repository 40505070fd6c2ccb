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

#[test]
fn the_drafts_example_and_a_retry_after_when_over() {
    let statuses = [status("", 50, 30_000)];
    let roles = [Role::Regular { over: false }];
    assert_eq!(
        pairs(&headers(&statuses, &roles, &[60], false)),
        [
            ("RateLimit-Policy", "\"default\";q=100;w=60"),
            ("RateLimit", "\"default\";r=50;t=30"),
        ]
    );
    let statuses = [status("per \"ip\"\n", 0, 1_500)];
    let roles = [Role::Regular { over: true }];
    assert_eq!(
        pairs(&headers(&statuses, &roles, &[1], true)),
        [
            ("RateLimit-Policy", "\"per \\\"ip\\\"?\";q=100;w=1"),
            ("RateLimit", "\"per \\\"ip\\\"?\";r=0;t=2"),
            ("Retry-After", "2"),
        ]
    );
}
