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

/// A request's entries, in order.
type Request = &'static [(&'static str, &'static str)];

/// One matching case: the descriptors of domain `d`, the requests for which [`hit`] finds a
/// rule (with the rule's name), and those for which it finds none.
struct MatchCase {
    name: &'static str,
    descriptors: &'static str,
    finds: &'static [(Request, &'static str)],
    finds_none: &'static [Request],
}

const MATCH_CASES: &[MatchCase] = &[
    MatchCase {
        name: "exact beats wildcard beats any value",
        descriptors: "
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1, name: any}
  - key: path
    value: /foo/*
    rate_limit: {unit: second, requests_per_unit: 1, name: wild}
  - key: path
    value: /foo/bar
    rate_limit: {unit: second, requests_per_unit: 1, name: exact}
",
        finds: &[
            (&[("path", "/foo/bar")], "exact"),
            (&[("path", "/foo/baz")], "wild"),
            (&[("path", "/foo/")], "wild"),
            (&[("path", "/other")], "any"),
            (&[("path", "")], "any"),
        ],
        finds_none: &[],
    },
    MatchCase {
        name: "wildcards in config order",
        descriptors: "
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 1, name: first}
  - key: path
    value: /api/v1/*
    rate_limit: {unit: second, requests_per_unit: 1, name: second}
",
        // Both match; the first one written wins, not the longest.
        finds: &[(&[("path", "/api/v1/x")], "first")],
        finds_none: &[],
    },
    MatchCase {
        name: "wildcard in the middle",
        descriptors: "
  - key: path
    value: \"/api/*/users\"
    rate_limit: {unit: second, requests_per_unit: 1, name: users}
",
        finds: &[(&[("path", "/api/v2/users")], "users")],
        finds_none: &[
            &[("path", "/api/v2/users/7")],
            &[("path", "/api/v2/groups")],
        ],
    },
    MatchCase {
        name: "limit applies only at the last entry",
        descriptors: "
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, name: a}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1, name: a.b}
",
        finds: &[(&[("a", "1")], "a"), (&[("a", "1"), ("b", "2")], "a.b")],
        // The rule on `a` does not apply to a longer request.
        finds_none: &[&[("a", "1"), ("c", "2")]],
    },
    MatchCase {
        name: "request deeper than config",
        descriptors: "
  # Upstream's example 4.
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 1, name: shallow}
",
        finds: &[(&[("key", "value")], "shallow")],
        // A two-entry request does not match.
        finds_none: &[&[("key", "value"), ("subkey", "subvalue")]],
    },
    MatchCase {
        name: "intermediate nodes without limit",
        descriptors: "
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {unit: second, requests_per_unit: 1, name: sub}
",
        finds: &[(&[("key", "value"), ("subkey", "x")], "sub")],
        finds_none: &[&[("key", "value")], &[("key", "other"), ("subkey", "x")]],
    },
    MatchCase {
        name: "unknown key and empty request",
        descriptors: "
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, name: a}
",
        finds: &[],
        finds_none: &[&[("b", "1")], &[]],
    },
    MatchCase {
        // Upstream picks one node per level and never backtracks.
        name: "a more specific branch without the child does not fall back",
        descriptors: "
  - key: tenant
    value: acme
    descriptors:
      - key: user
        value: bob
        rate_limit: {unit: second, requests_per_unit: 1, name: acme-bob}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1, name: any-user}
",
        finds: &[
            (&[("tenant", "acme"), ("user", "bob")], "acme-bob"),
            (&[("tenant", "x"), ("user", "eve")], "any-user"),
        ],
        finds_none: &[&[("tenant", "acme"), ("user", "eve")]],
    },
    MatchCase {
        name: "keys and values are case sensitive",
        descriptors: "
  - key: a
    value: X
    rate_limit: {unit: second, requests_per_unit: 1, name: a}
",
        finds: &[(&[("a", "X")], "a")],
        finds_none: &[&[("a", "x")], &[("A", "X")]],
    },
];

#[test]
fn requests_find_their_rules() {
    for case in MATCH_CASES {
        let d = domain(&format!("domain: d\ndescriptors:{}", case.descriptors));
        for &(request, rule) in case.finds {
            assert_eq!(
                hit(&d, request).as_deref(),
                Some(rule),
                "{}: {request:?}",
                case.name
            );
        }
        for &request in case.finds_none {
            assert_eq!(hit(&d, request), None, "{}: {request:?}", case.name);
        }
    }
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
    assert_ne!(rules[0].namespace(), rules[1].namespace());
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
