use super::*;

#[test]
fn parses_upstreams_example_and_both_field_spellings() {
    let request =
        parse_request(br#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday"}]}]}"#)
            .expect("upstream's README example");
    assert_eq!(request.domain, "dummy");
    assert_eq!(request.descriptors[0].entries[0].key, "perday");

    let request = parse_request(
        br#"{"domain":"d","hits_addend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hitsAddend":0,"limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}"#,
    )
    .expect("snake case, strings for integers");
    assert_eq!(request.hits_addend, 3);
    let descriptor = &request.descriptors[0];
    assert_eq!(descriptor.hits_addend, Some(UInt64Value { value: 0 }));
    let limit = descriptor.limit.as_ref().expect("override");
    assert_eq!(limit.requests_per_unit, 5);
    assert_eq!(limit.unit, RateLimitUnit::Minute as i32);
}

#[test]
fn refuses_what_protojson_refuses() {
    for body in [
        &b"not json"[..],
        br#"{"domain": "d", "descriptor": []}"#,
        br#"{"domain": 5}"#,
        br#"{"hitsAddend": -1}"#,
        br#"{"hitsAddend": 4294967296}"#,
        br#"{"descriptors": [{"limit": {"unit": "FORTNIGHT"}}]}"#,
    ] {
        assert!(
            parse_request(body).is_err(),
            "{} was accepted",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn writes_the_response_as_protojson_does() {
    let response = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![
            DescriptorStatus {
                code: Code::OverLimit as i32,
                current_limit: Some(RateLimit {
                    name: String::new(),
                    requests_per_unit: 5,
                    unit: Unit::Minute as i32,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(Duration {
                    seconds: 59,
                    nanos: 500_000_000,
                }),
                ..Default::default()
            },
            DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        response_json(&response),
        json!({
            "overallCode": "OVER_LIMIT",
            "statuses": [
                {"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 5, "unit": "MINUTE"},
                 "durationUntilReset": "59.500s"},
                {"code": "OK"}
            ]
        })
    );
}
