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
        windows: Default::default(),
    }
}

#[test]
fn a_window_held_at_its_limit_grows_as_fast_as_the_previous_one_slides_out() {
    // half-way: 300 of the previous 600 still weigh, 300 in this one: at the limit
    let two = Duration::from_secs(2);
    let rate = counter_rate(600, &state(600, 300, 30_000), two);
    assert!((rate - 10.0).abs() < 1e-9, "{rate}");
    // an empty first window: its room over the convergence time
    let rate = counter_rate(600, &state(0, 0, 0), two);
    assert!((rate - 300.0).abs() < 1e-9, "{rate}");
    // over the limit: nothing until it slides back
    assert_eq!(counter_rate(600, &state(600, 900, 30_000), two), 0.0);
}

#[test]
fn a_fixed_window_grows_by_its_room_alone() {
    // half-way with 300 of 600 used in this window and 600 in the previous: sliding counts
    // 600 and grows at what the previous window frees, 10/s (the test above); fixed counts
    // 300 and hands out its room, 300 over 2 s, then nothing once the window is full.
    let two = Duration::from_secs(2);
    let fixed = |previous, current| CounterState {
        windows: gcounter_engine::Windows::Fixed,
        ..state(previous, current, 30_000)
    };
    let rate = counter_rate(600, &fixed(600, 300), two);
    assert!((rate - 150.0).abs() < 1e-9, "{rate}");
    assert_eq!(counter_rate(600, &fixed(600, 600), two), 0.0);
    // A full current window with an empty previous one: no room either way.
    assert_eq!(counter_rate(600, &fixed(0, 600), two), 0.0);
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
fn a_rate_becomes_a_token_bucket_refilled_every_minute() {
    assert_eq!(
        Strategy::for_rate(10.0),
        Strategy::TokenBucket {
            max_tokens: 10,
            tokens_per_fill: 600,
            fill_interval_s: 60
        }
    );
    assert_eq!(
        Strategy::for_rate(0.5),
        Strategy::TokenBucket {
            max_tokens: 1,
            tokens_per_fill: 30,
            fill_interval_s: 60
        }
    );
    assert_eq!(Strategy::for_rate(0.01), Strategy::DenyAll);
    assert_eq!(Strategy::for_rate(f64::NAN), Strategy::DenyAll);
    assert_eq!(Strategy::for_rate(1_000.0).rate(), Some(1_000.0));
}

#[test]
fn buckets_of_other_rates_are_other_buckets_to_envoy() {
    // Slow rates once differed only in the interval's seconds (0.5 and 1 a second were both
    // 10 tokens, at most 1), and Envoy kept the faster bucket when sent the slower one.
    let mut seen = std::collections::HashMap::new();
    for n in 1..=20_000 {
        let rate = f64::from(n) / 200.0;
        for strategy in [Strategy::for_rate(rate), Strategy::with_burst(rate, 9)] {
            if let Some(identity) = strategy.envoy_identity() {
                let first = *seen.entry(identity).or_insert(strategy);
                assert_eq!(
                    first, strategy,
                    "the same bucket to Envoy at {rate} a second"
                );
            }
        }
    }
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

const HORIZON: Duration = Duration::from_secs(10);

fn burst(pool: f64, held: f64) -> Burst {
    Burst {
        pool,
        held,
        alone: false,
    }
}

fn alone(pool: f64, held: f64) -> Burst {
    Burst {
        pool,
        held,
        alone: true,
    }
}

#[test]
fn a_lone_bucket_on_a_fresh_counter_is_lent_the_room_at_once() {
    // 10 a minute, one counted: 9 of room, over 10 s 0.9 a second. Lent all 9 at once,
    // nothing is left to the rate but the slowest a token bucket states.
    let decision = Strategy::decide(None, 0, 0.9, burst(9.0, 0.0), HORIZON);
    assert_eq!(decision.lent, 9);
    assert_eq!(
        decision.strategy,
        Strategy::TokenBucket {
            max_tokens: 9,
            tokens_per_fill: 1,
            fill_interval_s: 60,
        }
    );
    // The room held, the rate 0: the burst stays while the Envoy may hold it (a changed
    // bucket would start full again).
    let kept = Strategy::decide(Some(decision.strategy), 9, 0.0, burst(0.0, 9.0), HORIZON);
    assert_eq!(
        kept,
        Decision {
            strategy: decision.strategy,
            lent: 0
        }
    );
    // Shown spent: the denial.
    let spent = Strategy::decide(Some(decision.strategy), 9, 0.0, burst(0.0, 0.0), HORIZON);
    assert_eq!(
        spent,
        Decision {
            strategy: Strategy::DenyAll,
            lent: 0
        }
    );
}

#[test]
fn a_burst_is_never_more_than_the_room_no_envoy_holds() {
    // 3.7 unheld: 3 lent, out of the rate (3 over 10 s).
    let decision = Strategy::decide(None, 0, 1.0, burst(3.7, 0.0), HORIZON);
    assert_eq!(decision.lent, 3);
    let rate = decision.strategy.rate().unwrap_or(0.0);
    assert!((rate - 0.7).abs() < 0.05, "{rate}");
    // Nothing unheld: the rate alone.
    let decision = Strategy::decide(None, 0, 1.0, burst(0.0, 0.0), HORIZON);
    assert_eq!(
        decision,
        Decision {
            strategy: Strategy::for_rate(1.0),
            lent: 0
        }
    );
    // A large room: at most MAX_BURST, a second of the rate less.
    let decision = Strategy::decide(None, 0, 5.0, burst(600.0, 0.0), HORIZON);
    assert_eq!(decision.lent, MAX_BURST);
    assert_eq!(decision.strategy, Strategy::with_burst(4.0, MAX_BURST));
}

#[test]
fn a_rate_whose_second_holds_the_burst_lends_nothing() {
    let decision = Strategy::decide(None, 0, 60.0, burst(600.0, 0.0), HORIZON);
    assert_eq!(
        decision,
        Decision {
            strategy: Strategy::for_rate(60.0),
            lent: 0
        }
    );
}

#[test]
fn an_unchanged_assignment_lends_nothing() {
    // Envoy keeps an identical bucket's tokens: nothing new to lend, nothing to charge.
    let assigned = Strategy::for_rate(2.0);
    let decision = Strategy::decide(Some(assigned), 0, 2.1, burst(9.0, 0.0), HORIZON);
    assert_eq!(
        decision,
        Decision {
            strategy: assigned,
            lent: 0
        }
    );
    // A rate that moved: a changed bucket, lent nothing (Envoy may start it with what the
    // old one had left, so a charged burst would be room no Envoy got).
    let decision = Strategy::decide(Some(assigned), 0, 0.9, burst(9.0, 0.0), HORIZON);
    assert_eq!(
        decision,
        Decision {
            strategy: Strategy::for_rate(0.9),
            lent: 0
        }
    );
    // After a denial, Envoy creates the token bucket anew: lent.
    let decision = Strategy::decide(Some(Strategy::DenyAll), 0, 0.9, burst(9.0, 0.0), HORIZON);
    assert_eq!(decision.lent, 9);
}

#[test]
fn a_bucket_alone_on_its_counter_is_lent_the_whole_room() {
    // 600 a minute, a fresh counter: all 600 at once, nothing left to the rate.
    let decision = Strategy::decide(None, 0, 60.0, alone(600.0, 0.0), HORIZON);
    assert_eq!(decision.lent, 600);
    assert_eq!(decision.strategy, Strategy::with_burst(0.0, 600));
    // Shared, the same room lends at most MAX_BURST.
    let shared = Strategy::decide(None, 0, 5.0, burst(600.0, 0.0), HORIZON);
    assert_eq!(shared.lent, MAX_BURST);
}

#[test]
fn a_lone_burst_is_taken_back_once_the_counter_is_shared() {
    let lone = Strategy::decide(None, 0, 6.0, alone(60.0, 0.0), HORIZON);
    assert_eq!(lone.lent, 60);
    // Still alone, still held: kept (a changed bucket would start full again).
    let kept = Strategy::decide(Some(lone.strategy), 60, 0.0, alone(0.0, 40.0), HORIZON);
    assert_eq!(kept.strategy, lone.strategy);
    // Another Envoy joined, the room all held: its rate has not moved, yet the burst goes,
    // for the plain bucket of its share (a denial while nothing is left to share).
    let taken = Strategy::decide(Some(lone.strategy), 60, 0.0, burst(0.0, 40.0), HORIZON);
    assert_eq!(
        taken,
        Decision {
            strategy: Strategy::DenyAll,
            lent: 0
        }
    );
    let taken = Strategy::decide(Some(lone.strategy), 60, 1.0, burst(0.0, 40.0), HORIZON);
    assert_eq!(taken.strategy, Strategy::for_rate(1.0));
    // A burst within the cap is not taken back: its Envoy keeps it.
    let small = Strategy::decide(None, 0, 1.0, burst(5.0, 0.0), HORIZON);
    let kept = Strategy::decide(
        Some(small.strategy),
        small.lent,
        0.5,
        burst(0.0, 5.0),
        HORIZON,
    );
    assert_eq!(kept.strategy, small.strategy);
}

#[test]
fn lending_takes_what_is_lent_off_the_shares_at_once() {
    // 2 a second spare for each of 3: 3 a second less is 1 spare each.
    assert_eq!(Level::Spare(2.0).lessen(3.0, 3), Some(Level::Spare(1.0)));
    // Less spare than is lent: only a new split can say.
    assert_eq!(Level::Spare(0.5).lessen(3.0, 3), None);
    // Capped at 5: every capped share loses all of it.
    assert_eq!(Level::Capped(5.0).lessen(2.0, 3), Some(Level::Capped(3.0)));
    assert_eq!(Level::Capped(1.0).lessen(2.0, 3), Some(Level::Capped(0.0)));
}
