use super::*;

#[test]
fn seconds_match_envoyproxy_ratelimit() {
    assert_eq!(Unit::Second.seconds(), 1);
    assert_eq!(Unit::Minute.seconds(), 60);
    assert_eq!(Unit::Hour.seconds(), 3_600);
    assert_eq!(Unit::Day.seconds(), 86_400);
    assert_eq!(Unit::Week.seconds(), 604_800);
    assert_eq!(Unit::Month.seconds(), 2_592_000);
    assert_eq!(Unit::Year.seconds(), 31_536_000);
}

#[test]
fn parse_ignores_case_and_round_trips() {
    for unit in Unit::ALL {
        assert_eq!(Unit::parse(unit.as_str()), Some(unit));
        assert_eq!(Unit::parse(unit.as_proto_name()), Some(unit));
    }
    assert_eq!(Unit::parse("Minute"), Some(Unit::Minute));
    assert_eq!(Unit::parse("fortnight"), None);
    assert_eq!(Unit::parse(""), None);
    assert_eq!(Unit::parse("unknown"), None);
}
