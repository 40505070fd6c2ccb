use super::{most_in_a_window_starting_before, most_in_any_window};

const W: u64 = 1_000;

#[test]
fn the_most_in_any_window() {
    // (what it shows, admission times, window, the most in any interval of that length)
    let cases: [(&str, &[u64], u64, usize); 10] = [
        ("no admission is zero", &[], W, 0),
        ("one admission is one", &[42], W, 1),
        // [0, 1000) holds 0 and 999, not 1000.
        ("an interval holds its start", &[0, 999], W, 2),
        ("and not its end", &[0, 1_000], W, 1),
        ("nor the next ones", &[0, 1_000, 2_000, 3_000], W, 1),
        // Fixed windows [0, 1000) and [1000, 2000): 2 in each. The boundary instant 1000
        // belongs to the second fixed window; the interval [100, 1100) holds it with both
        // of the first window's: 3.
        (
            "admissions on a window boundary count with either side",
            &[100, 500, 1_000, 1_600],
            W,
            3,
        ),
        // 3 in each fixed window, but 4 within [700, 1700): the last 2 of window 0 and the
        // first 2 of window 1.
        (
            "the worst interval can span two fixed windows",
            &[100, 700, 800, 1_100, 1_200, 1_900],
            W,
            4,
        ),
        (
            "simultaneous admissions all count",
            &[5, 5, 5, 1_004, 1_005],
            W,
            4,
        ),
        // 4 in [100, 1100), then a gap, then 2.
        (
            "a quiet stretch does not carry over",
            &[100, 200, 1_050, 1_099, 5_000, 5_999],
            W,
            4,
        ),
        (
            "a window of one millisecond counts one instant",
            &[1, 2, 2, 3],
            1,
            2,
        ),
    ];
    for (what, times, window_ms, most) in cases {
        assert_eq!(most_in_any_window(times, window_ms), most, "{what}");
    }
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
