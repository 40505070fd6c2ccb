use super::*;
use gcounter_engine::global::{ChangeMark, DEFAULT_SYNC_OVERLAP};

fn key() -> CellKey {
    CellKey {
        scope: gcounter_engine::cell_key::Scope::new("w", "n"),
        identifier: "i".into(),
        duration_ms: 1_000,
        sequence: 5,
    }
}

#[tokio::test]
async fn a_write_is_seen_only_after_both_lags() {
    let store = LaggedStore::new(100, 50, DEFAULT_SYNC_OVERLAP);
    let report = store
        .publish("a", &[(key(), PnCount::hits(7))], 5_000)
        .await;
    assert_eq!(report.map(|r| r.published()).ok(), Some(1));
    let foreign_at = |now_ms: u64| {
        let read = store.sync(SyncQuery::full("b", now_ms));
        async move {
            read.await
                .ok()
                .map(|read| read.cells("b").first().map_or(0, |c| c.foreign.value()))
        }
    };
    assert_eq!(foreign_at(5_149).await, Some(0));
    assert_eq!(foreign_at(5_150).await, Some(7));
    assert_eq!(
        store.load(),
        Load {
            upsert_statements: 1,
            rows_written: 1,
            sync_statements: 2,
            rows_read: 1,
        }
    );
}

#[tokio::test]
async fn an_incremental_read_is_marked_at_what_it_sees_less_the_overlap() {
    // Longer than the read's lag and the write's, so that a read within it is later than the
    // first one.
    let overlap = 2_000;
    let store = LaggedStore::new(100, 50, Duration::from_millis(overlap));
    let publish = |hits: u64, at: u64| {
        let store = &store;
        async move {
            let rows = [(key(), PnCount::hits(hits))];
            assert!(store.publish("a", &rows, at).await.is_ok());
        }
    };
    let read = |at: u64, since: Option<ChangeMark>| {
        let store = &store;
        async move {
            match store.sync(SyncQuery::since("b", at, since)).await {
                Ok(read) => (read.rows.len(), read.next),
                Err(e) => panic!("{e}"),
            }
        }
    };
    publish(7, 1_000).await;
    // Visible at 1,100 (stamped then), seen from 1,150; the read sees the store at 1,950.
    let (rows, mark) = read(2_000, None).await;
    assert_eq!((rows, mark), (1, Some(ChangeMark(1_950 - overlap as i64))));
    // Read again while the mark is within the overlap of its stamp; not once it is past.
    let (rows, mark) = read(1_150 + overlap, mark).await;
    assert_eq!((rows, mark), (1, Some(ChangeMark(1_100))));
    let (rows, mark) = read(1_250 + overlap, mark).await;
    assert_eq!((rows, mark), (1, Some(ChangeMark(1_200))));
    assert_eq!(read(1_350 + overlap, mark).await.0, 0);
    assert_eq!(store.load().rows_read, 3);
}
