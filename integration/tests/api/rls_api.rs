//! The `ShouldRateLimit` API of the real binary over a real loopback gRPC connection:
//! statuses, limits, matching, costs, overrides, shadow mode and response headers.
//!
//! Every test starts its own service, so counters start at zero. Windows are aligned to
//! the wall clock and slide, so counting tests first step away from a window boundary.

use gcounter_rls_integration as support;

use std::collections::HashMap;
use std::time::Duration;

use support::Service;
use support::grpc::{
    self, Code, DescriptorStatus, RateLimitDescriptor, RateLimitRequest, RateLimitResponse,
    UInt64Value, Unit, code, codes, descriptor, header, overall, request, with_override,
};
use support::metrics::{count, requests, sample};
use support::rls::Rls;

/// Room for every counting test: all its calls fall in one minute (and one hour).
const WORK: Duration = Duration::from_secs(3);

fn reset_ms(status: &DescriptorStatus) -> i64 {
    grpc::duration_ms(status.duration_until_reset.as_ref())
}

/// OK with no `current_limit`: unknown domain, no matching rule, or a replaced limit.
fn assert_not_limited(status: &DescriptorStatus, what: &str) {
    assert_eq!(code(status), Code::Ok, "{what}: {status:?}");
    assert!(
        status.current_limit.is_none(),
        "{what}: no current_limit expected: {status:?}"
    );
    assert!(
        status.duration_until_reset.is_none(),
        "{what}: no duration_until_reset expected: {status:?}"
    );
}

/// The status carries the limit `requests_per_unit` per `unit`, named `name`.
fn assert_limit(status: &DescriptorStatus, requests_per_unit: u32, unit: Unit, name: &str) {
    let limit = status
        .current_limit
        .as_ref()
        .unwrap_or_else(|| panic!("current_limit expected: {status:?}"));
    assert_eq!(
        limit.requests_per_unit, requests_per_unit,
        "requests_per_unit: {status:?}"
    );
    assert_eq!(Unit::try_from(limit.unit), Ok(unit), "unit: {status:?}");
    assert_eq!(limit.name, name, "limit name: {status:?}");
}

fn assert_reset_within(status: &DescriptorStatus, window: Duration) {
    let ms = reset_ms(status);
    assert!(
        ms > 0 && ms <= window.as_millis() as i64,
        "duration_until_reset {ms} ms should be in (0, {window:?}]: {status:?}"
    );
}

const ORDER_YAML: &str = "\
domain: api
descriptors:
  - key: k
    value: three
    rate_limit:
      unit: minute
      requests_per_unit: 3
      name: three_per_minute
  - key: k
    value: hundred
    rate_limit:
      unit: hour
      requests_per_unit: 100
";

#[tokio::test]
async fn statuses_follow_request_order_and_a_limit_of_n_lets_n_through() {
    let mut rls = Rls::start(ORDER_YAML, &[]).await;
    let descriptors = || {
        vec![
            descriptor(&[("k", "three")]),
            descriptor(&[("k", "unmatched")]),
            descriptor(&[("k", "hundred")]),
        ]
    };
    support::stay_in_one_minute(WORK);

    // Three accepted; the fourth is over on the first descriptor only; a denial consumes
    // nothing, so the fifth is over too, while the other descriptor keeps counting its own
    // accepts.
    for i in 1..=5u32 {
        let r = rls.check("api", descriptors()).await;
        let (want, three_remaining) = if i <= 3 {
            (Code::Ok, 3 - i)
        } else {
            (Code::OverLimit, 0)
        };
        assert_eq!(overall(&r), want, "call {i}: {r:?}");
        let [three, unmatched, hundred] = &r.statuses[..] else {
            unreachable!()
        };
        assert_eq!(code(three), want, "call {i}: {r:?}");
        assert_limit(three, 3, Unit::Minute, "three_per_minute");
        assert_eq!(three.limit_remaining, three_remaining, "call {i}: {r:?}");
        assert_reset_within(three, Duration::from_secs(60));

        assert_not_limited(unmatched, &format!("call {i}, unmatched descriptor"));

        assert_eq!(code(hundred), Code::Ok, "call {i}: {r:?}");
        assert_limit(hundred, 100, Unit::Hour, "");
        assert_eq!(hundred.limit_remaining, 100 - i, "call {i}: {r:?}");
        assert_reset_within(hundred, Duration::from_secs(3_600));
    }

    let text = rls.metrics();
    assert_eq!(requests(&text, "ok"), Some(3.0), "{text}");
    assert_eq!(requests(&text, "over_limit"), Some(2.0), "{text}");
    assert_eq!(rls.decisions("api", "api.k_three", "within_limit"), 3.0);
    assert_eq!(rls.decisions("api", "api.k_three", "over_limit"), 2.0);
    assert_eq!(rls.decisions("api", "api.k_hundred", "within_limit"), 5.0);
}

#[tokio::test]
async fn unknown_domain_and_unmatched_descriptors_are_ok_without_a_limit() {
    let mut rls = Rls::start(ORDER_YAML, &[]).await;

    // (case, domain, descriptors): each answered OK without a limit.
    let cases = [
        (
            "an unknown domain",
            "no_such_domain",
            vec![
                descriptor(&[("k", "three")]),
                descriptor(&[("k", "hundred")]),
            ],
        ),
        (
            "unmatched descriptors",
            "api",
            vec![
                // Unknown value of a known key.
                descriptor(&[("k", "other")]),
                // Unknown key.
                descriptor(&[("j", "three")]),
                // Deeper than the tree: a limit applies only at the last entry.
                descriptor(&[("k", "three"), ("sub", "x")]),
                // Keys and values are case-sensitive.
                descriptor(&[("K", "three")]),
                descriptor(&[("k", "THREE")]),
            ],
        ),
    ];
    for (case, domain, descriptors) in cases {
        let r = rls.check(domain, descriptors).await;
        assert_eq!(overall(&r), Code::Ok, "{case}: {r:?}");
        for (i, s) in r.statuses.iter().enumerate() {
            assert_not_limited(s, &format!("{case}: descriptor {i}"));
        }
        assert!(r.response_headers_to_add.is_empty(), "{case}: {r:?}");
    }
    // Nothing above was counted against k=three.
    support::stay_in_one_minute(WORK);
    let s = rls.one("api", &[("k", "three")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 2), "{s:?}");
}

/// `rls_unmatched_descriptors_total` is documented as "Descriptors of an unknown domain or
/// with no matching rule (answered OK)".
#[tokio::test]
async fn unmatched_descriptors_metric_counts_unknown_domains_too() {
    let mut rls = Rls::start(ORDER_YAML, &[]).await;
    rls.check("api", vec![descriptor(&[("k", "other")])]).await;
    let text = rls.metrics();
    assert_eq!(
        sample(&text, "rls_unmatched_descriptors_total", &[]),
        Some(1.0),
        "{text}"
    );

    rls.check(
        "no_such_domain",
        vec![descriptor(&[("k", "a")]), descriptor(&[("k", "b")])],
    )
    .await;
    let text = rls.metrics();
    assert_eq!(
        sample(&text, "rls_unmatched_descriptors_total", &[]),
        Some(3.0),
        "the two descriptors of an unknown domain should count as unmatched:\n{text}"
    );
}

#[tokio::test]
async fn unlimited_is_ok_without_a_limit_however_many_calls() {
    let yaml = "\
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 1
";
    let mut rls = Rls::start(yaml, &[]).await;
    for i in 0..200 {
        let mut req = request("internal", vec![descriptor(&[("ldap", "server")])]);
        // Large costs change nothing either.
        req.hits_addend = if i % 2 == 0 { 1 } else { 1_000_000 };
        let r = rls.send(req).await;
        assert_eq!(overall(&r), Code::Ok, "call {i}: {r:?}");
        let s = &r.statuses[0];
        assert_eq!(code(s), Code::Ok, "call {i}: {s:?}");
        assert!(
            s.current_limit.is_none(),
            "call {i}: unlimited has no current_limit: {s:?}"
        );
    }
    assert_eq!(
        rls.decisions("internal", "internal.ldap", "unlimited"),
        200.0
    );
    // The limited sibling still limits.
    support::stay_in_one_minute(WORK);
    let azure = rls.codes_in_a_row(2, "internal", &[("azure", "x")]).await;
    assert_eq!(azure, [Code::Ok, Code::OverLimit]);
}

#[tokio::test]
async fn a_replaced_limit_is_dropped_while_the_replacing_one_applies() {
    let yaml = "\
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bob
        rate_limit:
          name: specific_limit
          requests_per_unit: 1
          unit: minute
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bob
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 3
          unit: minute
";
    let mut rls = Rls::start(yaml, &[]).await;
    let specific = || descriptor(&[("key_1", "value_1"), ("user", "bob")]);
    let replacing = || descriptor(&[("key_2", "value_2"), ("user", "bob")]);
    support::stay_in_one_minute(WORK);

    for i in 1..=3u32 {
        let r = rls.check("example7", vec![specific(), replacing()]).await;
        assert_eq!(overall(&r), Code::Ok, "call {i}: {r:?}");
        assert_not_limited(&r.statuses[0], &format!("call {i}, replaced limit"));
        assert_eq!(code(&r.statuses[1]), Code::Ok, "call {i}: {r:?}");
        assert_limit(&r.statuses[1], 3, Unit::Minute, "");
        assert_eq!(r.statuses[1].limit_remaining, 3 - i, "call {i}: {r:?}");
    }
    let r = rls.check("example7", vec![specific(), replacing()]).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_not_limited(&r.statuses[0], "call 4, replaced limit");
    assert_eq!(code(&r.statuses[1]), Code::OverLimit, "{r:?}");

    // Alone, the specific limit applies, and the replaced calls never counted against it.
    let s = rls
        .one("example7", &[("key_1", "value_1"), ("user", "bob")])
        .await;
    assert_eq!(code(&s), Code::Ok, "{s:?}");
    assert_limit(&s, 1, Unit::Minute, "specific_limit");
    assert_eq!(s.limit_remaining, 0, "{s:?}");
    let s = rls
        .one("example7", &[("key_1", "value_1"), ("user", "bob")])
        .await;
    assert_eq!(code(&s), Code::OverLimit, "{s:?}");
}

const SHADOW_YAML: &str = "\
domain: shadow
descriptors:
  - key: user
    value: a
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: user
    value: b
    rate_limit:
      unit: minute
      requests_per_unit: 2
";

#[tokio::test]
async fn shadow_mode_rule_answers_ok_over_the_limit_and_reports_it() {
    let mut rls = Rls::start(SHADOW_YAML, &[]).await;
    support::stay_in_one_minute(WORK);
    for i in 1..=4u32 {
        let r = rls
            .check("shadow", vec![descriptor(&[("user", "a")])])
            .await;
        assert_eq!(overall(&r), Code::Ok, "call {i}: {r:?}");
        let s = &r.statuses[0];
        assert_eq!(code(s), Code::Ok, "call {i}: {s:?}");
        assert_limit(s, 2, Unit::Minute, "");
        assert_eq!(s.limit_remaining, 2u32.saturating_sub(i), "call {i}: {s:?}");
    }
    rls.assert_decisions(
        "shadow",
        &[
            ("shadow.user_a", "within_limit", 2.0),
            ("shadow.user_a", "shadow_over_limit", 2.0),
        ],
    );

    // A rule without shadow_mode in the same domain limits.
    let codes = rls.codes_in_a_row(3, "shadow", &[("user", "b")]).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(rls.decisions("shadow", "shadow.user_b", "over_limit"), 1.0);
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_to_everything_and_reports_shadow_decisions() {
    let mut rls = Rls::start(SHADOW_YAML, &["--shadow-mode"]).await;
    support::stay_in_one_minute(WORK);
    for i in 1..=5u32 {
        let r = rls
            .check(
                "shadow",
                vec![descriptor(&[("user", "b")]), descriptor(&[("user", "a")])],
            )
            .await;
        assert_eq!(overall(&r), Code::Ok, "call {i}: {r:?}");
        // As upstream: the global switch keeps the descriptor's OVER_LIMIT (only the
        // overall code turns OK); a rule in shadow mode answers its descriptor OK.
        let want_b = if i > 2 { Code::OverLimit } else { Code::Ok };
        assert_eq!(codes(&r), [want_b, Code::Ok], "call {i}: {r:?}");
        for s in &r.statuses {
            assert_limit(s, 2, Unit::Minute, "");
        }
    }
    rls.assert_decisions(
        "shadow",
        &[
            ("shadow.user_b", "within_limit", 2.0),
            ("shadow.user_b", "shadow_over_limit", 3.0),
            ("shadow.user_a", "shadow_over_limit", 3.0),
        ],
    );
    let text = rls.metrics();
    assert_eq!(requests(&text, "ok"), Some(5.0), "{text}");
    assert_eq!(
        requests(&text, "over_limit"),
        // Every outcome's series exists from the start (at 0), as Prometheus advises.
        Some(0.0),
        "{text}"
    );
}

#[tokio::test]
async fn hits_addend_sets_the_cost() {
    let yaml = "\
domain: hits
descriptors:
  - key: h
    rate_limit:
      unit: minute
      requests_per_unit: 10
";
    let mut rls = Rls::start(yaml, &[]).await;
    let with = |value: &str, request_hits: u32, descriptor_hits: Option<u64>| {
        let mut d = descriptor(&[("h", value)]);
        d.hits_addend = descriptor_hits.map(|value| UInt64Value { value });
        let mut r = request("hits", vec![d]);
        r.hits_addend = request_hits;
        r
    };
    let remaining = |r: &RateLimitResponse| (code(&r.statuses[0]), r.statuses[0].limit_remaining);
    support::stay_in_one_minute(WORK);

    // Request-level hits_addend = 3 consumes 3; the 4th call (9 + 3 > 10) is denied and
    // consumes nothing, so one more hit still fits exactly.
    for (i, expected) in [(1, 7), (2, 4), (3, 1)] {
        let r = rls.send(with("req3", 3, None)).await;
        assert_eq!(remaining(&r), (Code::Ok, expected), "call {i}: {r:?}");
    }
    let r = rls.send(with("req3", 3, None)).await;
    assert_eq!(remaining(&r), (Code::OverLimit, 0), "{r:?}");
    let r = rls.send(with("req3", 1, None)).await;
    assert_eq!(
        remaining(&r),
        (Code::Ok, 0),
        "reaching the limit exactly is allowed: {r:?}"
    );

    // Request-level 0 means 1.
    for expected in [9, 8, 7] {
        let r = rls.send(with("zero", 0, None)).await;
        assert_eq!(remaining(&r), (Code::Ok, expected), "{r:?}");
    }

    // The descriptor's hits_addend wins over the request's.
    for expected in [8, 6] {
        let r = rls.send(with("desc", 5, Some(2))).await;
        assert_eq!(remaining(&r), (Code::Ok, expected), "{r:?}");
    }

    // A descriptor hits_addend of 0 checks without consuming.
    for _ in 0..3 {
        let r = rls.send(with("peek", 4, Some(0))).await;
        assert_eq!(remaining(&r), (Code::Ok, 10), "{r:?}");
    }
    let r = rls.send(with("peek", 1, None)).await;
    assert_eq!(remaining(&r), (Code::Ok, 9), "{r:?}");
    let r = rls.send(with("peek", 1, Some(0))).await;
    assert_eq!(remaining(&r), (Code::Ok, 9), "{r:?}");

    // Per descriptor within one request: each descriptor its own cost.
    let mut a = descriptor(&[("h", "mix_a")]);
    a.hits_addend = Some(UInt64Value { value: 6 });
    let b = descriptor(&[("h", "mix_b")]);
    let mut r = request("hits", vec![a, b]);
    r.hits_addend = 2;
    let r = rls.send(r).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (4, 8),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_request_limit_override_is_honoured() {
    let mut rls = Rls::start(&support::one_rule("ovr", "o", "minute", 1, 100), &[]).await;

    // (case, request, the words its error message must hold)
    let cases: [(&str, RateLimitRequest, &[&str]); 4] = [
        (
            "an override with unit UNKNOWN",
            request(
                "ovr",
                vec![with_override(&[("o", "x")], 2, Unit::Unknown as i32)],
            ),
            &["unit", "UNKNOWN"],
        ),
        (
            "an override with unit 99",
            request(
                "ovr",
                vec![
                    descriptor(&[("o", "x")]),
                    with_override(&[("o", "x")], 2, 99),
                ],
            ),
            &["unit", "99"],
        ),
        (
            "no domain",
            request("", vec![descriptor(&[("o", "x")])]),
            &["domain"],
        ),
        ("no descriptor", request("ovr", vec![]), &["descriptor"]),
    ];
    for (case, request, words) in cases {
        let status = grpc::should_rate_limit_err(&mut rls.client, request).await;
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{case}: {status:?}"
        );
        for word in words {
            assert!(
                status.message().contains(word),
                "{case}: the message should name the {word}: {status:?}"
            );
        }
    }

    let text = rls.metrics();
    assert_eq!(requests(&text, "invalid_argument"), Some(4.0), "{text}");
    // Nothing was counted by the rejected requests.
    support::stay_in_one_minute(WORK);
    let s = rls.one("ovr", &[("o", "x")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 99), "{s:?}");
}

/// The same limits as the in-process header tests (`src/rls/tests.rs`).
fn headers_yaml() -> String {
    support::flat_rules("hdr", &[("wide", "hour", 10), ("narrow", "minute", 2)])
}

fn header_map(r: &RateLimitResponse) -> HashMap<String, String> {
    let map: HashMap<String, String> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.to_ascii_lowercase(), h.value.clone()))
        .collect();
    assert_eq!(
        map.len(),
        r.response_headers_to_add.len(),
        "duplicate response headers: {r:?}"
    );
    map
}

fn hdr_descriptors() -> Vec<RateLimitDescriptor> {
    vec![descriptor(&[("wide", "w")]), descriptor(&[("narrow", "n")])]
}

#[tokio::test]
async fn response_headers_are_off_by_default() {
    let mut rls = Rls::start(&headers_yaml(), &[]).await;
    support::stay_in_one_minute(WORK);
    for i in 1..=3 {
        let r = rls.check("hdr", hdr_descriptors()).await;
        assert!(r.response_headers_to_add.is_empty(), "call {i}: {r:?}");
        assert!(r.request_headers_to_add.is_empty(), "call {i}: {r:?}");
    }
}

#[tokio::test]
async fn response_headers_describe_the_most_constrained_descriptor() {
    let mut rls = Rls::start(&headers_yaml(), &["--response-headers"]).await;
    support::stay_in_one_minute(WORK);
    // (narrow remaining, over?)
    for (i, remaining, over) in [(1, "1", false), (2, "0", false), (3, "0", true)] {
        let r = rls.check("hdr", hdr_descriptors()).await;
        let h = header_map(&r);
        assert_eq!(
            header(&r, "ratelimit-limit"),
            Some("2"),
            "call {i}: the minute limit has fewer remaining than the hour limit: {r:?}"
        );
        assert_eq!(
            header(&r, "ratelimit-remaining"),
            Some(remaining),
            "call {i}: {r:?}"
        );
        let reset: i64 = h
            .get("ratelimit-reset")
            .unwrap_or_else(|| panic!("call {i}: no RateLimit-Reset: {r:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("call {i}: RateLimit-Reset not a number ({e}): {r:?}"));
        assert!(
            (1..=60).contains(&reset),
            "call {i}: RateLimit-Reset {reset}: {r:?}"
        );
        if over {
            assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
            assert_eq!(
                header(&r, "retry-after"),
                Some(reset.to_string().as_str()),
                "Retry-After should equal the reset when over: {r:?}"
            );
            assert_eq!(h.len(), 4, "{r:?}");
        } else {
            assert_eq!(overall(&r), Code::Ok, "{r:?}");
            assert!(
                !h.contains_key("retry-after"),
                "call {i}: no Retry-After when OK: {r:?}"
            );
            assert_eq!(h.len(), 3, "{r:?}");
        }
    }
    // A request with no limited descriptor gets no headers.
    let r = rls.check("hdr", vec![descriptor(&[("other", "x")])]).await;
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
}

#[tokio::test]
async fn response_header_names_can_be_changed() {
    let mut rls = Rls::start(
        &headers_yaml(),
        &[
            "--response-headers",
            "--limit-header",
            "X-Foo-Limit",
            "--remaining-header",
            "X-Foo-Remaining",
            "--reset-header",
            "X-Foo-Reset",
        ],
    )
    .await;
    support::stay_in_one_minute(WORK);
    let r = rls.check("hdr", vec![descriptor(&[("wide", "w")])]).await;
    let keys: Vec<&str> = r
        .response_headers_to_add
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(
        keys,
        ["X-Foo-Limit", "X-Foo-Remaining", "X-Foo-Reset"],
        "{r:?}"
    );
    let limit_and_remaining = (header(&r, "x-foo-limit"), header(&r, "x-foo-remaining"));
    assert_eq!(limit_and_remaining, (Some("10"), Some("9")), "{r:?}");
}

#[tokio::test]
async fn zero_requests_per_unit_is_always_over() {
    let yaml = "\
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";
    let mut rls = Rls::start(yaml, &[]).await;
    for i in 0..3 {
        let r = rls
            .check(
                "edge_proxy_per_ip",
                vec![descriptor(&[("remote_address", "50.0.0.5")])],
            )
            .await;
        assert_eq!(overall(&r), Code::OverLimit, "call {i}: {r:?}");
        let s = &r.statuses[0];
        assert_eq!(
            (code(s), s.limit_remaining),
            (Code::OverLimit, 0),
            "call {i}: {s:?}"
        );
        assert_limit(s, 0, Unit::Second, "");
    }
    let s = rls
        .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")])
        .await;
    assert_eq!(code(&s), Code::Ok, "{s:?}");
    assert_limit(&s, 10, Unit::Minute, "");
}

const MATCH_YAML: &str = r#"
domain: match
descriptors:
  - key: path
    value: "/api/*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: api}
  - key: path
    value: "/v1/*/users"
    rate_limit: {unit: minute, requests_per_unit: 2, name: users}
  - key: path
    value: "/api/special"
    rate_limit: {unit: minute, requests_per_unit: 5, name: special}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_ip}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2, name: acme_path}
"#;

#[tokio::test]
async fn wildcards_exact_values_value_less_keys_and_nesting() {
    let mut rls = Rls::start(MATCH_YAML, &[]).await;
    support::stay_in_one_minute(WORK);

    // Trailing wildcard; each runtime value has its own counter.
    let s = rls.one("match", &[("path", "/api/foo")]).await;
    assert_limit(&s, 2, Unit::Minute, "api");
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "{s:?}");
    let s = rls.one("match", &[("path", "/api/foo")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 0), "{s:?}");
    let s = rls.one("match", &[("path", "/api/foo")]).await;
    assert_eq!(code(&s), Code::OverLimit, "{s:?}");
    let s = rls.one("match", &[("path", "/api/bar/baz")]).await;
    assert_limit(&s, 2, Unit::Minute, "api");
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "{s:?}");
    let s = rls.one("match", &[("path", "/api/")]).await;
    assert_limit(&s, 2, Unit::Minute, "api");

    // Wildcard in the middle.
    let s = rls.one("match", &[("path", "/v1/42/users")]).await;
    assert_limit(&s, 2, Unit::Minute, "users");
    for unmatched in ["/v1/42/groups", "/v1/42/users/7", "/v2/42/users", "/api"] {
        let s = rls.one("match", &[("path", unmatched)]).await;
        assert_not_limited(&s, unmatched);
    }

    // The exact value beats the wildcard that also matches it.
    let s = rls.one("match", &[("path", "/api/special")]).await;
    assert_limit(&s, 5, Unit::Minute, "special");
    assert_eq!(s.limit_remaining, 4, "{s:?}");

    // A value-less key: one counter per runtime value, each with the full limit.
    for ip in ["10.0.0.1", "10.0.0.2"] {
        for remaining in [1, 0] {
            let s = rls.one("match", &[("remote_address", ip)]).await;
            assert_limit(&s, 2, Unit::Minute, "per_ip");
            assert_eq!(
                (code(&s), s.limit_remaining),
                (Code::Ok, remaining),
                "{ip}: {s:?}"
            );
        }
        let s = rls.one("match", &[("remote_address", ip)]).await;
        assert_eq!(code(&s), Code::OverLimit, "{ip}: {s:?}");
    }

    // Nested descriptors match only at full depth.
    let s = rls.one("match", &[("tenant", "acme")]).await;
    assert_not_limited(&s, "tenant alone");
    let s = rls
        .one("match", &[("tenant", "acme"), ("path", "/x")])
        .await;
    assert_limit(&s, 2, Unit::Minute, "acme_path");
    let s = rls
        .one("match", &[("tenant", "other"), ("path", "/x")])
        .await;
    assert_not_limited(&s, "other tenant");
    let s = rls
        .one(
            "match",
            &[("tenant", "acme"), ("path", "/x"), ("extra", "1")],
        )
        .await;
    assert_not_limited(&s, "deeper than the tree");
    let s = rls
        .one("match", &[("path", "/x"), ("tenant", "acme")])
        .await;
    assert_not_limited(&s, "entries in the wrong order");
}

#[tokio::test]
async fn unit_multiplier_stretches_the_window() {
    let yaml = "\
domain: mult
descriptors:
  - key: k
    rate_limit:
      unit: minute
      unit_multiplier: 5
      requests_per_unit: 7
";
    let mut rls = Rls::start(yaml, &[]).await;
    const WINDOW_MS: u64 = 300_000;
    for i in 0..3 {
        let before = support::now_ms();
        let s = rls.one("mult", &[("k", &format!("v{i}"))]).await;
        let after = support::now_ms();
        assert_eq!(code(&s), Code::Ok, "{s:?}");
        assert_limit(&s, 7, Unit::Minute, "");
        assert_eq!(s.limit_remaining, 6, "{s:?}");
        let reset = u64::try_from(reset_ms(&s)).expect("non-negative reset");
        assert!(reset > 0 && reset <= WINDOW_MS, "reset {reset} ms: {s:?}");
        // The cell ends on a multiple of 5 minutes since the epoch: between the
        // clock before the call and after it (a few ms of slack for rounding).
        let (lo, hi) = (before + reset - 5, after + reset + 5);
        let boundary = hi / WINDOW_MS * WINDOW_MS;
        assert!(
            boundary >= lo,
            "reset {reset} ms does not end a 5-minute cell: call between {before} and {after} ms: {s:?}"
        );
        // Unless the call was in the cell's last minute, more than a minute is left.
        let expected = WINDOW_MS - before % WINDOW_MS;
        if expected > 61_000 {
            assert!(
                reset > 60_000,
                "reset {reset} ms, expected about {expected} ms: {s:?}"
            );
        }
    }
    let rlconfig = rls.service.admin_get("/rlconfig").body_text();
    assert!(rlconfig.contains("unit_multiplier: 5"), "{rlconfig}");
}

#[tokio::test]
async fn every_unit_is_reported_with_its_proto_enum() {
    let yaml = "\
domain: units
descriptors:
  - {key: u, value: second, rate_limit: {unit: second, requests_per_unit: 11}}
  - {key: u, value: minute, rate_limit: {unit: minute, requests_per_unit: 12}}
  - {key: u, value: hour, rate_limit: {unit: hour, requests_per_unit: 13}}
  - {key: u, value: day, rate_limit: {unit: day, requests_per_unit: 14}}
  - {key: u, value: week, rate_limit: {unit: WEEK, requests_per_unit: 15}}
  - {key: u, value: month, rate_limit: {unit: month, requests_per_unit: 16}}
  - {key: u, value: year, rate_limit: {unit: Year, requests_per_unit: 17}}
";
    let mut rls = Rls::start(yaml, &[]).await;
    let cases = [
        ("second", Unit::Second, 1, 1u64),
        ("minute", Unit::Minute, 2, 60),
        ("hour", Unit::Hour, 3, 3_600),
        ("day", Unit::Day, 4, 86_400),
        ("week", Unit::Week, 7, 604_800),
        ("month", Unit::Month, 5, 2_592_000),
        ("year", Unit::Year, 6, 31_536_000),
    ];
    let r = rls
        .check(
            "units",
            cases
                .iter()
                .map(|(v, ..)| descriptor(&[("u", v)]))
                .collect(),
        )
        .await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    for (i, ((value, unit, number, seconds), s)) in cases.iter().zip(&r.statuses).enumerate() {
        assert_eq!(code(s), Code::Ok, "{value}: {s:?}");
        assert_limit(s, 11 + i as u32, *unit, "");
        assert_eq!(
            s.current_limit.as_ref().map(|l| l.unit),
            Some(*number),
            "{value}: {s:?}"
        );
        assert_reset_within(s, Duration::from_secs(*seconds));
    }
}

#[tokio::test]
async fn a_config_directory_serves_every_file_and_domain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).expect("write config file");
    };
    write(
        "alpha.yaml",
        "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    write(
        "beta.yml",
        "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    );
    // Subdirectories, dot-files and any extension are config files too (as upstream's
    // runtime reads a directory); `config_parity` shows them.
    let service = Service::start(dir.path(), &[]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    support::stay_in_one_minute(WORK);

    let call = |domain: &'static str| request(domain, vec![descriptor(&[("k", "same")])]);
    let a = grpc::should_rate_limit(&mut client, call("alpha")).await;
    assert_eq!(code(&a.statuses[0]), Code::Ok, "{a:?}");
    assert_limit(&a.statuses[0], 1, Unit::Minute, "");
    // Same key and value in another domain: its own rule and its own counter.
    let b = grpc::should_rate_limit(&mut client, call("beta")).await;
    assert_eq!(code(&b.statuses[0]), Code::Ok, "{b:?}");
    assert_limit(&b.statuses[0], 2, Unit::Hour, "");
    assert_eq!(b.statuses[0].limit_remaining, 1, "{b:?}");
    let a = grpc::should_rate_limit(&mut client, call("alpha")).await;
    assert_eq!(code(&a.statuses[0]), Code::OverLimit, "{a:?}");

    let rlconfig = service.admin_get("/rlconfig").body_text();
    assert_eq!(
        rlconfig,
        "alpha.k: unit=MINUTE requests_per_unit=1, shadow_mode: false\n\
         beta.k: unit=HOUR requests_per_unit=2, shadow_mode: false\n"
    );
}

#[tokio::test]
async fn counters_are_injective() {
    let yaml = "\
domain: inj
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
  # These two would share upstream's `key_value` cache key `a_b_c`.
  - key: a_b
    value: c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    value: b_c
    rate_limit: {unit: minute, requests_per_unit: 1}
";
    let mut rls = Rls::start(yaml, &[]).await;
    // Pairs of (a, b) values whose naive joins collide; all strings distinct across pairs.
    let pairs: [[(&str, &str); 2]; 7] = [
        [("x", "y:z"), ("x:y", "z")],
        [("p_q", "r"), ("p", "q_r")],
        [("ab", "c"), ("a", "bc")],
        [("s/", "t"), ("s", "/t")],
        [("1:u", ""), ("", "1:u")],
        [("3:m1:n", "o"), ("m", "1:n1:o")],
        [("w.", "v"), ("w", ".v")],
    ];
    support::stay_in_one_minute(WORK);
    for [first, second] in pairs {
        let one = |(a, b): (&'static str, &'static str)| vec![descriptor(&[("a", a), ("b", b)])];
        let r = rls.check("inj", one(first)).await;
        assert_eq!(code(&r.statuses[0]), Code::Ok, "{first:?}: {r:?}");
        assert_limit(&r.statuses[0], 1, Unit::Minute, "");
        let r = rls.check("inj", one(second)).await;
        assert_eq!(
            code(&r.statuses[0]),
            Code::Ok,
            "{second:?} must not share the counter of {first:?}: {r:?}"
        );
        // Each one's own counter is full now.
        let r = rls.check("inj", one(first)).await;
        assert_eq!(code(&r.statuses[0]), Code::OverLimit, "{first:?}: {r:?}");
    }

    let s = rls.one("inj", &[("a_b", "c")]).await;
    assert_eq!(code(&s), Code::Ok, "{s:?}");
    let s = rls.one("inj", &[("a", "b_c")]).await;
    assert_eq!(
        code(&s),
        Code::Ok,
        "a=b_c must not share the counter of a_b=c: {s:?}"
    );
    let s = rls.one("inj", &[("a", "b_c")]).await;
    assert_eq!(code(&s), Code::OverLimit, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_admit_more_than_the_limit() {
    let yaml = "\
domain: race
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let rls = Rls::start(yaml, &[]).await;
    support::stay_in_one_minute(WORK);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        // Separate connections as well as concurrent streams on each.
        let client = grpc::rls_client(rls.service.grpc_addr).await;
        for _ in 0..25 {
            let mut client = client.clone();
            tasks.push(tokio::spawn(async move {
                let r = grpc::should_rate_limit(
                    &mut client,
                    request("race", vec![descriptor(&[("k", "hot")])]),
                )
                .await;
                code(&r.statuses[0])
            }));
        }
    }
    let mut accepted = 0;
    for task in tasks {
        if task.await.expect("call task") == Code::Ok {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 20, "100 concurrent calls against a limit of 20");
}

#[tokio::test]
async fn counting_continues_across_background_replays() {
    let yaml = "\
domain: replay
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 5
";
    let mut rls = Rls::start(yaml, &[]).await;
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(4));
    // Cells waiting for a replay: an accept queues its cell before it is answered.
    let pending = |rls: &Rls| count(&rls.metrics(), "rls_replay_pending_cells", &[]);
    let mut seen = Vec::new();
    for i in 0..6 {
        let s = rls.one("replay", &[("k", "v")]).await;
        seen.push((code(&s), s.limit_remaining));
        if i == 1 || i == 3 {
            // A replay takes the accepted work (alone in its region, the process keeps it in
            // the cell, which is the region's count; the cell goes to the in-process origin
            // only once evicted): the work must be counted once, neither lost nor doubled.
            support::eventually("the accepted work replayed, nothing pending", true, || {
                pending(&rls) == 0.0
            });
        }
    }
    assert_eq!(
        seen,
        [
            (Code::Ok, 4),
            (Code::Ok, 3),
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ]
    );
}
