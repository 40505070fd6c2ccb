use super::super::load::load_str;
use super::super::{ConfigError, LimitsConfig, RuleLimit, Unit};

fn load(yaml: &str) -> LimitsConfig {
    match load_str("test.yaml", yaml) {
        Ok(config) => config,
        Err(e) => panic!("config rejected:\n{e}"),
    }
}

fn errors(yaml: &str) -> Vec<ConfigError> {
    match load_str("bad.yaml", yaml) {
        Ok(_) => panic!("config accepted:\n{yaml}"),
        Err(e) => e.into_vec(),
    }
}

/// The only error, rendered.
fn error(yaml: &str) -> String {
    let errors = errors(yaml);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors[0].to_string()
}

fn find<'c>(
    config: &'c LimitsConfig,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<&'c super::Rule> {
    config
        .domain(domain)
        .and_then(|d| d.find(entries.iter().copied()))
        .map(|r| &**r)
}

fn per(config: &LimitsConfig, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, Unit)> {
    match find(config, domain, entries)?.limit {
        RuleLimit::Limited {
            requests_per_unit,
            unit,
            ..
        } => Some((requests_per_unit, unit)),
        RuleLimit::Unlimited => None,
    }
}

// README examples of envoyproxy/ratelimit, unchanged: config/upstream-examples/.

/// The text of one of them, by file name.
macro_rules! upstream_example {
    ($file:literal) => {
        include_str!(concat!("../../../config/upstream-examples/", $file))
    };
}

#[test]
fn share_threshold_needs_a_wildcard_value() {
    assert_eq!(
        error("domain: d\ndescriptors:\n  - key: k\n    value: exact\n    share_threshold: true\n"),
        "bad.yaml:5: descriptors[0].share_threshold: `share_threshold` needs a wildcard \
             `value` (containing `*`)"
    );
    let config = load(
        "domain: d\ndescriptors:\n  - key: k\n    value: a*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let found = config
        .domain("d")
        .and_then(|d| d.find_shared([("k", "abc")].into_iter()));
    assert_eq!(found.map(|f| f.shared), Some(1));
}

#[test]
fn readme_example_1_mongo_cps() {
    let c = load(upstream_example!("01-mongo-cps.yaml"));
    assert_eq!(
        per(&c, "mongo_cps", &[("database", "users")]),
        Some((500, Unit::Second))
    );
    assert_eq!(
        per(&c, "mongo_cps", &[("database", "default")]),
        Some((500, Unit::Second))
    );
    assert!(find(&c, "mongo_cps", &[("database", "other")]).is_none());
    assert_eq!(
        c.dump(),
        "mongo_cps.database_default: unit=SECOND requests_per_unit=500, shadow_mode: false\n\
             mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false\n"
    );
}

#[test]
fn readme_example_2_messaging() {
    let c = load(upstream_example!("02-messaging.yaml"));
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    assert_eq!(per(&c, "messaging", &marketing), Some((5, Unit::Day)));
    assert_eq!(
        per(&c, "messaging", &[("to_number", "2061111111")]),
        Some((100, Unit::Day))
    );
    assert!(find(&c, "messaging", &[("message_type", "marketing")]).is_none());
    let rule = find(&c, "messaging", &marketing).map(|r| (&*r.path, &**r.namespace()));
    assert_eq!(
        rule,
        Some((
            "messaging.message_type_marketing.to_number",
            "12:message_type=9:marketing/9:to_number/"
        ))
    );
}

#[test]
fn readme_example_3_remote_address() {
    let c = load(upstream_example!("03-remote-address.yaml"));
    let d = "edge_proxy_per_ip";
    // Any address, and the one on the block list (0 a second).
    for (address, limit) in [("50.0.0.1", 10), ("50.0.0.5", 0)] {
        let got = per(&c, d, &[("remote_address", address)]);
        assert_eq!(got, Some((limit, Unit::Second)), "{address}");
    }
}

#[test]
fn readme_example_4_nested_path() {
    let c = load(upstream_example!("04-nested.yaml"));
    let entries = [("key", "value"), ("subkey", "subvalue")];
    assert_eq!(per(&c, "example4", &entries), Some((300, Unit::Second)));
    assert!(find(&c, "example4", &[("key", "value")]).is_none());
}

/// Not one of upstream's examples (so it stays inline): example 4's nesting with keys only.
#[test]
fn remote_address_with_nested_path() {
    let c = load(
        "domain: per_ip_path
descriptors:
  - key: remote_address
    descriptors:
      - key: path
        rate_limit:
          requests_per_unit: 5
          unit: second
",
    );
    let entries = [("remote_address", "10.0.0.1"), ("path", "/login")];
    assert_eq!(per(&c, "per_ip_path", &entries), Some((5, Unit::Second)));
    assert!(find(&c, "per_ip_path", &[("remote_address", "10.0.0.1")]).is_none());
}

#[test]
fn readme_example_5_unlimited() {
    let c = load(upstream_example!("05-unlimited.yaml"));
    let ldap = find(&c, "internal", &[("ldap", "x")]);
    assert_eq!(ldap.map(|r| r.limit), Some(RuleLimit::Unlimited));
    assert_eq!(ldap.and_then(|r| r.duration_ms()), None);
    assert_eq!(
        per(&c, "internal", &[("azure", "x")]),
        Some((100, Unit::Minute))
    );
}

#[test]
fn readme_example_6_shadow_mode() {
    let c = load(upstream_example!("06-shadow-mode.yaml"));
    let user = |user| {
        find(
            &c,
            "example6",
            &[("service", "auth-service"), ("user", user)],
        )
    };
    assert_eq!(user("user-a").map(|r| r.shadow_mode), Some(true));
    assert_eq!(user("user-b").map(|r| r.shadow_mode), Some(false));
}

#[test]
fn readme_example_7_replaces() {
    let c = load(upstream_example!("07-replaces.yaml"));
    let of_user = |entry| find(&c, "example7", &[entry, ("user", "bkthomps")]);
    let first = of_user(("key_1", "value_1"));
    let second = of_user(("key_2", "value_2"));
    assert_eq!(
        first.and_then(|r| r.name.as_deref()),
        Some("specific_limit")
    );
    assert_eq!(
        second.map(|r| r.replaces.iter().map(|n| &**n).collect::<Vec<_>>()),
        Some(vec!["specific_limit"])
    );
}

#[test]
fn readme_example_8_detailed_metric() {
    let c = load(upstream_example!("08-detailed-metric.yaml"));
    let any = find(&c, "example8", &[("key1", "unspecified_value")]);
    assert_eq!(
        any.map(|r| (r.detailed_metric, &*r.path)),
        Some((true, "example8.key1"))
    );
    assert_eq!(
        per(&c, "example8", &[("key1", "value1")]),
        Some((20, Unit::Minute))
    );
}

#[test]
fn readme_example_9_and_more_wildcards() {
    // Upstream's example 9, with two more wildcard rules appended to its descriptors.
    let c = load(concat!(
        include_str!("../../../config/upstream-examples/09-wildcard.yaml"),
        r#"  - key: path
    value: "/foo/*"
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: path
    value: "/api/*/users"
    rate_limit:
      unit: minute
      requests_per_unit: 40
"#,
    ));
    let d = "example9";
    assert_eq!(per(&c, d, &[("key1", "value_1")]), Some((20, Unit::Minute)));
    assert_eq!(per(&c, d, &[("key1", "value_2")]), Some((20, Unit::Minute)));
    // A trailing wildcard, and one inside the value.
    for (path, limit) in [("/foo/bar/baz", 30), ("/api/v1/users", 40)] {
        let got = per(&c, d, &[("path", path)]);
        assert_eq!(got, Some((limit, Unit::Minute)), "{path}");
    }
    assert!(find(&c, d, &[("path", "/api/v1/groups")]).is_none());
    // All values matched by one wildcard share its counter namespace.
    let a = find(&c, d, &[("key1", "value_1")]).map(|r| r.namespace().clone());
    let b = find(&c, d, &[("key1", "value_2")]).map(|r| r.namespace().clone());
    assert_eq!(a.as_deref(), Some("4:key1=6:value*/"));
    assert_eq!(a, b);
}

#[test]
fn our_extensions_and_defaults() {
    let c = load(
        "domain: ext
descriptors:
  - key: a
    rate_limit:
      unit: MINUTE
      requests_per_unit: 7
      unit_multiplier: 5
  - key: b
    value: ''
    rate_limit: {unit: Hour, requests_per_unit: 1, name: ''}
    descriptors:
",
    );
    let a = find(&c, "ext", &[("a", "x")]);
    assert_eq!(a.and_then(|r| r.duration_ms()), Some(300_000));
    // An empty value or name counts as none, as upstream.
    let b = find(&c, "ext", &[("b", "anything")]);
    assert_eq!(
        b.map(|r| (&*r.path, r.name.is_none())),
        Some(("ext.b", true))
    );
    assert_eq!(c.rule_count(), 2);
}

#[test]
fn domain_without_descriptors() {
    let c = load("domain: empty\n");
    assert_eq!(c.rule_count(), 0);
    assert!(c.domain("empty").is_some());
}

/// What a rejected config must render as its only error: the whole text, or its start where
/// the rest quotes the YAML parser's own words.
#[derive(Debug)]
enum Rendered {
    Is(&'static str),
    StartsWith(&'static str),
}

/// Loads every `(case, yaml, want)`; the cases whose config is not rejected with exactly one
/// error rendered as `want` fail the test together, each under its name.
fn assert_rejected(cases: &[(&str, &str, Rendered)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(case, yaml, want)| {
            let rendered: Vec<String> = match load_str("bad.yaml", yaml) {
                Ok(_) => Vec::new(),
                Err(e) => e.into_vec().iter().map(ToString::to_string).collect(),
            };
            let matches = match (rendered.as_slice(), want) {
                ([only], Rendered::Is(want)) => only == want,
                ([only], Rendered::StartsWith(want)) => only.starts_with(want),
                _ => false,
            };
            (!matches).then(|| format!("{case}: rendered {rendered:#?}, want {want:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every rejected case names the file, the line, the place and the problem.
#[test]
fn each_rejected_case_names_the_file_line_place_and_problem() {
    use Rendered::{Is, StartsWith};
    assert_rejected(&[
        (
            "unknown unit",
            &gcounter_rls_integration::one_rule("d", "k", "fortnight", 1, 1),
            Is(
                "bad.yaml:5: descriptors[0].rate_limit.unit: unknown unit `fortnight`; \
                expected second, minute, hour, day, week, month or year",
            ),
        ),
        (
            "missing unit",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
            StartsWith("bad.yaml:5: descriptors[0].rate_limit: missing `unit`"),
        ),
        (
            "unlimited with unit",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: second
",
            Is("bad.yaml:6: descriptors[0].rate_limit.unit: \
                `unlimited: true` must not be combined with `unit`"),
        ),
        (
            "unlimited with unit_multiplier",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit_multiplier: 2}\n",
            StartsWith("bad.yaml:4: descriptors[0].rate_limit.unit_multiplier: "),
        ),
        (
            "missing requests_per_unit",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n",
            Is(
                "bad.yaml:5: descriptors[0].rate_limit: missing `requests_per_unit`; \
                write `requests_per_unit: 0` explicitly for a limit that is always over",
            ),
        ),
        (
            "empty key",
            "domain: d\ndescriptors:\n  - key: ''\n",
            Is("bad.yaml:3: descriptors[0].key: `key` is empty"),
        ),
        (
            "missing key",
            "domain: d\ndescriptors:\n  - value: v\n",
            Is("bad.yaml:3: descriptors[0]: descriptor has no `key`"),
        ),
        (
            "empty domain",
            "domain: ''\n",
            Is("bad.yaml:1: domain: `domain` is empty"),
        ),
        (
            "missing domain",
            "descriptors: []\n",
            Is("bad.yaml: domain: missing `domain`"),
        ),
        (
            "duplicate descriptor with a value",
            "domain: d
descriptors:
  - key: k
    value: v
  - key: k
  - key: k
    value: v
",
            Is(
                "bad.yaml:6: descriptors[2]: duplicate descriptor: key `k` with value `v` \
                is already declared at descriptors[0] (line 3)",
            ),
        ),
        (
            "duplicate nested descriptor without a value",
            "domain: d
descriptors:
  - key: top
    descriptors:
      - key: k
      - key: k
",
            Is(
                "bad.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor: key `k` \
                without value is already declared at descriptors[0].descriptors[0] (line 5)",
            ),
        ),
        (
            "a rule replacing itself",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: mine
",
            Is("bad.yaml:9: descriptors[0].rate_limit.replaces[0].name: \
                a rule cannot replace itself: `mine` is this rule's own `name`"),
        ),
        (
            "an empty name in replaces",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ''
",
            Is(
                "bad.yaml:8: descriptors[0].rate_limit.replaces[0].name: empty `name` in `replaces`",
            ),
        ),
        (
            "unit_multiplier 0",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 1
      unit_multiplier: 0
",
            Is("bad.yaml:7: descriptors[0].rate_limit.unit_multiplier: \
                `unit_multiplier` must be at least 1"),
        ),
        (
            "unit_multiplier overflowing the window",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 4000000000}\n",
            StartsWith("bad.yaml:4: descriptors[0].rate_limit.unit_multiplier: "),
        ),
    ]);
}

/// Same key and value at different levels or under different parents is no duplicate.
#[test]
fn the_same_descriptor_under_other_parents_is_no_duplicate() {
    load(
        "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: k\n  - key: j\n    descriptors:\n      - key: k\n",
    );
}

#[test]
fn all_errors_are_collected_in_document_order() {
    let errors = errors(
        "domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
  - key: b
    descriptors:
      - key: ''
      - key: c
        rate_limit:
          unit: second
  - key: a
",
    );
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "bad.yaml:5: descriptors[0].rate_limit.unit: unknown unit `fortnight`; \
                 expected second, minute, hour, day, week, month or year",
            "bad.yaml:9: descriptors[1].descriptors[0].key: `key` is empty",
            "bad.yaml:12: descriptors[1].descriptors[1].rate_limit: missing `requests_per_unit`; \
                 write `requests_per_unit: 0` explicitly for a limit that is always over",
            "bad.yaml:13: descriptors[2]: duplicate descriptor: key `a` without value \
                 is already declared at descriptors[0] (line 3)",
        ]
    );
}

#[test]
fn errors_of_a_file_are_sorted_by_line() {
    let errors = errors(
        "domain: d
descriptors:
  - key: k
    rate_limit:
      name: self
      unit: minute
      requests_per_unit: 1
      replaces: [{name: self}]
      unit_multiplier: 0
",
    );
    let lines: Vec<Option<usize>> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(8), Some(9)]);
}

// `rate_limits` (our extension): several limits on one descriptor.

#[test]
fn rate_limits_hold_every_limit_of_a_descriptor_in_config_order() {
    let config = load(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 10000}\n      - {unit: second, requests_per_unit: 100, unit_multiplier: 60}\n",
    );
    let Some(rule) = find(&config, "d", &[("user", "u1")]) else {
        panic!("rule found")
    };
    let limits: Vec<(u32, Unit, u32)> = rule
        .limits()
        .map(|l| match *l {
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier,
            } => (requests_per_unit, unit, unit_multiplier),
            RuleLimit::Unlimited => panic!("no unlimited in a list"),
        })
        .collect();
    assert_eq!(
        limits,
        [
            (10, Unit::Second, 1),
            (10_000, Unit::Day, 1),
            (100, Unit::Second, 60)
        ]
    );
    assert_eq!(
        per(&config, "d", &[("user", "u1")]),
        Some((10, Unit::Second))
    );
    assert!(
        config
            .dump()
            .contains("d.user: unit=SECOND requests_per_unit=10, shadow_mode: false, and unit=DAY requests_per_unit=10000, and unit=SECOND requests_per_unit=100 unit_multiplier: 60"),
        "{}",
        config.dump()
    );
}

#[test]
fn ambiguous_rate_limits_are_refused_with_their_place() {
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: day, requests_per_unit: 5}\n"
        ),
        "bad.yaml:6: descriptors[0].rate_limits: `rate_limit` and `rate_limits` on one \
         descriptor: put every limit in `rate_limits`"
    );
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 9, unit_multiplier: 60}\n"
        ),
        "bad.yaml:6: descriptors[0].rate_limits[1]: two limits with the same window (60 × \
         second) in `rate_limits`; the other is at descriptors[0].rate_limits[0] (line 5): \
         keep one (the smaller)"
    );
    assert_eq!(
        error("domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n"),
        "bad.yaml:4: descriptors[0].rate_limits: `rate_limits` is empty"
    );
    let errors = errors(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 1, name: n}\n      - {unlimited: true}\n      - {unit: hour}\n",
    );
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let wanted = [
        "rate_limits[0].name: `name` is not supported",
        "rate_limits[1].unlimited: `unlimited` is not supported",
        "rate_limits[2]: missing `requests_per_unit`",
    ];
    assert_eq!(text.len(), wanted.len(), "{text:#?}");
    for (error, wanted) in text.iter().zip(wanted) {
        assert!(error.contains(wanted), "{wanted}: {text:#?}");
    }
    let nine: String = (1..=9)
        .map(|i| format!("      - {{unit: second, requests_per_unit: 1, unit_multiplier: {i}}}\n"))
        .collect();
    assert!(
        error(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n{nine}"
        ))
        .contains("`rate_limits` holds 9 limits; at most 8")
    );
}

#[test]
fn a_penalty_on_any_rate_limits_entry_holds_the_descriptor_the_longest_wins() {
    let config = load(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: second, requests_per_unit: 10, penalty: 30s}\n      - {unit: day, requests_per_unit: 10000, penalty: 5m}\n  - key: ip\n    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 10000}\n",
    );
    let user = find(&config, "d", &[("user", "u")]).expect("user rule");
    assert_eq!(user.penalty_ms, 300_000);
    let ip = find(&config, "d", &[("ip", "1.2.3.4")]).expect("ip rule");
    assert_eq!(ip.penalty_ms, 0);
    let e = error(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: second, requests_per_unit: 10, penalty: forever}\n",
    );
    assert!(
        e.starts_with("bad.yaml:5: descriptors[0].rate_limits[0].penalty:"),
        "{e}"
    );
}
