use super::*;

#[test]
fn every_unit_round_trips() {
    for unit in Unit::ALL {
        assert_eq!(from_proto(to_proto(unit) as i32), Some(unit));
    }
    assert_eq!(from_proto(0), None);
    assert_eq!(from_proto(99), None);
}
