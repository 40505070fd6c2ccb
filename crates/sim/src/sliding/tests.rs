use super::{most_in_a_window_starting_before, most_in_any_window};

const W: u64 = 1_000;

#[test]
fn no_admission_is_zero() {
    assert_eq!(most_in_any_window(&[], W), 0);
}

#[test]
fn one_admission_is_one() {
    assert_eq!(most_in_any_window(&[42], W), 1);
}

#[test]
fn an_interval_holds_its_start_and_not_its_end() {
    // [0, 1000) holds 0 and 999, not 1000.
    assert_eq!(most_in_any_window(&[0, 999], W), 2);
    assert_eq!(most_in_any_window(&[0, 1_000], W), 1);
    assert_eq!(most_in_any_window(&[0, 1_000, 2_000, 3_000], W), 1);
}

#[test]
fn admissions_on_a_window_boundary_count_with_either_side() {
    // Fixed windows [0, 1000) and [1000, 2000): 2 in each. The boundary instant 1000
    // belongs to the second fixed window; the interval [100, 1100) holds it with both of
    // the first window's: 3.
    let times = [100, 500, 1_000, 1_600];
    assert_eq!(most_in_any_window(&times, W), 3);
}

#[test]
fn the_worst_interval_can_span_two_fixed_windows() {
    // 3 in each fixed window, but 4 within [700, 1700): the last 2 of window 0 and the
    // first 2 of window 1.
    let times = [100, 700, 800, 1_100, 1_200, 1_900];
    assert_eq!(most_in_any_window(&times, W), 4);
}

#[test]
fn simultaneous_admissions_all_count() {
    assert_eq!(most_in_any_window(&[5, 5, 5, 1_004, 1_005], W), 4);
}

#[test]
fn a_quiet_stretch_does_not_carry_over() {
    // 4 in [100, 1100), then a gap, then 2.
    let times = [100, 200, 1_050, 1_099, 5_000, 5_999];
    assert_eq!(most_in_any_window(&times, W), 4);
}

#[test]
fn a_window_of_one_millisecond_counts_one_instant() {
    assert_eq!(most_in_any_window(&[1, 2, 2, 3], 1), 2);
}

#[test]
fn only_intervals_starting_before_the_bound_count() {
    // [0, 1000) holds 2; [900, 1900) holds 4 but [1000, 2000) would hold 4 too.
    let times = [0, 900, 1_000, 1_500, 1_800];
    assert_eq!(most_in_a_window_starting_before(&times, W, 1), 2);
    assert_eq!(most_in_a_window_starting_before(&times, W, 901), 4);
    assert_eq!(most_in_a_window_starting_before(&times, W, 0), 0);
    assert_eq!(most_in_any_window(&times, W), 4);
}
