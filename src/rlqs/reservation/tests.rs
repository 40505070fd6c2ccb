use std::sync::Arc;

use gcounter_engine::cell_key::{CounterKey, Scope};
use gcounter_engine::recorder::NoRecorder;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{EngineSettings, ManualClock};

use super::*;

const WINDOW_MS: u64 = 60_000;
const TTL: Duration = Duration::from_secs(10);

fn engine(at_ms: u64) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(at_ms));
    let engine = Engine::new(
        EngineSettings::default(),
        Arc::new(InProcessOrigin::new(1_000)),
        Arc::clone(&clock) as Arc<dyn gcounter_engine::Clock>,
        Arc::new(NoRecorder),
    );
    (engine, clock)
}

fn counters(limit: u64) -> Vec<BucketCounter> {
    vec![BucketCounter {
        counter: CounterKey {
            scope: Scope::new("quota", "7:api_key/"),
            identifier: "3:hot".into(),
            duration_ms: WINDOW_MS,
        },
        limit,
    }]
}

/// What a decision finds counted on the counter (net of what was given back).
async fn counted(engine: &Engine, counters: &[BucketCounter]) -> u64 {
    let counter = &counters[0];
    let peek = engine.check(hit(counter, 0)).await;
    counter.limit - peek.remaining
}

/// Ten a second: 10 tokens, 10 a fill of one second.
fn ten_a_second() -> Strategy {
    Strategy::for_rate(10.0)
}

/// A ledger that was just asked for ten a second, at `at_ms` on a counter of `limit` a
/// minute, and what it sent.
struct FirstAsk {
    engine: Engine,
    clock: Arc<ManualClock>,
    counters: Vec<BucketCounter>,
    ledger: Ledger,
    start: Instant,
    sent: Option<Assignment>,
}

async fn ask_ten_a_second(at_ms: u64, limit: u64) -> FirstAsk {
    let (engine, clock) = engine(at_ms);
    let counters = counters(limit);
    let mut ledger = Ledger::default();
    let start = Instant::now();
    let sent = ledger
        .assign(&engine, &counters, ten_a_second(), start, TTL)
        .await;
    FirstAsk {
        engine,
        clock,
        counters,
        ledger,
        start,
        sent,
    }
}

/// Ten a second sent at `start` on a counter of 600 a minute, 5 s into its window.
async fn ten_a_second_sent() -> (Engine, Vec<BucketCounter>, Ledger, Instant) {
    let first = ask_ten_a_second(600_000 + 5_000, 600).await;
    (first.engine, first.counters, first.ledger, first.start)
}

#[tokio::test]
async fn a_new_bucket_takes_its_tokens_and_fills_before_it_is_sent() {
    let FirstAsk {
        engine,
        counters,
        sent,
        ..
    } = ask_ten_a_second(600_000 + 5_000, 600).await;
    // 10 tokens, and 10 a second for 10 s.
    assert_eq!(
        sent,
        Some(Assignment {
            strategy: ten_a_second(),
            ttl: TTL,
            taken: 10 + 100,
        })
    );
    assert_eq!(counted(&engine, &counters).await, 110);
}

#[tokio::test]
async fn a_renewal_takes_only_the_fills_it_adds() {
    let (engine, counters, mut ledger, start) = ten_a_second_sent().await;
    let half = start + TTL / 2;
    assert!(!ledger.due(
        ten_a_second(),
        Some((ten_a_second(), start)),
        start + Duration::from_secs(4),
        TTL
    ));
    assert!(ledger.due(ten_a_second(), Some((ten_a_second(), start)), half, TTL));
    let renewed = ledger
        .assign(&engine, &counters, ten_a_second(), half, TTL)
        .await;
    // Envoy's end moves 5 s (and up to one delivery) later: 6 s of 10 a second.
    assert_eq!(renewed.map(|a| a.taken), Some(60));
    assert_eq!(counted(&engine, &counters).await, 110 + 60);
    // Asked again at once, nothing moves: nothing taken, nothing to send.
    let again = ledger
        .assign(&engine, &counters, ten_a_second(), half, TTL)
        .await;
    assert_eq!(again, None);
}

#[tokio::test]
async fn an_assignment_ends_before_its_cell_and_none_is_sent_in_its_last_seconds() {
    let FirstAsk {
        engine,
        clock,
        counters,
        start: now,
        sent,
        ..
    } = ask_ten_a_second(600_000 + 52_000, 600).await;
    // 8 s left in the cell, one of them for the delivery: 7 s.
    assert_eq!(sent.map(|a| a.ttl), Some(Duration::from_secs(7)));
    clock.set(600_000 + 58_500);
    let mut late = Ledger::default();
    let denied = late
        .assign(&engine, &counters, ten_a_second(), now, TTL)
        .await;
    assert_eq!(
        denied,
        Some(Assignment {
            strategy: Strategy::DenyAll,
            ttl: TTL,
            taken: 0
        })
    );
}

#[tokio::test]
async fn without_the_room_a_smaller_bucket_or_a_denial_and_never_more_than_the_limit() {
    for limit in [0, 5, 30, 50, 119] {
        let FirstAsk {
            engine,
            counters,
            sent,
            ..
        } = ask_ten_a_second(600_000 + 5_000, limit).await;
        let sent = sent.expect("an assignment");
        assert!(sent.taken <= limit, "{limit}: {sent:?}");
        assert_eq!(counted(&engine, &counters).await, sent.taken, "{limit}");
        match sent.strategy {
            Strategy::TokenBucket { .. } => {
                let most = max_tokens(sent.strategy) + fills(sent.strategy, sent.ttl);
                assert_eq!(most, sent.taken, "{limit}");
            }
            Strategy::DenyAll => assert_eq!(sent.taken, 0),
            Strategy::AllowAll => panic!("{limit}: allowed all"),
        }
    }
}

#[tokio::test]
async fn reports_are_not_counted_again_and_what_certainly_went_unspent_is_given_back() {
    let (engine, counters, mut ledger, start) = ten_a_second_sent().await;
    // 5 s on, 20 admitted: Envoy may still admit its 10 tokens and the fills from the
    // report's send (at the earliest 4 s in) to its end (at the latest 11 s in): 7 × 10.
    let report = ledger.report(&engine, &counters, 20, start + Duration::from_secs(5));
    assert_eq!(
        report,
        Report {
            uncovered: 0,
            give_back: 110 - 20 - 10 - 70
        }
    );
    give_back(&engine, &counters, report.give_back).await;
    // Once the assignment has certainly ended, all but what was reported goes back.
    let report = ledger.report(&engine, &counters, 30, start + Duration::from_secs(12));
    assert_eq!(report.uncovered, 0);
    give_back(&engine, &counters, report.give_back).await;
    assert_eq!(counted(&engine, &counters).await, 20 + 30);
}

#[tokio::test]
async fn a_report_that_may_predate_the_bucket_gives_nothing_back() {
    let (engine, counters, mut ledger, start) = ten_a_second_sent().await;
    let report = ledger.report(&engine, &counters, 0, start + Duration::from_millis(1_500));
    assert_eq!(report.give_back, 0);
}

#[tokio::test]
async fn reports_beyond_every_take_are_counted_and_a_new_cell_carries_the_cover() {
    let (engine, clock) = engine(600_000 + 5_000);
    let counters = counters(600);
    let mut ledger = Ledger::default();
    let start = Instant::now();
    // An Envoy that admitted with no assignment: nothing covers it.
    let report = ledger.report(&engine, &counters, 5, start);
    assert_eq!(report.uncovered, 5);
    ledger
        .assign(&engine, &counters, ten_a_second(), start, TTL)
        .await;
    // The next cell: what Envoy admitted in the last one, reported now, is covered by the
    // takes there; nothing of them is given back into this cell.
    clock.set(660_000 + 2_000);
    let later = start + Duration::from_secs(57);
    let report = ledger.report(&engine, &counters, 100, later);
    assert_eq!(
        report,
        Report {
            uncovered: 0,
            give_back: 0
        }
    );
    // 110 were taken: 10 of these 30 are covered.
    let report = ledger.report(&engine, &counters, 30, later);
    assert_eq!(report.uncovered, 20);
}

#[test]
fn fills_are_envoys_continuous_refill_rounded_up() {
    let every_three = Strategy::TokenBucket {
        max_tokens: 5,
        tokens_per_fill: 12,
        fill_interval_s: 3,
    };
    // 4 a second, continuously: 40 in 10 s, 1 (rounded up) in a millisecond.
    assert_eq!(fills(every_three, Duration::from_secs(10)), 40);
    assert_eq!(fills(every_three, Duration::from_millis(1)), 1);
    assert_eq!(fills(every_three, Duration::ZERO), 0);
    assert_eq!(fills(Strategy::DenyAll, Duration::from_secs(10)), 0);
}

#[tokio::test]
async fn a_bucket_replaced_pays_for_its_successor_with_the_refill_it_can_no_longer_get() {
    let (engine, counters, mut ledger, start) = ten_a_second_sent().await;
    // 2 s in, twenty a second instead: 20 tokens and 200 in 10 s, less the 7 s (from the
    // new bucket's arrival, a delivery from now, to the old one's end) of ten a second.
    let twenty = Strategy::for_rate(20.0);
    let sent = ledger
        .assign(
            &engine,
            &counters,
            twenty,
            start + Duration::from_secs(2),
            TTL,
        )
        .await;
    assert_eq!(sent.map(|a| a.taken), Some(20 + 200 - 70));
    assert_eq!(counted(&engine, &counters).await, 110 + 150);
}

#[tokio::test]
async fn a_bucket_held_is_not_traded_for_a_slower_one_that_fits() {
    // 10 a second fits on a counter of 150 a minute (110 taken); 20 a second does not, and
    // what would fit of it (less than 40 left) is slower than what Envoy holds.
    let FirstAsk {
        engine,
        counters,
        mut ledger,
        start,
        sent: first,
        ..
    } = ask_ten_a_second(600_000 + 5_000, 150).await;
    assert_eq!(first.map(|a| a.strategy), Some(ten_a_second()));
    let later = start + Duration::from_secs(1);
    let twenty = Strategy::for_rate(20.0);
    let sent = ledger.assign(&engine, &counters, twenty, later, TTL).await;
    assert_eq!(sent, None, "the bucket held runs on");
    assert_eq!(counted(&engine, &counters).await, 110);
}

#[test]
fn a_ledger_is_charged_what_it_holds() {
    // The box, the cells' sequences of a rule of a few windows, the allocator's rounding.
    let held = std::mem::size_of::<Ledger>() + 3 * std::mem::size_of::<u64>();
    assert!(
        (held..=200).contains(&LEDGER_BYTES),
        "{LEDGER_BYTES} B charged for {held} B"
    );
}
