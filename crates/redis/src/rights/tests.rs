//! Rights of `never_above` counters on real Redis: the machine's node, and a Sentinel set of
//! the test's own for a failover.

use std::time::{Duration, Instant};

use super::*;
use crate::testing::SentinelSet;
use crate::tests::{another_process, cell, local_redis, sentinel_settings};
use gcounter_engine::regional::RegionalOrigin;

fn ask(cell: &CellKey, limit: u64, elapsed_ms: u64, want: u64) -> RightsAsk {
    RightsAsk {
        cell: cell.clone(),
        limit,
        elapsed_ms,
        sliding: true,
        want,
    }
}

#[test]
fn the_rights_keys_share_the_counters_slot_and_are_no_cell_key() {
    let key = cell("1:a", 60_000, 7);
    let (hash, taken) = rights_keys("rl:", &key, 7);
    assert!(hash.ends_with(":60000:rights"), "{hash}");
    assert!(taken.ends_with(":60000:rights:7"), "{taken}");
    let slot = redis::cluster_routing::Slot::for_key;
    let cell_key = crate::key::redis_key("rl:", &key);
    assert_eq!(slot(&hash), slot(&cell_key));
    assert_eq!(slot(&taken), slot(&cell_key));
}

#[tokio::test]
async fn processes_take_no_more_than_the_limit_and_get_back_what_is_given_back() {
    let a = local_redis().await;
    let b = another_process(&a, &["redis://127.0.0.1:6379".into()]);
    let key = cell("1:take", 600_000, 1);
    let fixed = |want| RightsAsk {
        sliding: false,
        ..ask(&key, 10, 1_000, want)
    };
    assert_eq!(a.take_rights(&fixed(6)).await.ok(), Some(6));
    assert_eq!(b.take_rights(&fixed(6)).await.ok(), Some(4));
    assert_eq!(b.take_rights(&fixed(1)).await.ok(), Some(0));
    let back = [RightsReturn {
        cell: key.clone(),
        count: 3,
    }];
    assert!(a.give_back_rights(&back).await.is_ok());
    assert_eq!(b.take_rights(&fixed(5)).await.ok(), Some(3));
}

#[tokio::test]
async fn the_previous_cells_takes_weigh_and_a_weighed_cell_is_closed() {
    let origin = local_redis().await;
    let first = cell("1:slide", 1_000, 1);
    assert_eq!(
        origin.take_rights(&ask(&first, 100, 900, 60)).await.ok(),
        Some(60)
    );
    // a quarter into the next cell, 45 of the 60 still weigh
    let second = cell("1:slide", 1_000, 2);
    assert_eq!(
        origin.take_rights(&ask(&second, 100, 250, 100)).await.ok(),
        Some(55)
    );
    // the first cell's takes are in that room: no more of them
    assert_eq!(
        origin.take_rights(&ask(&first, 100, 999, 1)).await.ok(),
        Some(0)
    );
    // later in the cell the weight has decayed: 30 more by three quarters in
    assert_eq!(
        origin.take_rights(&ask(&second, 100, 750, 100)).await.ok(),
        Some(30)
    );
}

/// After a failover the new master may lack the last takes: it counts the counter's cells as
/// fully taken (here the takes had replicated, and it still refuses: it cannot know).
#[tokio::test]
async fn after_a_failover_a_counters_cells_count_as_fully_taken() {
    let set = SentinelSet::start_or_fail("rights", None, None);
    let origin = RedisOrigin::connect(sentinel_settings(&set, None)).expect("valid settings");
    let window = 600_000;
    let key = cell("1:failover", window, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    // While the replica is still syncing no take is acknowledged: none is spendable (each
    // stays counted on the master).
    let mut unacknowledged = 0;
    loop {
        match origin.take_rights(&ask(&key, 1_000, 0, 4)).await {
            Ok(4) => break,
            Ok(granted) => {
                assert_eq!(granted, 0, "all or nothing");
                unacknowledged += 4;
            }
            Err(error) => assert!(Instant::now() < deadline, "{error}"),
        }
        assert!(Instant::now() < deadline, "no take was ever acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // the replica holds the take: a take is spent only once one does
    let (_, taken) = rights_keys(&origin.key_prefix, &key, 1);
    let replica = set.nodes[1].port;
    let held = set.node_cli(replica, &["GET", &taken]).unwrap_or_default();
    assert_eq!(held.trim(), (unacknowledged + 4).to_string());
    set.failover().unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        if let Ok(granted) = origin.take_rights(&ask(&key, 1_000, 0, 4)).await
            && origin.epoch() > 0
        {
            break granted;
        }
        assert!(Instant::now() < deadline, "the origin never moved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        after, 0,
        "the new master refuses the cell its takes may be missing from"
    );
    // the next cell weighs the whole limit, decaying: half of it by half the window
    let next = cell("1:failover", window, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match origin.take_rights(&ask(&next, 1_000, window / 2, 10)).await {
            Ok(10) => break,
            Ok(0) => {} // the new master's replica (the old master) not in sync yet
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "no take was ever acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rest = origin
        .take_rights(&ask(&next, 1_000, window / 2, 1_000))
        .await;
    assert!(rest.as_ref().is_ok_and(|&rest| rest <= 490), "{rest:?}");
}
