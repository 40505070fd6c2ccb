//! Incremental syncs on the real databases: stamps on the database's clock, marks with their
//! overlap, late commits, and rows written before the `changed_at` column.

use sea_orm::sea_query::{Alias, Expr, Query};

use super::*;

fn key(identifier: &str) -> CellKey {
    CellKey::new("w", "1:k/", identifier, MINUTE, 7)
}

/// One sync as `region` from `since`: identifier → foreign hits, and the next mark.
async fn read(
    store: &dyn GlobalStore,
    region: &str,
    since: Option<ChangeMark>,
) -> (BTreeMap<String, u64>, Option<ChangeMark>) {
    match store.sync(SyncQuery::since(region, 0, since)).await {
        Ok(read) => (
            read.cells(region)
                .into_iter()
                .map(|c| (c.key.identifier.to_string(), c.foreign.hits))
                .collect(),
            read.next,
        ),
        Err(e) => panic!("{} sync: {e}", store.name()),
    }
}

fn cells(of: &[(&str, u64)]) -> BTreeMap<String, u64> {
    of.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// Sets a row's hits and stamp as a writer would whose statement took its stamp at
/// `changed_at` and committed only now.
async fn commit_stamped(fixture: &Fixture, identifier: &str, count: i64, changed_at: i64) {
    let updated = entity::Entity::update_many()
        .col_expr(entity::Column::Count, Expr::value(count))
        .col_expr(entity::Column::ChangedAt, Expr::value(changed_at))
        .filter(entity::Column::Identifier.eq(identifier.as_bytes().to_vec()))
        .exec(fixture.sql().connection())
        .await;
    match updated {
        Ok(result) => assert_eq!(result.rows_affected, 1),
        Err(e) => panic!("update: {e}"),
    }
}

/// Apart by more than the databases' clock resolution (1 ms).
async fn tick() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// A store whose overlap is 0 unless its own upserts widen it.
async fn without_overlap(kind: Kind) -> Fixture {
    let settings = SqlSettings {
        sync_overlap: Duration::ZERO,
        ..SqlSettings::default()
    };
    Fixture::with_settings(kind, settings).await
}

/// Until the rows written so far are older than the overlap the next read takes: 0 in these
/// tests, widened by the store to twice its slowest upsert, which a loaded machine makes
/// tens of milliseconds.
async fn past_the_overlap(fixture: &Fixture) {
    let overlap = u64::try_from(fixture.sql().overlap_ms()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(overlap + 20)).await;
}

pub(super) async fn an_incremental_sync_reads_only_cells_changed_since_its_mark(kind: Kind) {
    let fixture = without_overlap(kind).await;
    let store = fixture.store();
    publish(store, "us", &[(key("a"), 1), (key("b"), 2)], 1).await;
    past_the_overlap(&fixture).await;
    let (all, mark) = read(store, "eu", None).await;
    assert_eq!(all, cells(&[("a", 1), ("b", 2)]), "a full read");
    assert!(mark.is_some());
    tick().await;
    let (none, next) = read(store, "eu", mark).await;
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(next, mark, "a read that saw nothing keeps its mark");
    publish(store, "us", &[(key("a"), 5)], 2).await;
    // This region's own rows make no cell changed for it.
    publish(store, "eu", &[(key("b"), 9)], 2).await;
    let (changed, next) = read(store, "eu", mark).await;
    assert_eq!(changed, cells(&[("a", 5)]));
    assert!(next > mark, "{next:?} after {mark:?}");
    // The other region sees the cell it did not change in the meantime.
    assert_eq!(read(store, "us", mark).await.0, cells(&[("b", 9)]));
    fixture.finish().await;
}

pub(super) async fn a_late_commit_is_read_within_the_overlap_and_by_a_full_sync_after(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    let store = fixture.store();
    publish(store, "us", &[(key("a"), 1)], 1).await;
    let (_, mark) = read(store, "eu", None).await;
    let Some(ChangeMark(mark_ms)) = mark else {
        panic!("a read of rows has a mark");
    };
    // Stamped after the mark but before the read (within the overlap), committed after it.
    commit_stamped(&fixture, "a", 50, mark_ms + 1_000).await;
    let (late, next) = read(store, "eu", mark).await;
    assert_eq!(late, cells(&[("a", 50)]));
    // Stamped before the next read's mark: slower than the overlap allows.
    let Some(ChangeMark(next_ms)) = next else {
        panic!("a read of rows has a mark");
    };
    commit_stamped(&fixture, "a", 60, next_ms - 1).await;
    assert!(read(store, "eu", next).await.0.is_empty(), "missed");
    assert_eq!(read(store, "eu", None).await.0, cells(&[("a", 60)]));
    fixture.finish().await;
}

pub(super) async fn rows_from_before_change_stamps_are_read_as_changed(kind: Kind) {
    let fixture = Fixture::unmigrated(kind, SqlSettings::default()).await;
    let sql = fixture.sql();
    let db = sql.connection();
    if let Err(e) = migration::Migrator::up(db, Some(2)).await {
        panic!("the migrations before change stamps: {e}");
    }
    // What an older binary writes: no `changed_at`.
    let column = |c: &str| Alias::new(c);
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(TABLE))
        .columns(
            crate::dialect::CELL_KEY_COLUMNS
                .into_iter()
                .chain(["region", "count", "expires_at", "updated_at"])
                .map(column),
        )
        .values_panic([
            b"w".to_vec().into(),
            b"1:k/".to_vec().into(),
            b"old".to_vec().into(),
            (MINUTE as i64).into(),
            7i64.into(),
            b"us".to_vec().into(),
            5i64.into(),
            (9 * MINUTE as i64).into(),
            1i64.into(),
        ]);
    if let Err(e) = db.execute(&insert).await {
        panic!("old insert: {e}");
    }
    if let Err(e) = sql.migrate().await {
        panic!("upgrade: {e}");
    }
    let (all, mark) = read(sql, "eu", None).await;
    assert_eq!(all, cells(&[("old", 5)]), "the row is kept");
    assert_eq!(
        read(sql, "eu", mark).await.0,
        cells(&[("old", 5)]),
        "and counts as changed"
    );
    let indexes = indexes(sql).await;
    assert_eq!(
        indexes.get(migration::CHANGED_AT_INDEX),
        Some(&(false, vec!["changed_at".to_string()])),
        "{indexes:?}"
    );
    fixture.finish().await;
}

pub(super) async fn an_incremental_sync_reads_a_cells_changed_rows_not_all_of_them(kind: Kind) {
    let fixture = without_overlap(kind).await;
    let store = fixture.store();
    for (region, hits) in [("us", 1), ("ap", 2), ("eu", 4)] {
        publish(store, region, &[(key("a"), hits)], 1).await;
    }
    past_the_overlap(&fixture).await;
    let rows = |read: &SyncRead| -> Vec<(String, u64)> {
        let mut rows: Vec<_> = read
            .rows
            .iter()
            .map(|row| (row.region.to_string(), row.count.hits))
            .collect();
        rows.sort();
        rows
    };
    let full = match store.sync(SyncQuery::full("eu", 0)).await {
        Ok(read) => read,
        Err(e) => panic!("{} sync: {e}", store.name()),
    };
    assert_eq!(
        rows(&full),
        [("ap".into(), 2), ("eu".into(), 4), ("us".into(), 1)],
        "a full read: every row of the cell, this region's too"
    );
    tick().await;
    publish(store, "us", &[(key("a"), 5)], 2).await;
    publish(store, "eu", &[(key("a"), 9)], 2).await;
    match store.sync(SyncQuery::since("eu", 0, full.next)).await {
        Ok(read) => assert_eq!(
            rows(&read),
            [("eu".into(), 9), ("us".into(), 5)],
            "an incremental read: the changed foreign row and this region's row of its cell"
        ),
        Err(e) => panic!("{} sync: {e}", store.name()),
    }
    fixture.finish().await;
}
