use super::*;

const LIMIT: u64 = 10;
const W: u64 = 1_000;

/// `count` admissions of cost 1 on key 0 at `at_ms`.
fn admit(oracle: &mut NeverBelow, at_ms: u64, count: u64) {
    for _ in 0..count {
        oracle.record(0, 0, at_ms, 1, true);
    }
}

/// A new oracle that saw `count` admissions of cost 1 on key 0 at `at_ms`.
fn admitted(at_ms: u64, count: u64) -> NeverBelow {
    let mut oracle = NeverBelow::new(LIMIT, W);
    admit(&mut oracle, at_ms, count);
    oracle
}

#[test]
fn a_denial_with_room_left_is_a_false_denial() {
    let mut oracle = admitted(100, 9);
    oracle.record(7, 0, 200, 1, false); // 9 + 1 = 10 ≤ 10: had to pass
    assert_eq!(
        oracle.false_denials(),
        &[FalseDenial {
            request: 7,
            key: 0,
            at_ms: 200
        }]
    );
}

#[test]
fn reaching_the_limit_exactly_is_within_it() {
    let mut oracle = admitted(100, 9);
    assert!(oracle.within_limit(0, 300, 1));
    assert!(!oracle.within_limit(0, 300, 2));
    admit(&mut oracle, 300, 1);
    oracle.record(1, 0, 400, 1, false); // 11 > 10: a fair denial
    assert!(oracle.false_denials().is_empty());
    assert_eq!(oracle.over_admissions(), 0);
}

#[test]
fn the_previous_window_weighs_by_what_is_left_of_it() {
    let oracle = admitted(900, 10);
    // At 1250, 75 % of the previous window is still inside: ⌊10 × 750 / 1000⌋ = 7.
    assert!(oracle.within_limit(0, 1_250, 3));
    assert!(!oracle.within_limit(0, 1_250, 4));
    // At 1251, ⌊10 × 749 / 1000⌋ = 7 (rounded down): still 3 left.
    assert!(oracle.within_limit(0, 1_251, 3));
    // At 1300, ⌊10 × 700 / 1000⌋ = 7; at 1301, 6: one more.
    assert!(oracle.within_limit(0, 1_301, 4));
    // Exactly at the boundary the whole previous window counts: nothing left.
    assert!(!oracle.within_limit(0, 1_000, 1));
    // Two windows later it no longer counts.
    assert!(oracle.within_limit(0, 2_000, 10));
}

#[test]
fn keys_are_counted_apart() {
    let oracle = admitted(0, 10);
    assert!(!oracle.within_limit(0, 10, 1));
    assert!(oracle.within_limit(1, 10, 10));
}

#[test]
fn an_admission_over_the_limit_is_an_over_admission_and_is_counted() {
    let oracle = admitted(0, 11);
    assert_eq!(oracle.over_admissions(), 1);
    // the 11th is part of the truth: the next window starts with ⌊11 × 1⌋ behind it
    assert!(!oracle.within_limit(0, 1_000, 1));
    assert!(oracle.false_denials().is_empty());
}
