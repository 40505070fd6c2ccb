use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use gcounter_rls_integration::grpc::{descriptor, request};
use serde_json::json;

use super::*;

#[test]
fn a_peek_asks_every_descriptor_with_no_hits() {
    let mut overridden = descriptor(&[("b", "2")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 7,
        unit: 3,
    });
    overridden.is_negative_hits = true;
    let body = peek_body(&request("d", vec![descriptor(&[("a", "1")]), overridden]));
    assert_eq!(
        body,
        json!({"domain": "d", "descriptors": [
            {"entries": [{"key": "a", "value": "1"}], "hitsAddend": 0},
            {"entries": [{"key": "b", "value": "2"}], "hitsAddend": 0,
             "limit": {"requestsPerUnit": 7, "unit": "HOUR"}},
        ]})
    );
}

#[test]
fn a_status_says_what_a_request_would_get() {
    let status = json!({"code": "OK", "currentLimit": {"requestsPerUnit": 5, "unit": "MINUTE", "name": "r"},
                        "limitRemaining": 2, "durationUntilReset": "41s"});
    let ok = parse_status(&status, 1, false);
    assert_eq!((ok.limit, ok.count, ok.remaining), (Some(5), Some(3), 2));
    assert_eq!(ok.would, "OK (1 left after it)");
    assert_eq!(
        ok.text(),
        "OK at 3 of 5 per minute (2 left, resets in 41s); a request now: OK (1 left after it)"
    );
    assert!(
        parse_status(&status, 3, false)
            .would
            .starts_with("OVER_LIMIT (costs 3, 2 left)")
    );
    assert!(
        parse_status(&status, 3, true)
            .would
            .starts_with("OK (gives 3 back)")
    );
    // limitRemaining is left out at 0, as protobuf's JSON does.
    let full =
        json!({"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 5, "unit": "MINUTE"}});
    let over = parse_status(&full, 1, false);
    assert_eq!((over.would.as_str(), over.count), ("OVER_LIMIT", Some(5)));
    let unlimited = parse_status(&json!({"code": "OK"}), 1, false);
    assert_eq!(unlimited.text(), "OK, not limited");
}
