use super::*;
use gcounter_engine::CellView;

fn state(previous: u64, current: u64, elapsed_ms: u64) -> CounterState {
    let cell = |total| {
        Some(CellView {
            regional: total,
            global: 0,
            own: total,
        })
    };
    CounterState {
        now_ms: 60_000 + elapsed_ms,
        duration_ms: 60_000,
        elapsed_ms,
        current: cell(current),
        previous: cell(previous),
        strict: false,
        penalty_until_ms: None,
    }
}

#[test]
fn a_window_held_at_its_limit_grows_as_fast_as_the_previous_one_slides_out() {
    // half-way: 300 of the previous 600 still weigh, 300 in this one: at the limit
    let two = Duration::from_secs(2);
    let rate = counter_rate(600, &state(600, 300, 30_000), two, 0.0);
    assert!((rate - 10.0).abs() < 1e-9, "{rate}");
    // an empty first window: its room over the convergence time
    let rate = counter_rate(600, &state(0, 0, 0), two, 0.0);
    assert!((rate - 300.0).abs() < 1e-9, "{rate}");
    // over the limit: nothing until it slides back
    assert_eq!(counter_rate(600, &state(600, 900, 30_000), two, 0.0), 0.0);
}

#[test]
fn the_room_is_handed_out_over_two_reporting_intervals() {
    assert_eq!(convergence(Duration::from_secs(5)), Duration::from_secs(10));
    assert_eq!(convergence(Duration::from_millis(200)), MIN_CONVERGENCE);
}

#[test]
fn demand_under_the_total_gets_all_it_asks_and_an_equal_part_of_the_rest() {
    assert_eq!(split(9.0, &[1.0, 2.0]), vec![4.0, 5.0]);
    assert_eq!(split(5.0, &[]), Vec::<f64>::new());
}

#[test]
fn demand_over_the_total_is_split_max_min_fair() {
    assert_eq!(split(6.0, &[10.0, 1.0, 1.0]), vec![4.0, 1.0, 1.0]);
    assert_eq!(split(6.0, &[5.0, 5.0]), vec![3.0, 3.0]);
    // 80/10/10 of three times a limit of 10 per second
    assert_eq!(split(10.0, &[24.0, 3.0, 3.0]), vec![4.0, 3.0, 3.0]);
    let shares = split(0.0, &[3.0, 3.0]);
    assert_eq!(shares, vec![0.0, 0.0]);
}

#[test]
fn a_rate_becomes_a_token_bucket_of_whole_seconds() {
    assert_eq!(
        Strategy::for_rate(10.0),
        Strategy::TokenBucket {
            max_tokens: 10,
            tokens_per_fill: 10,
            fill_interval_s: 1
        }
    );
    // a slow rate: the interval grows until a fill holds ten tokens
    assert_eq!(
        Strategy::for_rate(0.5),
        Strategy::TokenBucket {
            max_tokens: 1,
            tokens_per_fill: 10,
            fill_interval_s: 20
        }
    );
    assert_eq!(Strategy::for_rate(0.01), Strategy::DenyAll);
    assert_eq!(Strategy::for_rate(f64::NAN), Strategy::DenyAll);
    assert_eq!(Strategy::for_rate(1_000.0).rate(), Some(1_000.0));
}

#[test]
fn a_rate_close_to_the_assigned_one_keeps_the_assignment() {
    let assigned = Strategy::for_rate(10.0);
    assert_eq!(Strategy::next(Some(assigned), 10.5), assigned);
    assert_eq!(Strategy::next(Some(assigned), 9.2), assigned);
    assert_eq!(
        Strategy::next(Some(assigned), 12.0),
        Strategy::for_rate(12.0)
    );
    assert_eq!(Strategy::next(Some(assigned), 0.0), Strategy::DenyAll);
    assert_eq!(Strategy::next(None, 10.4), Strategy::for_rate(10.4));
}

#[test]
fn a_burst_held_back_leaves_the_others_only_what_slides_out() {
    let ten = Duration::from_secs(10);
    // half-way, 300 of 600 left: held back, the counter grows only as the previous slides out
    let rate = counter_rate(600, &state(300, 150, 30_000), ten, 300.0);
    assert!((rate - 5.0).abs() < 1e-9, "{rate}");
}

#[test]
fn a_burst_is_the_room_less_its_fill_until_the_next_report() {
    let five = Duration::from_secs(5);
    // 9 left, the next report in 5 s: 8 at once, 8 a minute of fill: 8.67 held back
    let burst = Burst::of(9.0, five).expect("a burst");
    assert_eq!(burst.strategy.max_tokens(), 8);
    assert!((burst.rate - 8.0 / 60.0).abs() < 1e-9, "{burst:?}");
    assert!(burst.held <= 9.0 && burst.held > 8.5, "{burst:?}");
    // a large room: still within it, and full again within a minute of fill
    for room in [600.0, 12_345.0, 1e9] {
        let burst = Burst::of(room, five).expect("a burst");
        assert!(burst.held <= room * 1.001, "{room}: {burst:?}");
        let fill_s = f64::from(burst.strategy.max_tokens()) / burst.rate;
        assert!((fill_s - 60.0).abs() < 1e-6, "{room}: fills in {fill_s} s");
    }
    // less than two requests: no burst
    assert_eq!(Burst::of(1.5, five), None);
    assert_eq!(Burst::of(-3.0, five), None);
    assert_eq!(Burst::of(f64::NAN, five), None);
}
