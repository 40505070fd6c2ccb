use super::super::memory::BucketBytes;
use super::*;
use crate::admin::QuotaShares;
use gcounter_engine::recorder::NoRecorder;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{EngineSettings, Hit, ManualClock};

fn engine() -> Engine {
    Engine::new(
        EngineSettings::default(),
        Arc::new(InProcessOrigin::new(1_000)),
        Arc::new(ManualClock::new(600_000)),
        Arc::new(NoRecorder),
    )
}

fn board(max_members: usize) -> Arc<QuotaBoard> {
    Arc::new(QuotaBoard::new(
        max_members,
        Arc::new(BucketBytes::new(1 << 20)),
    ))
}

fn counters(limit: u64) -> Arc<[BucketCounter]> {
    Arc::from(vec![BucketCounter {
        counter: CounterKey {
            workspace: "quota".into(),
            namespace: "7:api_key/".into(),
            identifier: "3:hot".into(),
            duration_ms: 60_000,
        },
        limit,
    }])
}

#[tokio::test]
async fn members_of_one_counter_split_its_rate_by_demand() {
    let engine = engine();
    let board = board(100);
    let counters = counters(600);
    let (Ok(big), Ok(small)) = (board.join(&counters, 1), board.join(&counters, 2)) else {
        panic!("both join")
    };
    big.report(24.0, &[0], None, engine.now_ms());
    small.report(3.0, &[0], None, engine.now_ms());
    let now = Instant::now();
    // an empty window: its 600 over two reporting intervals of 5 s, 60 a second, more than
    // both want: each gets its demand and half the rest
    let (a, b) = (big.share(&engine, now).rate, small.share(&engine, now).rate);
    assert!((a + b - 60.0).abs() < 1e-9, "{a} + {b}");
    assert!((a - (24.0 + 16.5)).abs() < 1e-9, "{a}");
    let shown = board.shares(&counters[0].counter);
    assert_eq!(shown.len(), 2);
    assert_eq!((shown[0].stream, shown[1].stream), (1, 2));

    // the window spent: nothing for anyone
    let counter = &counters[0];
    let hit = Hit {
        counter: counter.counter.borrowed(),
        limit: 600,
        cost: 600,
    };
    engine.count_admitted(hit, 0).await;
    big.report(24.0, &[600], Some(Duration::from_secs(5)), engine.now_ms());
    let later = now + SPLIT_REUSE;
    assert_eq!(big.share(&engine, later).rate, 0.0);
    assert_eq!(small.share(&engine, later).rate, 0.0);

    drop(big);
    assert_eq!(board.shares(&counters[0].counter).len(), 1);
    drop(small);
    assert!(
        board.shares(&counters[0].counter).is_empty(),
        "the group leaves with its last member"
    );
}

#[test]
fn a_split_over_demand_is_max_min_fair() {
    let engine = engine();
    let board = board(100);
    // 60 a second free, demands 100, 10 and 10: 40, 10, 10
    let counters = counters(600);
    let members: Vec<Member> = (0..3)
        .filter_map(|s| board.join(&counters, s).ok())
        .collect();
    for (member, demand) in members.iter().zip([100.0, 10.0, 10.0]) {
        member.report(demand, &[0], None, engine.now_ms());
    }
    let now = Instant::now();
    let shares: Vec<f64> = members.iter().map(|m| m.share(&engine, now).rate).collect();
    assert_eq!(shares, vec![40.0, 10.0, 10.0]);
}

#[test]
fn a_full_group_refuses_members_and_charges_its_counters_once() {
    let engine = engine();
    let memory = Arc::new(BucketBytes::new(1 << 20));
    let board = Arc::new(QuotaBoard::new(2, Arc::clone(&memory)));
    let counters = counters(600);
    let first = board.join(&counters, 1).expect("room");
    let charged = memory.used();
    assert!(charged > 0, "the group's counters are charged");
    let second = board.join(&counters, 2).expect("room");
    assert_eq!(memory.used(), charged, "one group, charged once");
    assert_eq!(board.join(&counters, 3).err(), Some(JoinRefused::GroupFull));
    assert!(Arc::ptr_eq(first.counters(), second.counters()));
    let _ = first.share(&engine, Instant::now());
    drop((first, second));
    assert_eq!(memory.used(), 0, "the group left with its last member");
}

/// A report of k usages on a group of n members used to compute the split k times, each
/// O(n): the splits computed for a report of every member must stay near one per
/// n / CHANGES_PER_SPLIT changes, not one per usage.
#[test]
fn a_large_group_computes_its_split_a_bounded_number_of_times() {
    let engine = engine();
    let board = board(20_000);
    let counters = counters(600_000);
    let members: Vec<Member> = (0..4_000)
        .map(|s| board.join(&counters, s).expect("room"))
        .collect();
    let now = Instant::now();
    let mut computed = 0;
    for member in &members {
        member.report(1.0, &[1], Some(Duration::from_secs(5)), engine.now_ms());
        let _ = member.share(&engine, now);
        // A share that computed the split starts its count of changes again.
        if lock(&member.group.state).changes == 0 {
            computed += 1;
        }
    }
    // 4,000 reports, a split every 4,000 / 16 = 250 changes: about 16 splits (plus the joins'
    // changes), never one per report.
    assert!(computed <= 40, "{computed} splits for 4,000 reports");
    assert!(computed >= 2, "the split follows the reports: {computed}");
}

/// One hit counted through a report of `member` (its Envoy's first request, or more).
async fn reported(engine: &Engine, member: &Member, hits: u64, interval: Option<Duration>) {
    let counter = &member.counters()[0];
    let hit = Hit {
        counter: counter.counter.borrowed(),
        limit: counter.limit,
        cost: hits,
    };
    engine.count_admitted(hit, 0).await;
    member.report(hits as f64, &[hits], interval, engine.now_ms());
}

#[tokio::test]
async fn a_lone_bucket_on_a_fresh_counter_is_granted_the_room_at_once() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let alice = board.join(&counters, 1).expect("room");
    reported(&engine, &alice, 1, None).await;
    let now = Instant::now();
    assert!(alice.offer_burst(&engine), "alone on a fresh counter");
    let share = alice.share(&engine, now);
    // 9 left: 8 at once, and 8 a minute of fill until the next report 5 s on (0.7 more).
    let burst = share.burst.expect("a burst");
    assert_eq!(burst.max_tokens(), 8, "{burst:?}");
    assert!((share.rate - 8.0 / 60.0).abs() < 1e-9, "{share:?}");
    let shown = board.shares(&counters[0].counter);
    assert_eq!((shown[0].burst, shown[0].share), (8, share.rate));
}

#[tokio::test]
async fn a_burst_is_given_once_and_held_back_until_its_holder_reports() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let alice = board.join(&counters, 1).expect("room");
    reported(&engine, &alice, 1, None).await;
    let now = Instant::now();
    assert!(alice.offer_burst(&engine));
    let granted = alice.share(&engine, now).burst;
    // A reassignment (a tick) sends the same burst: Envoy keeps an unchanged bucket's tokens.
    let later = now + SPLIT_REUSE;
    assert!(!alice.offer_burst(&engine), "one burst at a time");
    assert_eq!(alice.share(&engine, later).burst, granted);
    // Another Envoy joining meanwhile gets nothing of what the burst may spend.
    let bob = board.join(&counters, 2).expect("room");
    reported(&engine, &bob, 1, None).await;
    assert!(!bob.offer_burst(&engine), "not alone");
    assert_eq!(
        Strategy::for_rate(bob.share(&engine, later).rate),
        Strategy::DenyAll
    );
    drop(bob);
    // Its next report says what the burst admitted: the burst is over, not given again in
    // this window, and the share is the room left (10 − 1 − 1 − 5 = 3) over 10 s.
    reported(&engine, &alice, 5, Some(Duration::from_secs(5))).await;
    let after = later + SPLIT_REUSE;
    assert!(!alice.offer_burst(&engine), "once a window");
    let share = alice.share(&engine, after);
    assert_eq!(share.burst, None);
    assert!((share.rate - 0.3).abs() < 1e-9, "{share:?}");
}

#[tokio::test]
async fn a_counter_someone_else_counted_on_gets_no_burst() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let alice = board.join(&counters, 1).expect("room");
    // An RLS v3 decision (or another process, another region) counted first.
    let hit = Hit {
        counter: counters[0].counter.borrowed(),
        limit: 10,
        cost: 1,
    };
    engine.count_admitted(hit, 0).await;
    reported(&engine, &alice, 1, None).await;
    assert!(!alice.offer_burst(&engine));
}

/// Envoys that all joined before any of them reported: none reports alone, none gets a burst.
#[tokio::test]
async fn envoys_joining_before_any_report_get_no_burst() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let envoys: Vec<Member> = (0..3)
        .map(|s| board.join(&counters, s).expect("room"))
        .collect();
    for envoy in &envoys {
        reported(&engine, envoy, 1, None).await;
        assert!(!envoy.offer_burst(&engine), "three members: none is alone");
    }
}

/// Three Envoys bursting on one counter together, the first to report alone: one burst, and
/// the others are assigned nothing while it is out, so the window admits at most the limit
/// and the first request of each Envoy but the burst's holder (they pass before any
/// assignment).
#[tokio::test]
async fn envoys_joining_together_stay_within_the_bound() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let now = Instant::now();
    let first = board.join(&counters, 1).expect("room");
    reported(&engine, &first, 1, None).await;
    assert!(first.offer_burst(&engine));
    let burst = first.share(&engine, now).burst.expect("a burst");
    // What the holder may admit until its next report: the burst and its fill meanwhile.
    let mut admitted = 1.0 + f64::from(burst.max_tokens()) + burst.rate().unwrap_or(0.0) * 5.0;
    let others: Vec<Member> = (2..4)
        .map(|s| board.join(&counters, s).expect("room"))
        .collect();
    for (n, other) in others.iter().enumerate() {
        reported(&engine, other, 1, None).await;
        admitted += 1.0;
        assert!(!other.offer_burst(&engine));
        let at = now + SPLIT_REUSE * (n as u32 + 1);
        let assigned = Strategy::for_rate(other.share(&engine, at).rate);
        assert_eq!(
            assigned,
            Strategy::DenyAll,
            "nothing while the burst is out"
        );
    }
    assert!(
        admitted <= 10.0 + 2.0,
        "{admitted} admitted: over the limit and 1 per other Envoy"
    );
}
