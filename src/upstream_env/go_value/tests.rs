use super::*;

#[test]
fn integers_as_go_reads_them_with_base_zero() {
    for (text, value) in [
        ("300", 300),
        ("-5", -5),
        ("+7", 7),
        ("0x10", 16),
        ("0o17", 15),
        ("017", 15),
        ("0b101", 5),
        ("1_000", 1_000),
        ("0", 0),
    ] {
        assert_eq!(parse_int(text), Some(value), "{text}");
    }
    for text in [
        "",
        "ten",
        "1.5",
        "08",
        "0x",
        "99999999999999999999",
        "1e3",
        " 1",
    ] {
        assert_eq!(parse_int(text), None, "{text}");
    }
}

#[test]
fn durations_as_go_reads_them() {
    let ms = Duration::from_millis;
    for (text, value) in [
        ("0", Duration::ZERO),
        ("150us", Duration::from_micros(150)),
        ("150µs", Duration::from_micros(150)),
        ("1.5s", ms(1_500)),
        ("1h30m", Duration::from_secs(5_400)),
        ("300ms", ms(300)),
        ("10s", ms(10_000)),
    ] {
        assert_eq!(parse_duration(text), Some((false, value)), "{text}");
    }
    assert_eq!(parse_duration("-1s"), Some((true, ms(1_000))));
    for text in ["", "10", "1 s", "1sec", "s", "1d", ".s", "1..2s", "-"] {
        assert_eq!(parse_duration(text), None, "{text}");
    }
}

#[test]
fn maps_are_key_value_pairs() {
    assert_eq!(
        parse_map("a:1,b:2"),
        Some(vec![("a".into(), "1".into()), ("b".into(), "2".into())])
    );
    assert_eq!(parse_map(""), Some(vec![]));
    assert_eq!(parse_map("a=1"), None);
    assert_eq!(parse_map("a:1:2"), None);
}

#[test]
fn every_kind_names_the_problem() {
    assert!(GoKind::Int.check("20").is_ok());
    assert!(GoKind::Text.check("anything").is_ok());
    for (kind, text, word) in [
        (GoKind::Bool, "yes", "boolean"),
        (GoKind::Int, "twenty", "integer"),
        (GoKind::Float, "half", "number"),
        (GoKind::Duration, "150", "duration"),
        (GoKind::Map, "a=1", "key:value"),
    ] {
        let problem = kind.check(text).expect_err(text);
        assert!(problem.contains(word), "{problem}");
    }
}
