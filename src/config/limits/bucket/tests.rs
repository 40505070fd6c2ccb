use super::*;
use crate::config::load::load_str;

fn domain(yaml: &str) -> DomainLimits {
    let config = match load_str("test.yaml", yaml) {
        Ok(config) => config,
        Err(e) => panic!("test config rejected:\n{e}"),
    };
    let mut domains = config.domains;
    domains.remove(0)
}

const TREE: &str = "domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: minute, requests_per_unit: 10}
";

#[test]
fn entries_take_the_order_of_the_one_path_that_uses_them_all() {
    let d = domain(TREE);
    // `user` also starts a path, but one that cannot use `tenant`
    let ordered = d.order_bucket([("user", "alice"), ("tenant", "acme")]);
    assert_eq!(ordered, Ok(vec![("tenant", "acme"), ("user", "alice")]));
    assert_eq!(d.order_bucket([("user", "bob")]), Ok(vec![("user", "bob")]));
}

#[test]
fn entries_on_no_path_with_a_rule_match_nothing() {
    let d = domain(TREE);
    let no_match = |keys: &[&str]| BucketOrderError::NoMatch {
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
    };
    assert_eq!(
        d.order_bucket([("path", "/other")]),
        Err(no_match(&["path"]))
    );
    // the path ends on a node without a rule
    assert_eq!(
        d.order_bucket([("tenant", "acme")]),
        Err(no_match(&["tenant"]))
    );
    // deeper than the tree
    assert_eq!(
        d.order_bucket([("tenant", "acme"), ("user", "a"), ("x", "y")]),
        Err(no_match(&["tenant", "user", "x"]))
    );
    assert_eq!(d.order_bucket([]), Err(BucketOrderError::Empty));
}

#[test]
fn two_paths_that_use_every_entry_are_refused() {
    let d = domain(TREE);
    assert_eq!(
        d.order_bucket([("b", "1"), ("a", "2")]),
        Err(BucketOrderError::Ambiguous {
            first: vec!["a".into(), "b".into()],
            second: vec!["b".into(), "a".into()],
        })
    );
}
