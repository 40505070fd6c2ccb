use super::super::load::load_str;
use super::*;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn config_is_send_and_sync() {
    assert_send_sync::<LimitsConfig>();
    assert_send_sync::<Arc<Rule>>();
}

/// Loads one domain `d`.
fn domain(yaml: &str) -> DomainLimits {
    let config = match load_str("test.yaml", yaml) {
        Ok(config) => config,
        Err(e) => panic!("test config rejected:\n{e}"),
    };
    let mut domains = config.domains;
    assert_eq!(domains.len(), 1);
    domains.remove(0)
}

/// The `name` of the rule found for `entries`.
fn hit(d: &DomainLimits, entries: &[(&str, &str)]) -> Option<String> {
    d.find(entries.iter().copied())
        .map(|r| r.name.as_deref().unwrap_or("<unnamed>").to_owned())
}

fn limit(name: &str) -> String {
    format!("rate_limit: {{unit: second, requests_per_unit: 1, name: {name}}}")
}

/// Names as upstream's `config_test.go` (`TestValueToMetric_*`) expects them.
#[test]
fn metric_keys_as_upstream_names_stats() {
    let d = domain(
        "domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: pre*
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: pre*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: s
    value: pre*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: n
    descriptors:
      - key: leaf
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let key = |entries: &[(&str, &str)]| {
        let found = d.find_shared(entries.iter().copied());
        let (detailed, shared) = found.map_or((false, 0), |f| (f.rule.detailed_metric, f.shared));
        d.metric_key(entries.iter().copied(), detailed, shared)
    };
    assert_eq!(key(&[("k1", "A"), ("k2", "foo")]), "d.k1_A.k2");
    assert_eq!(
        key(&[("m1", "X"), ("m2", "Y"), ("m3", "Z")]),
        "d.m1.m2_Y.m3"
    );
    assert_eq!(key(&[("w", "prefix")]), "d.w_prefix");
    assert_eq!(key(&[("p", "prefix")]), "d.p_pre*");
    assert_eq!(key(&[("s", "prefix")]), "d.s_pre*");
    // Detailed: every entry's value, nested included.
    assert_eq!(key(&[("n", "a"), ("leaf", "b")]), "d.n_a.leaf_b");
    assert_eq!(key(&[("n", ""), ("leaf", "b")]), "d.n_.leaf_b");
}

#[test]
fn exact_beats_wildcard_beats_any_value() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: path
    {}
  - key: path
    value: /foo/*
    {}
  - key: path
    value: /foo/bar
    {}
",
        limit("any"),
        limit("wild"),
        limit("exact")
    ));
    assert_eq!(hit(&d, &[("path", "/foo/bar")]).as_deref(), Some("exact"));
    assert_eq!(hit(&d, &[("path", "/foo/baz")]).as_deref(), Some("wild"));
    assert_eq!(hit(&d, &[("path", "/foo/")]).as_deref(), Some("wild"));
    assert_eq!(hit(&d, &[("path", "/other")]).as_deref(), Some("any"));
    assert_eq!(hit(&d, &[("path", "")]).as_deref(), Some("any"));
}

#[test]
fn wildcards_in_config_order() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: path
    value: /api/*
    {}
  - key: path
    value: /api/v1/*
    {}
",
        limit("first"),
        limit("second")
    ));
    // Both match; the first one written wins, not the longest.
    assert_eq!(hit(&d, &[("path", "/api/v1/x")]).as_deref(), Some("first"));
}

#[test]
fn wildcard_in_the_middle() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: path
    value: \"/api/*/users\"
    {}
",
        limit("users")
    ));
    assert_eq!(
        hit(&d, &[("path", "/api/v2/users")]).as_deref(),
        Some("users")
    );
    assert_eq!(hit(&d, &[("path", "/api/v2/users/7")]), None);
    assert_eq!(hit(&d, &[("path", "/api/v2/groups")]), None);
}

#[test]
fn limit_applies_only_at_the_last_entry() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: a
    {}
    descriptors:
      - key: b
        {}
",
        limit("a"),
        limit("a.b")
    ));
    assert_eq!(hit(&d, &[("a", "1")]).as_deref(), Some("a"));
    assert_eq!(hit(&d, &[("a", "1"), ("b", "2")]).as_deref(), Some("a.b"));
    // The rule on `a` does not apply to a longer request.
    assert_eq!(hit(&d, &[("a", "1"), ("c", "2")]), None);
}

#[test]
fn request_deeper_than_config() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: key
    value: value
    {}
",
        limit("shallow")
    ));
    assert_eq!(hit(&d, &[("key", "value")]).as_deref(), Some("shallow"));
    // Upstream's example 4: a two-entry request does not match.
    assert_eq!(hit(&d, &[("key", "value"), ("subkey", "subvalue")]), None);
}

#[test]
fn intermediate_nodes_without_limit() {
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        {}
",
        limit("sub")
    ));
    assert_eq!(hit(&d, &[("key", "value")]), None);
    assert_eq!(
        hit(&d, &[("key", "value"), ("subkey", "x")]).as_deref(),
        Some("sub")
    );
    assert_eq!(hit(&d, &[("key", "other"), ("subkey", "x")]), None);
}

#[test]
fn unknown_key_and_empty_request() {
    let d = domain(&format!(
        "domain: d\ndescriptors:\n  - key: a\n    {}\n",
        limit("a")
    ));
    assert_eq!(hit(&d, &[("b", "1")]), None);
    assert_eq!(hit(&d, &[]), None);
}

#[test]
fn keys_and_values_are_case_sensitive() {
    let d = domain(&format!(
        "domain: d\ndescriptors:\n  - key: a\n    value: X\n    {}\n",
        limit("a")
    ));
    assert_eq!(hit(&d, &[("a", "X")]).as_deref(), Some("a"));
    assert_eq!(hit(&d, &[("a", "x")]), None);
    assert_eq!(hit(&d, &[("A", "X")]), None);
}

#[test]
fn a_more_specific_branch_without_the_child_does_not_fall_back() {
    // Upstream picks one node per level and never backtracks.
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: user
        value: bob
        {}
  - key: tenant
    descriptors:
      - key: user
        {}
",
        limit("acme-bob"),
        limit("any-user")
    ));
    assert_eq!(
        hit(&d, &[("tenant", "acme"), ("user", "bob")]).as_deref(),
        Some("acme-bob")
    );
    assert_eq!(hit(&d, &[("tenant", "acme"), ("user", "eve")]), None);
    assert_eq!(
        hit(&d, &[("tenant", "x"), ("user", "eve")]).as_deref(),
        Some("any-user")
    );
}

#[test]
fn distinct_keys_do_not_collide_like_upstream_key_value() {
    // Upstream joins key and value with `_`: these would be one entry.
    let d = domain(&format!(
        "domain: d
descriptors:
  - key: a_b
    value: c
    {}
  - key: a
    value: b_c
    {}
",
        limit("a_b=c"),
        limit("a=b_c")
    ));
    assert_eq!(hit(&d, &[("a_b", "c")]).as_deref(), Some("a_b=c"));
    assert_eq!(hit(&d, &[("a", "b_c")]).as_deref(), Some("a=b_c"));
    let rules: Vec<_> = d.rules().collect();
    assert_ne!(rules[0].namespace, rules[1].namespace);
}

#[test]
fn lookup_and_dump_across_domains() {
    let config = super::super::load::load_sources(&[
        (
            "b.yaml",
            "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        ),
        (
            "a.yaml",
            "domain: a\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: u\n    rate_limit: {unlimited: true}\n",
        ),
    ]);
    let config = match config {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let names: Vec<&str> = config.domains().map(|d| &**d.name()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(config.domain("a").is_some());
    assert!(config.domain("c").is_none());
    assert_eq!(config.rule_count(), 3);
    assert_eq!(
        config.dump(),
        "a.k_v: unit=SECOND requests_per_unit=5, shadow_mode: false\n\
             a.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true\n\
             b.k: unit=MINUTE requests_per_unit=3, shadow_mode: false\n"
    );
}

#[test]
fn empty_config() {
    let config = LimitsConfig::default();
    assert_eq!(config.rule_count(), 0);
    assert!(config.domain("x").is_none());
    assert_eq!(config.dump(), "");
}
