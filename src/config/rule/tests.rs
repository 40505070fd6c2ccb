use super::*;

fn encode(path: &[(&str, Option<&str>)]) -> String {
    let mut ns = String::new();
    for (key, value) in path {
        push_namespace_segment(&mut ns, key, *value);
    }
    ns
}

fn rule(limit: RuleLimit) -> Rule {
    Rule {
        scope: gcounter_engine::cell_key::Scope::new("", ""),
        limit,
        more_limits: Box::new([]),
        name: None,
        replaces: Box::new([]),
        shadow_mode: false,
        quota_mode: false,
        metadata: None,
        detailed_metric: false,
        value_to_metric: false,
        penalty_ms: 0,
        guarantee: crate::config::Guarantee::NeverBelow,
        path: "d.k".into(),
        series: RuleSeries::default(),
        place: Place::default(),
    }
}

#[test]
fn namespace_example() {
    assert_eq!(
        encode(&[("tenant", Some("a*")), ("path", None)]),
        "6:tenant=2:a*/4:path/"
    );
}

#[test]
fn namespace_is_injective_on_tricky_paths() {
    let paths: &[&[(&str, Option<&str>)]] = &[
        // Upstream's `key_value` joins these two into `a_b_c`.
        &[("a_b", Some("c"))],
        &[("a", Some("b_c"))],
        // Separators inside keys and values.
        &[("a/", None), ("b", None)],
        &[("a", None), ("/b", None)],
        &[("a", Some("b/1:c"))],
        &[("a", Some("b")), ("1:c", None)],
        &[("a=1:b", None)],
        &[("a", Some("b"))],
        &[("a:", Some(""))],
        &[("a:", None)],
        &[("k", Some("v=1:x/"))],
        &[("k", Some("v")), ("x", None)],
        // Multi-byte: lengths are bytes, not chars.
        &[("é", Some("x"))],
        &[("é=1:x", None)],
    ];
    let encoded: Vec<String> = paths.iter().map(|p| encode(p)).collect();
    for (i, a) in encoded.iter().enumerate() {
        for (j, b) in encoded.iter().enumerate() {
            if i != j {
                assert_ne!(a, b, "{:?} and {:?} collide", paths[i], paths[j]);
            }
        }
    }
    assert_eq!(encoded[0], "3:a_b=1:c/");
    assert_eq!(encoded[1], "1:a=3:b_c/");
}

#[test]
fn duration() {
    let limited = |unit, unit_multiplier| {
        rule(RuleLimit::Limited {
            requests_per_unit: 1,
            unit,
            unit_multiplier,
        })
    };
    assert_eq!(limited(Unit::Second, 1).duration_ms(), Some(1_000));
    assert_eq!(limited(Unit::Minute, 5).duration_ms(), Some(300_000));
    assert_eq!(limited(Unit::Year, 1).duration_ms(), Some(31_536_000_000));
    assert_eq!(rule(RuleLimit::Unlimited).duration_ms(), None);
    // Not reachable through the loader, which rejects it; no panic anyway.
    assert_eq!(limited(Unit::Year, u32::MAX).duration_ms(), Some(u64::MAX));
}

#[test]
fn dump_lines() {
    let mut r = rule(RuleLimit::Limited {
        requests_per_unit: 500,
        unit: Unit::Second,
        unit_multiplier: 1,
    });
    assert_eq!(
        r.dump_line(),
        "d.k: unit=SECOND requests_per_unit=500, shadow_mode: false"
    );
    r.limit = RuleLimit::Limited {
        requests_per_unit: 7,
        unit: Unit::Minute,
        unit_multiplier: 5,
    };
    r.name = Some("n".into());
    r.replaces = Box::new(["x".into(), "y".into()]);
    r.shadow_mode = true;
    assert_eq!(
        r.dump_line(),
        "d.k: unit=MINUTE requests_per_unit=7, shadow_mode: true, unit_multiplier: 5, \
             name: n, replaces: x,y"
    );
    let u = rule(RuleLimit::Unlimited);
    assert_eq!(
        u.dump_line(),
        "d.k: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true"
    );
}
