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

fn counters(limit: u64) -> Vec<BucketCounter> {
    vec![BucketCounter {
        counter: CounterKey {
            workspace: "quota".into(),
            namespace: "7:api_key/".into(),
            identifier: "3:hot".into(),
            duration_ms: 60_000,
        },
        limit,
    }]
}

#[tokio::test]
async fn members_of_one_counter_split_its_rate_by_demand() {
    let engine = engine();
    let board = Arc::new(QuotaBoard::default());
    let counters = counters(600);
    let (Some(big), Some(small)) = (board.join(&counters, 1), board.join(&counters, 2)) else {
        panic!("both join")
    };
    big.report(24.0, &[0], None);
    small.report(3.0, &[0], None);
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
    big.report(24.0, &[600], Some(Duration::from_secs(5)));
    assert_eq!(big.share(&engine, now).rate, 0.0);
    assert_eq!(small.share(&engine, now).rate, 0.0);

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
    let board = Arc::new(QuotaBoard::default());
    // 60 a second free, demands 100, 10 and 10: 40, 10, 10
    let counters = counters(600);
    let members: Vec<Member> = (0..3).filter_map(|s| board.join(&counters, s)).collect();
    for (member, demand) in members.iter().zip([100.0, 10.0, 10.0]) {
        member.report(demand, &[0], None);
    }
    let now = Instant::now();
    let shares: Vec<f64> = members.iter().map(|m| m.share(&engine, now).rate).collect();
    assert_eq!(shares, vec![40.0, 10.0, 10.0]);
}
