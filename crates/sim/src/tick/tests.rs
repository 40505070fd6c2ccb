use super::*;

#[test]
fn ticks_stay_within_the_jitter_of_fixed_targets() {
    let mut tick = Tick::new(1_000, 0.2, 10_000);
    assert_eq!(tick.next(0, 0.0), 9_800);
    assert_eq!(tick.next(9_800, 0.5), 11_000);
    // a late caller skips the missed targets instead of bunching them
    assert_eq!(tick.next(20_000, 0.5), 20_000);
    assert_eq!(tick.next(20_000, 0.5), 21_000);
}
