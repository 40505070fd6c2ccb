use super::*;

fn key() -> CellKey {
    CellKey {
        workspace: "w".into(),
        namespace: "n".into(),
        identifier: "i".into(),
        duration_ms: 1_000,
        sequence: 5,
    }
}

#[tokio::test]
async fn a_write_is_seen_only_after_both_lags() {
    let store = LaggedStore::new(100, 50);
    let report = store
        .publish("a", &[(key(), PnCount::hits(7))], 5_000)
        .await;
    assert_eq!(report.map(|r| r.published()).ok(), Some(1));
    let foreign = |cells: Vec<SyncedCell>| cells.first().map_or(0, |c| c.foreign.value());
    assert_eq!(store.sync("b", 5_149).await.map(foreign).ok(), Some(0));
    assert_eq!(store.sync("b", 5_150).await.map(foreign).ok(), Some(7));
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
