use super::*;

#[test]
fn both_spellings_parse_and_anything_else_is_refused_naming_the_choices() {
    assert_eq!(Guarantee::parse("never_above"), Ok(Guarantee::NeverAbove));
    assert_eq!(Guarantee::parse("never_below"), Ok(Guarantee::NeverBelow));
    assert_eq!(Guarantee::default(), Guarantee::NeverBelow);
    for bad in ["never-above", "NEVER_ABOVE", "", "exact"] {
        let problem = Guarantee::parse(bad).expect_err(bad);
        assert!(problem.contains("`never_above`"), "{problem}");
    }
}

use crate::config::{LimitsConfig, load_str};

const NEVER_ABOVE: &str = "\
domain: d
descriptors:
  - key: api_key
    rate_limit:
      unit: hour
      requests_per_unit: 1000
      guarantee: never_above
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 5, guarantee: never_above}
      - {unit: day, requests_per_unit: 500, guarantee: never_above}
";

fn rule<'c>(config: &'c LimitsConfig, key: &str) -> &'c crate::config::Rule {
    config
        .domain("d")
        .and_then(|d| d.find([(key, "x")].into_iter()))
        .map(|r| &**r)
        .unwrap_or_else(|| panic!("no rule for {key}"))
}

/// The only error of `yaml`, rendered.
fn error(yaml: &str) -> String {
    let errors = match load_str("bad.yaml", yaml) {
        Ok(_) => panic!("config accepted:\n{yaml}"),
        Err(e) => e.into_vec(),
    };
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors[0].to_string()
}

#[test]
fn the_key_compiles_into_the_rule_and_the_default_is_never_below() {
    let config = load_str("g.yaml", NEVER_ABOVE).expect("loads");
    assert_eq!(rule(&config, "api_key").guarantee, Guarantee::NeverAbove);
    assert_eq!(rule(&config, "ip").guarantee, Guarantee::NeverBelow);
    assert_eq!(rule(&config, "user").guarantee, Guarantee::NeverAbove);
    assert!(
        rule(&config, "api_key")
            .dump_line()
            .ends_with(", guarantee: never_above"),
        "{}",
        rule(&config, "api_key").dump_line()
    );
    assert!(!rule(&config, "ip").dump_line().contains("guarantee"));
}

#[test]
fn the_yaml_dump_keeps_the_guarantee() {
    let config = load_str("g.yaml", NEVER_ABOVE).expect("loads");
    let again = load_str("again.yaml", &config.dump_yaml()).expect("dump loads");
    for key in ["api_key", "ip", "user"] {
        assert_eq!(
            rule(&again, key).guarantee,
            rule(&config, key).guarantee,
            "{key}"
        );
    }
}

#[test]
fn a_bad_value_is_refused_with_file_line_and_place() {
    let e = error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      guarantee: never-above\n",
    );
    assert!(
        e.starts_with("bad.yaml:7: descriptors[0].rate_limit.guarantee: unknown guarantee"),
        "{e}"
    );
    let e = error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, guarantee: [never_above]}\n",
    );
    assert!(e.contains("descriptors[0].rate_limit.guarantee"), "{e}");
}

#[test]
fn unlimited_and_a_guarantee_are_refused_together() {
    let e = error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, guarantee: never_above}\n",
    );
    assert!(
        e.starts_with("bad.yaml:4: descriptors[0].rate_limit.guarantee: `unlimited: true`"),
        "{e}"
    );
}

#[test]
fn the_entries_of_a_list_must_agree() {
    let e = error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1, guarantee: never_above}\n      - {unit: hour, requests_per_unit: 10}\n",
    );
    assert!(
        e.starts_with("bad.yaml:6: descriptors[0].rate_limits[1].guarantee: every entry"),
        "{e}"
    );
}

/// With `--clock-skew` where decisions spend rights, a `never_above` window not longer than
/// twice the skew is refused at its descriptor's line (it would refuse every request); the
/// same config loads without the skew, and other limits are not held to it.
#[test]
fn a_window_within_twice_the_clock_skew_is_refused_at_its_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("g.yaml");
    std::fs::write(&path, NEVER_ABOVE).expect("written");
    let with_skew = |millis| crate::config::LoadOptions {
        never_above_clock_skew: std::time::Duration::from_millis(millis),
        ..crate::config::LoadOptions::default()
    };
    assert!(crate::config::load_path(&path, &with_skew(0)).is_ok());
    // `user`'s one-second window needs a skew under 500 ms; `ip`'s has no guarantee.
    assert!(crate::config::load_path(&path, &with_skew(499)).is_ok());
    let errors = match crate::config::load_path(&path, &with_skew(500)) {
        Ok(_) => panic!("a 1s never_above window within 2 × 500ms was accepted"),
        Err(errors) => errors.into_vec(),
    };
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let rendered = errors[0].to_string();
    assert!(
        rendered.starts_with(&format!("{}:10: d.user: ", path.display())),
        "{rendered}"
    );
    assert!(
        rendered.contains("window of 1s") && rendered.contains("--clock-skew 500ms"),
        "{rendered}"
    );
}
