use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use gcounter_engine::ManualClock;
use gcounter_rls_integration::grpc::{descriptor, request};

use super::*;
use crate::rls::{RateLimiter, RlsSettings};

const YAML: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per_user}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unit: minute, requests_per_unit: 100}
";

fn limiter(settings: RlsSettings) -> RateLimiter {
    let limits = crate::config::load_str("test.yaml", YAML).expect("limits");
    let clock = Arc::new(ManualClock::new(1_700_000_040_000));
    RateLimiter::in_process(limits, clock as _, 1_000, settings).0
}

/// The answer to two calls of `entries` (the second is over its limit of one).
async fn second(limiter: &RateLimiter, entries: &[&[(&str, &str)]]) -> crate::rls::Answer {
    let call = || request("d", entries.iter().map(|e| descriptor(e)).collect());
    let first = limiter.should_rate_limit(&call()).await.expect("answer");
    assert_eq!(first.overall_code, Code::Ok);
    assert_eq!(
        in_metadata(first.dynamic_metadata.as_deref()),
        None,
        "an OK answer names none"
    );
    limiter.should_rate_limit(&call()).await.expect("answer")
}

#[tokio::test]
async fn an_over_limit_answer_names_the_rule_that_refused_it() {
    let limiter = limiter(RlsSettings::default());
    let named = second(&limiter, &[&[("free", "f")], &[("user", "ann")]]).await;
    assert_eq!(named.overall_code, Code::OverLimit);
    assert_eq!(
        in_metadata(named.dynamic_metadata.as_deref()),
        Some("per_user")
    );
    assert_eq!(
        named.dynamic_metadata.as_ref().map(|m| m.fields.len()),
        Some(1)
    );
    assert!(
        named.response_headers_to_add.is_empty(),
        "no header unless asked"
    );
    // Without a `name`, the rule's path.
    let unnamed = second(&limiter, &[&[("path", "/x")]]).await;
    assert_eq!(
        in_metadata(unnamed.dynamic_metadata.as_deref()),
        Some("d.path")
    );
}

#[tokio::test]
async fn the_header_when_asked_and_upstream_s_metadata_kept() {
    let limiter = limiter(RlsSettings {
        rule_header: Some("x-ratelimit-rule".into()),
        response_dynamic_metadata: true,
        ..RlsSettings::default()
    });
    let answer = second(&limiter, &[&[("user", "bob")]]).await;
    let headers: Vec<(&str, &str)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(headers, [("x-ratelimit-rule", "per_user")]);
    let metadata = answer.dynamic_metadata.as_deref().expect("metadata");
    assert_eq!(in_metadata(Some(metadata)), Some("per_user"));
    assert!(
        metadata.fields.contains_key("domain"),
        "upstream's fields stay"
    );
}

#[test]
fn the_received_descriptors_are_logged_as_json() {
    let mut costly = descriptor(&[("k", "a\"b"), ("k2", "v")]);
    costly.hits_addend = Some(UInt64Value { value: 5 });
    costly.is_negative_hits = true;
    let text = Received(&[costly, descriptor(&[("x", "")])]).to_string();
    let parsed: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        parsed,
        serde_json::json!([
            {"entries": [["k", "a\"b"], ["k2", "v"]], "hits_addend": 5, "is_negative_hits": true},
            {"entries": [["x", ""]]}
        ])
    );
}
