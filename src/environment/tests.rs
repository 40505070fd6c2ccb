use super::*;

const SHADOW: Switch = Switch {
    id: "shadow_mode",
    flag: "--shadow-mode",
    upstream: "SHADOW_MODE",
};

#[test]
fn ours_set_beats_upstreams_and_says_so() {
    let env = Environment::from_pairs([("SHADOW_MODE", "true")]);
    let ours = Origin::Ours("RLS_SHADOW_MODE".into());
    let got = resolve_switch(&SHADOW, false, ours.clone(), &env).expect("valid");
    assert!(!got.value);
    assert_eq!(got.origin, ours);
    let warning = got.warning.expect("a contradiction is warned about");
    assert!(
        warning.contains("RLS_SHADOW_MODE") && warning.contains("SHADOW_MODE=true"),
        "{warning}"
    );
}

#[test]
fn upstreams_applies_only_when_ours_is_unset() {
    let env = Environment::from_pairs([("SHADOW_MODE", "1")]);
    let got = resolve_switch(&SHADOW, false, Origin::Default, &env).expect("valid");
    assert!(got.value);
    assert_eq!(got.origin.to_string(), "upstream's SHADOW_MODE");
    let agree = resolve_switch(&SHADOW, true, Origin::Flag, &env).expect("valid");
    assert_eq!((agree.value, agree.warning), (true, None));
    let empty = Environment::from_pairs([("SHADOW_MODE", "")]);
    let got = resolve_switch(&SHADOW, false, Origin::Default, &empty).expect("valid");
    assert_eq!((got.value, got.origin), (false, Origin::Default));
    let bad = Environment::from_pairs([("SHADOW_MODE", "yes")]);
    let error = resolve_switch(&SHADOW, true, Origin::Flag, &bad).expect_err("not a bool");
    assert_eq!(error.variable, "SHADOW_MODE");
}
