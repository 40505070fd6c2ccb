use super::super::memory::BucketBytes;
use super::*;
use crate::admin::QuotaShares;
use crate::rlqs::share::Strategy;
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
        true,
        Arc::new(BucketBytes::new(1 << 20)),
    ))
}

fn counters(limit: u64) -> Arc<[BucketCounter]> {
    Arc::from(vec![BucketCounter {
        counter: CounterKey {
            scope: gcounter_engine::cell_key::Scope::new("quota", "7:api_key/"),
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
    big.report(24.0, &[0], None, 0, 0);
    small.report(3.0, &[0], None, 0, 0);
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
        exact: false,
    };
    engine.count_admitted(hit, 0).await;
    big.report(24.0, &[600], Some(Duration::from_secs(5)), 0, 0);
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
        member.report(demand, &[0], None, 0, 0);
    }
    let now = Instant::now();
    let shares: Vec<f64> = members.iter().map(|m| m.share(&engine, now).rate).collect();
    assert_eq!(shares, vec![40.0, 10.0, 10.0]);
}

#[test]
fn a_full_group_refuses_members_and_charges_its_counters_once() {
    let engine = engine();
    let memory = Arc::new(BucketBytes::new(1 << 20));
    let board = Arc::new(QuotaBoard::new(2, true, Arc::clone(&memory)));
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
        member.report(1.0, &[1], Some(Duration::from_secs(5)), 0, 0);
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

/// The lending against one counter: what one member is lent no other can be, until a
/// report shows it spent; a member that leaves gives back what it held.
#[tokio::test]
async fn what_is_lent_is_charged_until_a_report_shows_it() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let (Ok(first), Ok(second)) = (board.join(&counters, 1), board.join(&counters, 2)) else {
        panic!("both join")
    };
    let now = Instant::now();
    let decide = |member: &Member, at| {
        member.decide(&engine, at, |share| {
            Strategy::decide(None, 0, share.rate, share.burst, share.horizon)
        })
    };
    // An empty window of 10: the first is lent all of it, the second nothing.
    let lent = decide(&first, now);
    assert_eq!(lent.lent, 10, "{lent:?}");
    let second_share = second.share(&engine, now);
    assert_eq!(second_share.burst.pool, 0.0, "{second_share:?}");
    assert_eq!(second_share.rate, 0.0, "the room is held: no rate either");
    assert_eq!(decide(&second, now).strategy, Strategy::DenyAll);

    // The first reports 4 of its 10 admitted: counted, 6 still held, the pool still empty.
    let hit = Hit {
        counter: counters[0].counter.borrowed(),
        limit: 10,
        cost: 4,
        exact: false,
    };
    engine.count_admitted(hit, 0).await;
    first.report(4.0, &[4], Some(Duration::from_secs(5)), 4, 10);
    let share = second.share(&engine, now);
    assert_eq!(share.burst.pool, 0.0, "{share:?}");
    assert_eq!(first.share(&engine, now).burst.held, 6.0);

    // A report under a bucket that lent nothing (a new token bucket replaced it) shows the
    // Envoy holds none of it.
    first.report(0.0, &[0], Some(Duration::from_secs(5)), 0, 0);
    assert_eq!(second.share(&engine, now + SPLIT_REUSE).burst.pool, 6.0);

    // Lent again, then gone: what it held is back in the pool.
    assert_eq!(decide(&first, now + SPLIT_REUSE).lent, 6);
    assert_eq!(second.share(&engine, now + SPLIT_REUSE).burst.pool, 0.0);
    drop(first);
    assert_eq!(second.share(&engine, now + SPLIT_REUSE).burst.pool, 6.0);
}

/// Envoys joining one fresh counter together: each new token bucket starts full, and all of
/// them with their rates until the next reports (5 s) stay within the room and one token of
/// rounding each (the bound of docs/rlqs.md).
#[test]
fn envoys_joining_together_stay_within_the_room() {
    let engine = engine();
    let board = board(100);
    let counters = counters(10);
    let members: Vec<Member> = (0..5)
        .filter_map(|s| board.join(&counters, s).ok())
        .collect();
    let now = Instant::now();
    let mut admissible = 0.0;
    for member in &members {
        member.report(1.0, &[0], None, 0, 0);
        let decision = member.decide(&engine, now, |share| {
            Strategy::decide(None, 0, share.rate, share.burst, share.horizon)
        });
        if let Strategy::TokenBucket { max_tokens, .. } = decision.strategy {
            admissible += f64::from(max_tokens) + decision.strategy.rate().unwrap_or(0.0) * 5.0;
        }
    }
    assert!(
        admissible <= 10.0 + members.len() as f64,
        "{admissible} admissible before the next reports"
    );
    assert!(admissible >= 10.0, "the room is handed out: {admissible}");
}

#[test]
fn a_member_is_alone_until_another_joins_and_only_on_a_sole_process() {
    let engine = engine();
    let board = board(100);
    let counters = counters(600);
    let Ok(first) = board.join(&counters, 1) else {
        panic!("joins")
    };
    let now = Instant::now();
    assert!(first.share(&engine, now).burst.alone);
    let Ok(second) = board.join(&counters, 2) else {
        panic!("joins")
    };
    assert!(!first.share(&engine, now).burst.alone);
    drop(second);
    assert!(first.share(&engine, now).burst.alone);

    // Counts shared with other processes: another process may hold a bucket of it too.
    let shared = Arc::new(QuotaBoard::new(
        100,
        false,
        Arc::new(BucketBytes::new(1 << 20)),
    ));
    let Ok(lone) = shared.join(&counters, 1) else {
        panic!("joins")
    };
    assert!(!lone.share(&engine, now).burst.alone);
}
