//! The rights of `never_above` counters (`ratelimit_rights`): the rule on every store, and
//! many connections taking from one counter at once on the real databases.

use gcounter_engine::regional::{RightsAsk, RightsReturn};

use super::*;

fn ask(sequence: u64, elapsed_ms: u64, want: u64) -> RightsAsk {
    RightsAsk {
        cell: CellKey::new("w", "1:k/", "1:tokens", 1_000, sequence),
        limit: 100,
        elapsed_ms,
        sliding: true,
        want,
    }
}

async fn take(store: &dyn GlobalStore, ask: &RightsAsk) -> u64 {
    match store.take_rights(ask).await {
        Ok(granted) => granted,
        Err(e) => panic!("{} take: {e}", store.name()),
    }
}

/// Takes by the sliding rule on the cell's takes, a closed cell, give-backs of both cells.
pub(super) async fn rights_are_taken_by_the_rule_and_given_back(store: &dyn GlobalStore) {
    assert_eq!(take(store, &ask(5, 900, 60)).await, 60);
    assert_eq!(take(store, &ask(5, 950, 60)).await, 40);
    // a quarter into the next cell, 75 of the 100 still weigh
    assert_eq!(take(store, &ask(6, 250, 100)).await, 25);
    assert_eq!(
        take(store, &ask(5, 999, 1)).await,
        0,
        "the weighed cell is closed"
    );
    let back = |sequence, count| RightsReturn {
        cell: ask(sequence, 0, 0).cell,
        count,
    };
    // 20 unspent of the cell before: 15 less weigh a quarter in
    assert!(store.give_back_rights(&[back(5, 20)]).await.is_ok());
    assert_eq!(take(store, &ask(6, 250, 100)).await, 15);
    assert!(store.give_back_rights(&[back(6, 10)]).await.is_ok());
    assert_eq!(take(store, &ask(6, 250, 100)).await, 10);
    // another counter has its own row
    let other = RightsAsk {
        cell: CellKey::new("w", "1:k/", "1:other", 1_000, 6),
        ..ask(6, 250, 100)
    };
    assert_eq!(take(store, &other).await, 100);
}

/// Connections taking from one counter at once, each read-then-swap racing the others: the
/// grants sum to the limit, exactly; and the row expires with its cells.
pub(super) async fn concurrent_takes_grant_the_limit_exactly(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    // SQLite's test database lives in one connection's memory: the connections share a file.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = match kind {
        Kind::Sqlite => format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("rights.db").display()
        ),
        _ => fixture.url.clone(),
    };
    let mut stores = Vec::new();
    for _ in 0..4 {
        match SqlStore::connect(&url).await {
            Ok(store) => stores.push(Arc::new(store)),
            Err(e) => panic!("{e}"),
        }
    }
    if let Err(e) = stores[0].migrate().await {
        panic!("{e}");
    }
    let fixed = RightsAsk {
        sliding: false,
        ..ask(7, 0, 3)
    };
    let tasks: Vec<_> = stores
        .iter()
        .map(|store| {
            let (store, fixed) = (Arc::clone(store), fixed.clone());
            tokio::spawn(async move {
                let mut granted = 0;
                for _ in 0..60 {
                    match store.take_rights(&fixed).await {
                        Ok(n) => granted += n,
                        Err(e) => panic!("{e}"),
                    }
                }
                granted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        match task.await {
            Ok(granted) => total += granted,
            Err(e) => panic!("{e}"),
        }
    }
    // 4 × 60 asks of 3 is 720: more than the limit, which binds
    assert!(total <= 100, "{total} granted of a limit of 100");
    // a race lost eight times in a row gives up (refused, never over): rare, and the rest is
    // still there
    let store: &dyn GlobalStore = stores[0].as_ref();
    let rest = take(
        store,
        &RightsAsk {
            want: 100,
            ..fixed.clone()
        },
    )
    .await;
    assert_eq!(total + rest, 100, "{total} + {rest}");
    // two windows after its cell began, no take weighs the row: cleaned up
    assert_eq!(cleanup(store, 8_999, 10).await, 0);
    assert_eq!(cleanup(store, 9_000, 10).await, 1);
    fixture.finish().await;
}
