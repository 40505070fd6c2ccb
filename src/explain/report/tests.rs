use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::UInt64Value;
use gcounter_rls_integration::grpc::{descriptor, request};

use super::*;

const YAML: &str = "\
domain: d
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 5, name: acme}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2, name: acme_path, replaces: [{name: acme}]}
  - key: tenant
    value: \"gl*\"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 9, guarantee: never_above}
  - key: tenant
    descriptors:
      - key: path
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
";

fn limits() -> LimitsConfig {
    crate::config::load_str("limits.yaml", YAML).expect("limits")
}

fn one(entries: &[(&str, &str)]) -> DescriptorReport {
    let explanation = explain(&limits(), &request("d", vec![descriptor(entries)]));
    explanation.descriptors.into_iter().next().expect("one")
}

#[test]
fn a_limited_descriptor_shows_its_path_rule_and_counter() {
    let report = one(&[("tenant", "acme")]);
    assert_eq!(report.outcome, "limited");
    assert_eq!(report.entries[0].node.as_deref(), Some("tenant=acme"));
    assert_eq!(report.entries[0].matched, Some("exact"));
    assert_eq!(report.entries[0].at.as_deref(), Some("limits.yaml:3"));
    let rule = report.rule.expect("rule");
    assert_eq!(
        (rule.label.as_str(), rule.at.as_str()),
        ("acme", "limits.yaml:3")
    );
    assert_eq!(rule.limits, ["5 per minute"]);
    assert_eq!(rule.guarantee, "never_below");
    let counter = report.counter.expect("counter");
    assert_eq!(counter.namespace, "6:tenant=4:acme/");
    assert_eq!(counter.identifier, "4:acme");
    assert_eq!(counter.windows, [(60_000, 5)]);
    assert!(!counter.shared);
    assert_eq!(report.cost, 1);
}

#[test]
fn a_shared_wildcard_and_an_unlimited_rule() {
    let report = one(&[("tenant", "globex")]);
    assert_eq!(report.entries[0].matched, Some("shared_wildcard"));
    assert_eq!(
        report.rule.as_ref().map(|r| r.guarantee),
        Some("never_above")
    );
    let mut text = String::new();
    crate::explain::render::explanation(
        &mut text,
        &explain(
            &limits(),
            &request("d", vec![descriptor(&[("tenant", "globex")])]),
        ),
    );
    assert!(text.contains("guarantee never_above"), "{text}");
    let counter = report.counter.expect("counter");
    assert!(counter.shared);
    assert_eq!(
        counter.identifier, "*",
        "every value of the wildcard shares it"
    );
    let report = one(&[("health", "x")]);
    assert_eq!(report.outcome, "unlimited");
    assert!(report.counter.is_none());
}

#[test]
fn why_no_rule_applies() {
    let why = |entries: &[(&str, &str)]| {
        let report = one(entries);
        assert_eq!(report.outcome, "no_rule", "{entries:?}");
        report.why
    };
    let typo = why(&[("tenat", "acme")]);
    assert!(
        typo.contains("the key `tenat`, which no descriptor at its level has"),
        "{typo}"
    );
    assert!(typo.contains("`tenant=acme` (limits.yaml:3)"), "{typo}");
    let short = why(&[("tenant", "initech")]);
    assert!(short.contains("stops a level short"), "{short}");
    let deep = why(&[("health", "x"), ("path", "/")]);
    assert!(deep.contains("deeper than the tree"), "{deep}");
    let value = why(&[("tenant", "initech"), ("path", "/other")]);
    assert!(value.contains("matches no value of `path`"), "{value}");
    assert!(value.contains("`path=/search` (limits.yaml:15)"), "{value}");
}

#[test]
fn replaced_rules_overrides_costs_and_unknown_domains() {
    let both = request(
        "d",
        vec![
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("tenant", "acme"), ("path", "/")]),
        ],
    );
    let explanation = explain(&limits(), &both);
    let replaced = &explanation.descriptors[0];
    assert_eq!(replaced.outcome, "replaced");
    assert!(
        replaced.why.contains("replaced by `acme_path`"),
        "{}",
        replaced.why
    );
    assert_eq!(explanation.descriptors[1].outcome, "limited");

    let mut with_override = descriptor(&[("other", "x")]);
    with_override.limit = Some(RateLimitOverride {
        requests_per_unit: 10,
        unit: 2,
    });
    with_override.hits_addend = Some(UInt64Value { value: 4 });
    let explanation = explain(&limits(), &request("d", vec![with_override]));
    let report = &explanation.descriptors[0];
    assert_eq!(report.outcome, "override");
    assert_eq!(report.cost, 4);
    assert!(report.why.contains("10 per minute"), "{}", report.why);

    let explanation = explain(&limits(), &request("nope", vec![descriptor(&[("a", "b")])]));
    assert!(explanation.domain_declared_at.is_empty());
    assert_eq!(explanation.descriptors[0].outcome, "unknown_domain");
    assert!(explanation.descriptors[0].why.contains("they have d"));
}
