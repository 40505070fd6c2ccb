use super::*;
use crate::config::load_str;

fn limits(yaml: &str) -> LimitsConfig {
    match load_str("test.yaml", yaml) {
        Ok(config) => config,
        Err(e) => panic!("test config rejected:\n{e}"),
    }
}

fn bucket<'a>(entries: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a str)> {
    entries.iter().copied()
}

const CONFIG: &str = "domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limits:
          - {unit: second, requests_per_unit: 5}
          - {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*
    share_threshold: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: x
    descriptors:
      - key: y
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: y
    descriptors:
      - key: x
        rate_limit: {unit: minute, requests_per_unit: 10}
";

fn counted(resolution: Resolution) -> (Vec<BucketCounter>, bool) {
    match resolution {
        Resolution::Counted {
            counters, shadow, ..
        } => (counters.to_vec(), shadow),
        other => panic!("not counted: {other:?}"),
    }
}

#[test]
fn a_bucket_counts_on_the_counter_rls_gives_its_descriptor() {
    let limits = limits(CONFIG);
    let (counters, shadow) = counted(resolve(&limits, "d", bucket(&[("user", "alice")]), false));
    assert!(!shadow);
    let [counter] = counters.as_slice() else {
        panic!("one limit: {counters:?}")
    };
    assert_eq!(counter.limit, 10);
    assert_eq!(counter.counter.duration_ms, 60_000);
    // the same namespace and identifier RLS v3's plan of `user=alice` has
    let domain = limits.domain("d").unwrap();
    let descriptor = plan::descriptor_of([("user", "alice")]);
    let plans = plan::plan(domain, std::slice::from_ref(&descriptor), 1);
    let Some(Plan::Limited(limited)) = plans.first() else {
        panic!("user=alice is limited")
    };
    assert_eq!(counter.counter.scope, *limited.scope);
    assert_eq!(counter.counter.identifier, limited.identifier);
}

#[test]
fn several_entries_take_the_tree_order_and_every_limit_of_the_rule() {
    let limits = limits(CONFIG);
    let (counters, _) = counted(resolve(
        &limits,
        "d",
        bucket(&[("user", "alice"), ("tenant", "acme")]),
        false,
    ));
    let windows: Vec<(u64, u64)> = counters
        .iter()
        .map(|c| (c.counter.duration_ms, c.limit))
        .collect();
    assert_eq!(windows, vec![(1_000, 5), (60_000, 100)]);
}

#[test]
fn shadow_sharing_unlimited_and_unmatched_buckets() {
    let limits = limits(CONFIG);
    let (a, shadow) = counted(resolve(&limits, "d", bucket(&[("path", "/api/a")]), false));
    let (b, _) = counted(resolve(&limits, "d", bucket(&[("path", "/api/b")]), false));
    assert!(shadow);
    assert_eq!(
        a, b,
        "a share_threshold wildcard gives every value one counter"
    );
    let (_, shadow) = counted(resolve(&limits, "d", bucket(&[("user", "x")]), true));
    assert!(shadow, "the service's shadow mode");
    assert_eq!(
        resolve(&limits, "d", bucket(&[("free", "x")]), false),
        Resolution::Unlimited
    );
    assert_eq!(
        resolve(&limits, "other", bucket(&[("user", "x")]), false),
        Resolution::Unmatched(Unmatched::UnknownDomain("other".into()))
    );
    assert_eq!(
        resolve(&limits, "d", bucket(&[("tenant", "acme")]), false),
        Resolution::Unmatched(Unmatched::Order(BucketOrderError::NoMatch {
            keys: vec!["tenant".into()]
        }))
    );
    assert!(matches!(
        resolve(&limits, "d", bucket(&[("x", "1"), ("y", "2")]), false),
        Resolution::Unmatched(Unmatched::Order(BucketOrderError::Ambiguous { .. }))
    ));
}

#[test]
fn a_never_above_rule_marks_its_buckets_and_no_other() {
    let limits = limits(
        "domain: d\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 10, guarantee: never_above}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
    );
    let never_above = |entries: &[(&str, &str)]| match resolve(&limits, "d", bucket(entries), false)
    {
        Resolution::Counted { never_above, .. } => never_above,
        other => panic!("not counted: {other:?}"),
    };
    assert!(never_above(&[("api_key", "k")]));
    assert!(!never_above(&[("user", "u")]));
}
