use super::*;

fn status(code: Code, remaining: u32, reset_ms: u64) -> Status {
    Status {
        code: code as i32,
        current_limit: Some(CurrentLimit {
            requests_per_unit: 10,
            ..Default::default()
        }),
        limit_remaining: remaining,
        until_reset_ms: Some(reset_ms),
    }
}

#[test]
fn headers_describe_the_most_constrained_descriptor() {
    let statuses = [
        no_limit(),
        status(Code::Ok, 5, 30_000),
        status(Code::OverLimit, 0, 1_500),
        status(Code::Ok, 0, 9_000),
    ];
    let roles = [
        Role::Regular { over: false },
        Role::Regular { over: false },
        Role::Regular { over: true },
        Role::Regular { over: false },
    ];
    let headers = headers(&HeaderNames::default(), &statuses, &roles, true, None);
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("RateLimit-Limit", "10"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "2"),
            ("Retry-After", "2"),
        ]
    );
}

#[test]
fn several_limits_list_every_policy_after_the_limit() {
    let statuses = [status(Code::Ok, 3, 400)];
    let roles = [Role::Regular { over: false }];
    let headers = headers(
        &HeaderNames::default(),
        &statuses,
        &roles,
        false,
        Some(", 10;w=1, 10000;w=86400"),
    );
    assert_eq!(headers[0].value, "10, 10;w=1, 10000;w=86400");
    assert_eq!(headers[1].value, "3");
}

#[test]
fn no_limited_descriptor_means_no_headers() {
    let roles = [Role::Regular { over: false }, Role::Unlimited];
    let statuses = [no_limit(), unlimited()];
    assert!(headers(&HeaderNames::default(), &statuses, &roles, false, None).is_empty());
}

#[test]
fn a_quota_over_its_limit_does_not_take_the_headers_from_an_over_regular_one() {
    let statuses = [
        status(Code::OverLimit, 0, 1_000),
        status(Code::OverLimit, 0, 7_000),
    ];
    let roles = [Role::Quota { over: true }, Role::Regular { over: true }];
    let picked = headers(&HeaderNames::default(), &statuses, &roles, true, None);
    assert_eq!(picked[2].value, "7");
    // Quotas alone: the first with the fewest remaining.
    let roles = [Role::Quota { over: true }, Role::Quota { over: true }];
    let picked = headers(&HeaderNames::default(), &statuses, &roles, true, None);
    assert_eq!(picked[2].value, "1");
}
