//! The store's semantics, checked on every implementation: the in-memory one and the SQL one on
//! the real SQLite, MariaDB and PostgreSQL of this machine.
//!
//! Every SQL test gets its own database (MariaDB), schema (PostgreSQL) or in-memory database
//! (SQLite), so tests run in parallel processes without seeing each other's rows. An
//! unreachable MariaDB or PostgreSQL fails the test and says how to start it.
//! `GCOUNTER_TEST_MYSQL_URL` / `GCOUNTER_TEST_POSTGRES_URL` point the tests elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sea_orm::{
    ActiveModelTrait, ActiveValue, ColumnTrait, ConnectOptions, ConnectionTrait, Database,
    DatabaseConnection, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, Statement, Value,
};

use super::*;
use gcounter_engine::cell_key::CellKey;
use gcounter_engine::global::*;
use gcounter_engine::pn::PnCount;
use migration::TABLE;

mod incremental;
mod rights;
use incremental::{
    a_late_commit_is_read_within_the_overlap_and_by_a_full_sync_after,
    an_incremental_sync_reads_a_cells_changed_rows_not_all_of_them,
    an_incremental_sync_reads_only_cells_changed_since_its_mark,
    rows_from_before_change_stamps_are_read_as_changed,
};
use rights::{
    concurrent_takes_grant_the_limit_exactly, rights_are_taken_by_the_rule_and_given_back,
};

const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Databases/schemas the tests create start with this; leftovers of crashed runs older than
/// an hour are dropped by later runs.
const PREFIX: &str = "gcrls_test_";

/// splitmix64: fixed seeds, reproducible sequences, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Memory,
    Sqlite,
    MySql,
    Postgres,
}

/// One test's store, and how to remove its database or schema afterwards.
struct Fixture {
    memory: Option<MemoryStore>,
    sql: Option<SqlStore>,
    admin: Option<(DatabaseConnection, String)>,
    /// The URL of this test's own database, for a second connection.
    url: String,
}

fn unique_name() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{PREFIX}{secs}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether a leftover test database/schema is over an hour old (its name holds its birth).
fn stale(name: &str) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split('_').next())
        .and_then(|secs| secs.parse::<u64>().ok())
        .is_some_and(|born| born + 3_600 < now)
}

/// `url` with its database (the path) replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, ""), |(b, q)| (b, q));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{}/{database}{query}", &base[..path_start])
}

async fn admin_connection(kind: Kind) -> (DatabaseConnection, String) {
    let (var, default, what, how) = match kind {
        Kind::MySql => (
            "GCOUNTER_TEST_MYSQL_URL",
            MYSQL_URL,
            "MariaDB",
            "start it with `bash .ci/services.sh` \
             (or `start-stop-daemon --start --background --exec /usr/sbin/mariadbd`)",
        ),
        _ => (
            "GCOUNTER_TEST_POSTGRES_URL",
            POSTGRES_URL,
            "PostgreSQL",
            "start it with `bash .ci/services.sh` \
             (or `pg_ctlcluster --skip-systemctl-redirect 15 main start`)",
        ),
    };
    let url = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    let mut options = ConnectOptions::new(url.clone());
    options
        .max_connections(1)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    match Database::connect(options).await {
        Ok(db) => (db, url),
        Err(e) => panic!(
            "{what} is not reachable at {url} ({e}): {how}; or set {var} to another server. \
             These tests need a real {what} and never skip."
        ),
    }
}

async fn exec(db: &DatabaseConnection, sql: &str) {
    if let Err(e) = db.execute_unprepared(sql).await {
        panic!("{sql}: {e}");
    }
}

async fn drop_stale(db: &DatabaseConnection, kind: Kind) {
    let list = match kind {
        Kind::MySql => "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA",
        _ => "SELECT nspname FROM pg_namespace",
    };
    let rows = db
        .query_all_raw(Statement::from_string(db.get_database_backend(), list))
        .await
        .unwrap_or_default();
    for row in rows {
        let Ok(name) = row.try_get_by_index::<String>(0) else {
            continue;
        };
        if stale(&name) {
            let sql = match kind {
                Kind::MySql => format!("DROP DATABASE IF EXISTS `{name}`"),
                _ => format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"),
            };
            // Another run may be dropping it too.
            let _ = db.execute_unprepared(&sql).await;
        }
    }
}

impl Fixture {
    async fn new(kind: Kind) -> Self {
        Self::with_settings(kind, SqlSettings::default()).await
    }

    async fn with_settings(kind: Kind, settings: SqlSettings) -> Self {
        let fixture = Self::unmigrated(kind, settings).await;
        if let Some(sql) = &fixture.sql
            && let Err(e) = sql.migrate().await
        {
            panic!("migrate: {e}");
        }
        fixture
    }

    async fn unmigrated(kind: Kind, settings: SqlSettings) -> Self {
        let (url, admin) = match kind {
            Kind::Memory => {
                return Self {
                    memory: Some(MemoryStore::new()),
                    sql: None,
                    admin: None,
                    url: String::new(),
                };
            }
            Kind::Sqlite => ("sqlite::memory:".to_owned(), None),
            Kind::MySql => {
                let (db, admin_url) = admin_connection(kind).await;
                drop_stale(&db, kind).await;
                let name = unique_name();
                exec(&db, &format!("CREATE DATABASE `{name}`")).await;
                let url = with_database(&admin_url, &name);
                (url, Some((db, format!("DROP DATABASE IF EXISTS `{name}`"))))
            }
            Kind::Postgres => {
                let (db, admin_url) = admin_connection(kind).await;
                drop_stale(&db, kind).await;
                let name = unique_name();
                exec(&db, &format!("CREATE SCHEMA \"{name}\"")).await;
                let sep = if admin_url.contains('?') { '&' } else { '?' };
                let url = format!("{admin_url}{sep}options[search_path]={name}");
                (
                    url,
                    Some((db, format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))),
                )
            }
        };
        let sql = match SqlStore::connect_with(&url, settings).await {
            Ok(sql) => sql,
            Err(e) => panic!("connect {url}: {e}"),
        };
        Self {
            memory: None,
            sql: Some(sql),
            admin,
            url,
        }
    }

    fn store(&self) -> &dyn GlobalStore {
        match (&self.memory, &self.sql) {
            (Some(memory), _) => memory,
            (_, Some(sql)) => sql,
            _ => unreachable!("a fixture holds a store"),
        }
    }

    fn sql(&self) -> &SqlStore {
        match &self.sql {
            Some(sql) => sql,
            None => unreachable!("a SQL fixture"),
        }
    }

    /// Drops the test's database or schema (left behind when a test fails, for a look).
    async fn finish(mut self) {
        self.sql.take();
        if let Some((db, drop)) = self.admin.take() {
            exec(&db, &drop).await;
        }
    }
}

/// Publish hits only (most tests; the PN-counter tests use [`publish_pn`]).
async fn publish(
    store: &dyn GlobalStore,
    region: &str,
    rows: &[(CellKey, u64)],
    now_ms: u64,
) -> PublishReport {
    publish_pn(store, region, &hits_only(rows), now_ms).await
}

fn hits_only(rows: &[(CellKey, u64)]) -> Vec<(CellKey, PnCount)> {
    rows.iter()
        .map(|(key, hits)| (key.clone(), PnCount::hits(*hits)))
        .collect()
}

async fn publish_pn(
    store: &dyn GlobalStore,
    region: &str,
    rows: &[(CellKey, PnCount)],
    now_ms: u64,
) -> PublishReport {
    match store.publish(region, rows, now_ms).await {
        Ok(report) => {
            if let Some(e) = report.errors().next() {
                panic!("{} publish: {e}", store.name());
            }
            report
        }
        Err(e) => panic!("{} publish: {e}", store.name()),
    }
}

/// Sync as `region`, as a map from key to (foreign, own) hits.
async fn sync(store: &dyn GlobalStore, region: &str, now_ms: u64) -> BTreeMap<CellKey, (u64, u64)> {
    sync_pn(store, region, now_ms)
        .await
        .into_iter()
        .map(|(key, (foreign, own))| (key, (foreign.hits, own.hits)))
        .collect()
}

/// Sync as `region`, as a map from key to (foreign, own), both halves.
async fn sync_pn(
    store: &dyn GlobalStore,
    region: &str,
    now_ms: u64,
) -> BTreeMap<CellKey, (PnCount, PnCount)> {
    match store.sync(SyncQuery::full(region, now_ms)).await {
        Ok(read) => {
            let mut seen = std::collections::BTreeSet::new();
            for row in &read.rows {
                let component = (&row.key, &*row.region);
                assert!(
                    seen.insert(component),
                    "one row per component: {component:?}"
                );
            }
            read.cells(region)
                .into_iter()
                .map(|c| (c.key, (c.foreign, c.own)))
                .collect()
        }
        Err(e) => panic!("{} sync: {e}", store.name()),
    }
}

async fn cleanup(store: &dyn GlobalStore, now_ms: u64, batch: u64) -> u64 {
    match store.cleanup(now_ms, batch).await {
        Ok(n) => n,
        Err(e) => panic!("{} cleanup: {e}", store.name()),
    }
}

const MINUTE: u64 = 60_000;

// ---- semantics shared by every store ------------------------------------------------------

async fn publish_then_sync_sees_foreign_sums(store: &dyn GlobalStore) {
    let (a, b) = (
        CellKey::new("w", "1:k/", "1:a", MINUTE, 7),
        CellKey::new("w", "1:k/", "1:b", MINUTE, 7),
    );
    let report = publish(store, "eu", &[(a.clone(), 5), (b.clone(), 7)], 1).await;
    assert_eq!(
        (report.published(), report.skipped(), report.failed()),
        (2, 0, 0)
    );
    assert_eq!(report.chunks.len(), 1);
    publish(store, "us", &[(a.clone(), 3)], 1).await;

    let ap = sync(store, "ap", 0).await;
    assert_eq!(
        ap,
        BTreeMap::from([(a.clone(), (8, 0)), (b.clone(), (7, 0))])
    );
    let eu = sync(store, "eu", 0).await;
    assert_eq!(eu, BTreeMap::from([(a.clone(), (3, 5))]), "b is eu's alone");
    let us = sync(store, "us", 0).await;
    assert_eq!(us, BTreeMap::from([(a, (5, 3)), (b, (7, 0))]));
}

async fn lower_or_equal_counts_change_nothing(store: &dyn GlobalStore) {
    let k = CellKey::new("w", "1:k/", "1:a", MINUTE, 7);
    publish(store, "eu", &[(k.clone(), 10)], 1).await;
    for lower in [10, 4, 0] {
        let report = publish(store, "eu", &[(k.clone(), lower)], 2).await;
        assert_eq!(report.outcomes, vec![RowOutcome::Published]);
        assert_eq!(sync(store, "us", 0).await[&k], (10, 0));
        assert_eq!(sync(store, "ap", 0).await[&k], (10, 0));
    }
    publish(store, "eu", &[(k.clone(), 11)], 3).await;
    assert_eq!(sync(store, "us", 0).await[&k], (11, 0));
}

async fn own_and_foreign_stay_separate(store: &dyn GlobalStore) {
    let k = CellKey::new("w", "1:k/", "1:a", MINUTE, 7);
    let only_own = CellKey::new("w", "1:k/", "1:z", MINUTE, 7);
    publish(store, "eu", &[(k.clone(), 100), (only_own.clone(), 9)], 1).await;
    publish(store, "us", &[(k.clone(), 20)], 1).await;
    publish(store, "ap", &[(k.clone(), 3)], 1).await;
    let eu = sync(store, "eu", 0).await;
    // eu's 100 is never in eu's foreign sum: it is only `own`.
    assert_eq!(eu[&k], (23, 100));
    assert!(!eu.contains_key(&only_own), "a cell only eu wrote: {eu:?}");
    for (region, own) in [("eu", 100), ("us", 20), ("ap", 3)] {
        let (foreign, got_own) = sync(store, region, 0).await[&k];
        assert_eq!(got_own, own);
        assert_eq!(
            foreign + got_own,
            123,
            "{region}: foreign + own is the total, once"
        );
    }
    // A region with no row sees everyone as foreign.
    assert_eq!(sync(store, "sa", 0).await[&k], (123, 0));
}

/// Sync returns only cells another region wrote: a region reading back its own rows would read
/// every row it published on every sync (ACCURACY.md). A foreign row at count 0 is a foreign
/// row; expired cells are left out as before.
async fn sync_returns_only_cells_another_region_wrote(store: &dyn GlobalStore) {
    let cell = |id: &str, sequence: u64| CellKey::new("w", "1:k/", id, 1_000, sequence);
    let (mine, shared, zero, theirs) = (cell("m", 9), cell("s", 9), cell("z", 9), cell("t", 9));
    // `stale` has rows of both, in a window whose rows expire at 5000 (sequence 3).
    let stale = cell("x", 3);
    let own_rows: Vec<_> = (0..50u64)
        .map(|i| (cell(&format!("o{i}"), 9), i + 1))
        .chain([
            (mine.clone(), 5),
            (shared.clone(), 6),
            (zero.clone(), 7),
            (stale.clone(), 8),
        ])
        .collect();
    publish(store, "eu", &own_rows, 1).await;
    publish(
        store,
        "us",
        &[(shared.clone(), 2), (zero.clone(), 0), (theirs.clone(), 4)],
        1,
    )
    .await;
    publish(store, "ap", &[(shared.clone(), 1), (stale.clone(), 3)], 1).await;
    assert_eq!(
        sync(store, "eu", 0).await,
        BTreeMap::from([
            (shared.clone(), (3, 6)),
            (stale.clone(), (3, 8)),
            (theirs.clone(), (4, 0)),
            (zero.clone(), (0, 7)),
        ]),
        "eu's 51 cells of its own are not read back"
    );
    // At 5000 `stale`'s rows have expired; the others live until 11000.
    let later = sync(store, "eu", 5_000).await;
    assert_eq!(later.len(), 3);
    assert!(!later.contains_key(&stale));
    let us = sync(store, "us", 0).await;
    assert_eq!(us.len(), 50 + 4, "us sees eu's cells: {}", us.len());
    assert_eq!(us[&mine], (5, 0));
    assert_eq!(us[&shared], (7, 2));
    assert!(!us.contains_key(&theirs));

    // What a restarted process reads back once instead: its own live rows, and only those.
    let own = |rows: Vec<SyncedRow>| -> BTreeMap<CellKey, (u64, u64)> {
        rows.into_iter()
            .map(|row| (row.key, (0, row.count.hits)))
            .collect()
    };
    let eu_own = match store.own_rows("eu", 0).await {
        Ok(cells) => own(cells),
        Err(e) => panic!("{} own_rows: {e}", store.name()),
    };
    let expected: BTreeMap<_, _> = own_rows.iter().map(|(k, n)| (k.clone(), (0, *n))).collect();
    assert_eq!(eu_own, expected);
    match store.own_rows("us", 5_000).await {
        Ok(cells) => assert_eq!(
            own(cells),
            BTreeMap::from([(shared, (0, 2)), (zero, (0, 0)), (theirs, (0, 4))])
        ),
        Err(e) => panic!("{} own_rows: {e}", store.name()),
    }
    assert!(matches!(
        store.own_rows("", 0).await,
        Err(StoreError::InvalidRegion(_))
    ));
}

async fn expired_rows_are_excluded_and_cleaned_up(store: &dyn GlobalStore) {
    let d = 1_000;
    // expires_at = (sequence + 2) × 1000: sequences 0..=3 expire by now = 5000 (3 exactly at it).
    let mut rows = Vec::new();
    for i in 0..25u64 {
        rows.push((CellKey::new("w", "1:k/", &format!("e{i}"), d, i % 4), 1));
    }
    for i in 0..5u64 {
        rows.push((CellKey::new("w", "1:k/", &format!("l{i}"), d, 4 + i % 2), 1));
    }
    publish(store, "eu", &rows, 1).await;
    let now = 5_000;
    let live = sync(store, "us", now).await;
    assert_eq!(live.len(), 5);
    assert!(live.keys().all(|k| k.identifier.starts_with('l')));
    assert_eq!(
        sync(store, "us", 0).await.len(),
        30,
        "nothing expired at time 0"
    );

    assert_eq!(cleanup(store, now, 10).await, 25);
    assert_eq!(cleanup(store, now, 10).await, 0);
    let left = sync(store, "us", 0).await;
    assert_eq!(left.len(), 5);
    assert!(left.keys().all(|k| k.identifier.starts_with('l')));
    assert_eq!(
        cleanup(store, u64::MAX, 2).await,
        5,
        "batches smaller than the rows"
    );
}

async fn too_long_strings_are_skipped_and_counted(store: &dyn GlobalStore) {
    let long = |n: usize| "x".repeat(n);
    // At the limits exactly, in multi-byte characters: limits are bytes.
    let at_limit = CellKey::new(
        &format!("{}x", "é".repeat(127)),
        &"é".repeat(512),
        &format!("{}x", "€".repeat(341)),
        MINUTE,
        1,
    );
    assert_eq!(at_limit.workspace().len(), WORKSPACE_ID_MAX_BYTES as usize);
    assert_eq!(at_limit.namespace().len(), NAMESPACE_MAX_BYTES as usize);
    assert_eq!(at_limit.identifier.len(), IDENTIFIER_MAX_BYTES as usize);
    let mut full = at_limit.clone();
    full.scope = gcounter_engine::cell_key::Scope::new(
        long(WORKSPACE_ID_MAX_BYTES as usize),
        Arc::clone(at_limit.namespace()),
    );
    full.identifier = long(IDENTIFIER_MAX_BYTES as usize).into();
    let ok = CellKey::new("w", "1:k/", "1:a", MINUTE, 1);
    let rows = vec![
        (ok.clone(), 1),
        (
            CellKey::new(
                &long(WORKSPACE_ID_MAX_BYTES as usize + 1),
                "n",
                "i",
                MINUTE,
                1,
            ),
            1,
        ),
        (
            CellKey::new("w", &long(NAMESPACE_MAX_BYTES as usize + 1), "i", MINUTE, 1),
            1,
        ),
        (
            CellKey::new(
                "w",
                "n",
                &long(IDENTIFIER_MAX_BYTES as usize + 1),
                MINUTE,
                1,
            ),
            1,
        ),
        (CellKey::new("w", "n", "i", u64::MAX, 1), 1),
        (CellKey::new("w", "n", "i", MINUTE, u64::MAX), 1),
        (at_limit.clone(), 2),
        (full.clone(), 3),
    ];
    let report = publish(store, "eu", &rows, 1).await;
    use RowOutcome::{Published as P, Skipped as S};
    assert_eq!(report.outcomes, vec![P, S, S, S, S, S, P, P]);
    assert_eq!(
        (report.published(), report.skipped(), report.failed()),
        (3, 5, 0)
    );
    let seen = sync(store, "us", 0).await;
    assert_eq!(
        seen,
        BTreeMap::from([(ok, (1, 0)), (at_limit, (2, 0)), (full, (3, 0))])
    );
}

async fn keys_compare_as_bytes(store: &dyn GlobalStore) {
    // A case-insensitive or PAD SPACE collation would merge these; they are different counters.
    let ids = ["a", "A", "a ", "e\u{301}", "\u{e9}", "ß", "ss"];
    let rows: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| (CellKey::new("w", "1:k/", id, MINUTE, 1), n as u64 + 1))
        .collect();
    publish(store, "eu", &rows, 1).await;
    let mut workspaces = vec![
        (CellKey::new("W", "1:k/", "a", MINUTE, 1), 50),
        (CellKey::new("W ", "1:k/", "a", MINUTE, 1), 60),
    ];
    workspaces.push((CellKey::new("w", "1:K/", "a", MINUTE, 1), 70));
    publish(store, "eu", &workspaces, 1).await;
    let seen = sync(store, "us", 0).await;
    let expected: BTreeMap<_, _> = rows
        .into_iter()
        .chain(workspaces)
        .map(|(k, n)| (k, (n, 0)))
        .collect();
    assert_eq!(seen, expected);
    // A region differing only in case is another region too.
    publish(
        store,
        "EU",
        &[(CellKey::new("w", "1:k/", "a", MINUTE, 1), 100)],
        1,
    )
    .await;
    assert_eq!(
        sync(store, "eu", 0).await[&CellKey::new("w", "1:k/", "a", MINUTE, 1)],
        (100, 1)
    );
}

async fn duplicates_in_one_publish_merge_with_max(store: &dyn GlobalStore) {
    let k = CellKey::new("w", "1:k/", "1:a", MINUTE, 1);
    let other = CellKey::new("w", "1:k/", "1:b", MINUTE, 1);
    let rows = [
        (k.clone(), 3),
        (other.clone(), 1),
        (k.clone(), 9),
        (k.clone(), 5),
    ];
    let report = publish(store, "eu", &rows, 1).await;
    assert_eq!(report.outcomes, vec![RowOutcome::Published; 4]);
    assert_eq!(
        report
            .chunks
            .iter()
            .map(|c| *c.as_ref().unwrap_or(&0))
            .sum::<usize>(),
        2
    );
    assert_eq!(
        sync(store, "us", 0).await,
        BTreeMap::from([(k, (9, 0)), (other, (1, 0))])
    );
}

/// Refunds are the second half of a region's component: each half keeps its max, refunds
/// count at most up to the component's hits, and sync sums both halves across regions.
async fn refunds_merge_per_half_capped_at_hits(store: &dyn GlobalStore) {
    let k = CellKey::new("w", "1:k/", "1:r", MINUTE, 4);
    let pn = PnCount::new;
    publish_pn(store, "eu", &[(k.clone(), pn(10, 4))], 1).await;
    publish_pn(store, "us", &[(k.clone(), pn(6, 6))], 1).await;
    assert_eq!(sync_pn(store, "eu", 0).await[&k], (pn(6, 6), pn(10, 4)));
    // An older refund or hit changes nothing; a newer refund alone moves only refunds.
    publish_pn(store, "eu", &[(k.clone(), pn(9, 1))], 2).await;
    assert_eq!(sync_pn(store, "us", 0).await[&k], (pn(10, 4), pn(6, 6)));
    publish_pn(store, "eu", &[(k.clone(), pn(10, 7))], 3).await;
    assert_eq!(sync_pn(store, "us", 0).await[&k], (pn(10, 7), pn(6, 6)));
    // Refunds beyond the component's hits are stored capped.
    publish_pn(store, "ap", &[(k.clone(), pn(2, 50))], 4).await;
    assert_eq!(sync_pn(store, "eu", 0).await[&k], (pn(8, 8), pn(10, 7)));
    assert_eq!(sync_pn(store, "eu", 0).await[&k].0.value(), 0);
    // Duplicates in one publish merge per half.
    let twice = [(k.clone(), pn(12, 2)), (k.clone(), pn(11, 9))];
    publish_pn(store, "eu", &twice, 5).await;
    assert_eq!(sync_pn(store, "us", 0).await[&k].0, pn(12 + 2, 9 + 2));
}

async fn invalid_regions_are_refused(store: &dyn GlobalStore) {
    let rows = [(CellKey::new("w", "n", "i", MINUTE, 1), PnCount::hits(1))];
    let long = "r".repeat(REGION_MAX_BYTES as usize + 1);
    for region in ["", long.as_str()] {
        assert!(matches!(
            store.publish(region, &rows, 1).await,
            Err(StoreError::InvalidRegion(_))
        ));
        assert!(matches!(
            store.sync(SyncQuery::full(region, 1)).await,
            Err(StoreError::InvalidRegion(_))
        ));
    }
    let longest = "r".repeat(REGION_MAX_BYTES as usize);
    publish_pn(store, &longest, &rows, 1).await;
    publish_pn(store, "eu", &rows, 1).await;
    let key = &rows[0].0;
    assert_eq!(sync(store, &longest, 0).await[key], (1, 1));
    assert_eq!(sync(store, "eu", 0).await[key], (1, 1));
}

async fn empty_publish_writes_nothing(store: &dyn GlobalStore) {
    let report = publish(store, "eu", &[], 1).await;
    assert!(report.outcomes.is_empty() && report.chunks.is_empty());
    assert!(sync(store, "eu", 0).await.is_empty());
    assert_eq!(cleanup(store, u64::MAX, 100).await, 0);
}

/// The state seen through sync: per (viewing region, cell without workspace), (foreign, own),
/// both halves of the PN-counter.
type Snapshot = BTreeMap<(String, String, String, u64, u64), (PnCount, PnCount)>;

async fn snapshot(store: &dyn GlobalStore, workspace: &str, regions: &[&str]) -> Snapshot {
    let mut out = Snapshot::new();
    for region in regions {
        for (k, v) in sync_pn(store, region, 0).await {
            if **k.workspace() == *workspace {
                let cell = (
                    k.namespace().to_string(),
                    k.identifier.to_string(),
                    k.duration_ms,
                    k.sequence,
                );
                out.insert((region.to_string(), cell.0, cell.1, cell.2, cell.3), v);
            }
        }
    }
    out
}

/// Components (cell index, region index) → (hits, refunds); a publish per region of a state.
type State = BTreeMap<(usize, usize), PnCount>;

fn merge(a: &State, b: &State) -> State {
    let mut out = a.clone();
    for (k, v) in b {
        let e = out.entry(*k).or_default();
        *e = e.merge(*v);
    }
    out
}

async fn publish_state(
    store: &dyn GlobalStore,
    workspace: &str,
    cells: &[(String, String, u64, u64)],
    regions: &[&str],
    state: &State,
) {
    for (r, region) in regions.iter().enumerate() {
        let rows: Vec<_> = state
            .iter()
            .filter(|((_, rr), _)| *rr == r)
            .map(|((c, _), v)| {
                let (ns, id, d, s) = &cells[*c];
                (CellKey::new(workspace, ns, id, *d, *s), *v)
            })
            .collect();
        publish_pn(store, region, &rows, 1).await;
    }
}

/// What sync must show for a state: per viewing region, the others' sum and its own.
fn expected(state: &State, cells: &[(String, String, u64, u64)], regions: &[&str]) -> Snapshot {
    let mut out = Snapshot::new();
    for (view, region) in regions.iter().enumerate() {
        for (c, (ns, id, d, s)) in cells.iter().enumerate() {
            // Only cells another region wrote (a row at count 0 is a row).
            if !state.keys().any(|(cc, rr)| *cc == c && *rr != view) {
                continue;
            }
            let own = state.get(&(c, view)).copied().unwrap_or_default();
            let foreign = (0..regions.len())
                .filter(|r| *r != view)
                .map(|r| state.get(&(c, r)).copied().unwrap_or_default())
                .fold(PnCount::default(), PnCount::plus);
            out.insert(
                (region.to_string(), ns.clone(), id.clone(), *d, *s),
                (foreign, own),
            );
        }
    }
    out
}

/// G-Counter laws through the store, for both halves of the PN-counter (hits and refunds), on
/// a fixed-seed random sequence of publishes: merge is monotonic, idempotent, commutative and
/// associative, and own/foreign never double count.
async fn gcounter_laws(store: &dyn GlobalStore) {
    let regions = ["r0", "r1", "r2", "r3"];
    let cells: Vec<(String, String, u64, u64)> = (0..10)
        .map(|i| {
            (
                format!("1:k{}/", i % 3),
                format!("1:{i}"),
                MINUTE * (1 + i % 2),
                5 + i % 2,
            )
        })
        .collect();
    let mut rng = Rng(0x5eed_c0de);
    // Each op: one region publishes some of its components (values may go down: max wins).
    let ops: Vec<State> = (0..30)
        .map(|_| {
            let region = rng.below(regions.len() as u64) as usize;
            (0..1 + rng.below(4))
                .map(|_| {
                    let cell = rng.below(cells.len() as u64) as usize;
                    let hits = rng.below(1_000);
                    // As the engine publishes them: a component's refunds ≤ its hits.
                    let refunds = rng.below(hits + 1);
                    ((cell, region), PnCount::new(hits, refunds))
                })
                .collect()
        })
        .collect();

    // In order, checking every step against the model.
    let mut model = State::new();
    let mut previous = Snapshot::new();
    for op in &ops {
        publish_state(store, "ordered", &cells, &regions, op).await;
        model = merge(&model, op);
        let now = snapshot(store, "ordered", &regions).await;
        assert_eq!(
            now,
            expected(&model, &cells, &regions),
            "the store is the max-merge of all publishes; foreign + own count each component once"
        );
        for (k, (foreign, own)) in &previous {
            let (f, o) = now[k];
            assert!(
                f.hits >= foreign.hits
                    && o.hits >= own.hits
                    && f.refunds >= foreign.refunds
                    && o.refunds >= own.refunds,
                "monotonic: {k:?} went from {:?} to {:?}",
                (foreign, own),
                (f, o)
            );
        }
        // Idempotent: the same publish again changes nothing.
        publish_state(store, "ordered", &cells, &regions, op).await;
        assert_eq!(
            snapshot(store, "ordered", &regions).await,
            now,
            "idempotent"
        );
        previous = now;
    }

    // Commutative: any order gives the same state.
    let mut shuffled: Vec<&State> = ops.iter().collect();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for op in shuffled.iter().rev() {
        publish_state(store, "shuffled", &cells, &regions, op).await;
    }
    assert_eq!(
        snapshot(store, "shuffled", &regions).await,
        previous,
        "commutative"
    );

    // Associative: (A ⊔ B) ⊔ C = A ⊔ (B ⊔ C), with A, B, C the thirds of the sequence.
    let fold = |ops: &[State]| ops.iter().fold(State::new(), |acc, op| merge(&acc, op));
    let (a, b, c) = (fold(&ops[..10]), fold(&ops[10..20]), fold(&ops[20..]));
    publish_state(store, "left", &cells, &regions, &merge(&a, &b)).await;
    publish_state(store, "left", &cells, &regions, &c).await;
    publish_state(store, "right", &cells, &regions, &a).await;
    publish_state(store, "right", &cells, &regions, &merge(&b, &c)).await;
    let left = snapshot(store, "left", &regions).await;
    assert_eq!(
        left,
        snapshot(store, "right", &regions).await,
        "associative"
    );
    assert_eq!(left, previous, "grouping changes nothing");
}

/// One `#[tokio::test]` per store test, in the module of one kind of store that invokes it:
/// a `shared` test takes the store (from a fixture: every kind runs it), an `sql` test takes
/// the kind and runs where the module says `sql: yes` (the SQL stores). The database
/// servers' modules add what needs concurrent connections, which in-memory SQLite (one
/// connection) cannot give.
macro_rules! store_tests {
    ($kind:ident, sql: $sql:ident) => {
        store_tests!(@each $kind $sql:
            shared publish_then_sync_sees_foreign_sums,
            shared lower_or_equal_counts_change_nothing,
            shared own_and_foreign_stay_separate,
            shared sync_returns_only_cells_another_region_wrote,
            shared expired_rows_are_excluded_and_cleaned_up,
            shared too_long_strings_are_skipped_and_counted,
            shared keys_compare_as_bytes,
            shared duplicates_in_one_publish_merge_with_max,
            shared refunds_merge_per_half_capped_at_hits,
            shared invalid_regions_are_refused,
            shared empty_publish_writes_nothing,
            shared gcounter_laws,
            shared rights_are_taken_by_the_rule_and_given_back,
            sql rows_from_before_refunds_keep_working,
            sql concurrent_takes_grant_the_limit_exactly,
            sql migration_is_idempotent_and_creates_the_indexes,
            sql stored_columns_follow_the_design,
            sql cleanup_deletes_in_bounded_batches,
            sql chunks_stay_below_the_placeholder_limit,
            sql the_database_clock_is_this_hosts,
            sql an_incremental_sync_reads_only_cells_changed_since_its_mark,
            sql an_incremental_sync_reads_a_cells_changed_rows_not_all_of_them,
            sql a_late_commit_is_read_within_the_overlap_and_by_a_full_sync_after,
            sql rows_from_before_change_stamps_are_read_as_changed,
        );
    };
    (@each $kind:ident $sql:ident: $($how:ident $name:ident),* $(,)?) => {
        $(store_tests!(@one $how $sql $kind $name);)*
    };
    (@one shared $sql:ident $kind:ident $name:ident) => {
        #[tokio::test]
        async fn $name() {
            let fixture = super::Fixture::new(super::Kind::$kind).await;
            super::$name(fixture.store()).await;
            fixture.finish().await;
        }
    };
    (@one sql yes $kind:ident $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$name(super::Kind::$kind).await;
        }
    };
    (@one sql no $kind:ident $name:ident) => {};
}

mod memory {
    use super::*;

    store_tests!(Memory, sql: no);

    #[tokio::test]
    async fn chunks_and_injected_failures() {
        let store = MemoryStore::with_chunk_rows(2);
        let rows: Vec<_> = (0..5)
            .map(|i| {
                (
                    CellKey::new("w", "n", &i.to_string(), MINUTE, 1),
                    PnCount::hits(1),
                )
            })
            .collect();
        store.fail_next_chunks(1);
        let report = match store.publish("eu", &rows, 1).await {
            Ok(report) => report,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(report.chunks.len(), 3);
        assert!(report.chunks[0].is_err() && report.chunks[1].is_ok() && report.chunks[2].is_ok());
        // Rows are sorted: "0" and "1" were in the failed chunk.
        use RowOutcome::{Failed as F, Published as P};
        assert_eq!(report.outcomes, vec![F, F, P, P, P]);
        assert_eq!(store.rows().len(), 3);

        store.set_failing(true);
        assert!(store.sync(SyncQuery::full("eu", 0)).await.is_err());
        assert!(store.cleanup(0, 1).await.is_err());
        let report = match store.publish("eu", &rows, 1).await {
            Ok(report) => report,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(report.failed(), 5);
        store.set_failing(false);
        assert_eq!(store.rows()[0].updated_at, 1);
        assert_eq!(store.rows()[0].expires_at, 3 * MINUTE);
    }
}

// ---- SQL only -----------------------------------------------------------------------------

/// The indexes as the catalog shows them: name → (unique, columns in order).
async fn indexes(sql: &SqlStore) -> BTreeMap<String, (bool, Vec<String>)> {
    let db = sql.connection();
    let backend = db.get_database_backend();
    let query = match backend {
        DbBackend::MySql => format!(
            "SELECT INDEX_NAME, NON_UNIQUE = 0, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{TABLE}' \
             ORDER BY INDEX_NAME, SEQ_IN_INDEX"
        ),
        DbBackend::Postgres => format!(
            "SELECT i.relname, x.indisunique, a.attname FROM pg_index x \
             JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord) ON true \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE t.relname = '{TABLE}' AND n.nspname = current_schema() ORDER BY i.relname, k.ord"
        ),
        _ => format!(
            "SELECT l.name, l.\"unique\", i.name FROM pragma_index_list('{TABLE}') l \
             JOIN pragma_index_info(l.name) i ORDER BY l.name, i.seqno"
        ),
    };
    let rows = match db
        .query_all_raw(Statement::from_string(backend, query))
        .await
    {
        Ok(rows) => rows,
        Err(e) => panic!("catalog: {e}"),
    };
    let mut out: BTreeMap<String, (bool, Vec<String>)> = BTreeMap::new();
    for row in rows {
        let name: String = row.try_get_by_index(0).unwrap_or_default();
        let unique = row
            .try_get_by_index::<bool>(1)
            .or_else(|_| row.try_get_by_index::<i64>(1).map(|n| n != 0))
            .unwrap_or(false);
        let column: String = row.try_get_by_index(2).unwrap_or_default();
        let entry = out.entry(name).or_insert((unique, Vec::new()));
        entry.1.push(column);
    }
    out
}

fn row_model(identifier: &str) -> entity::ActiveModel {
    use ActiveValue::{NotSet, Set};
    entity::ActiveModel {
        pk: NotSet,
        workspace_id: Set(b"w".to_vec()),
        namespace: Set(b"n".to_vec()),
        identifier: Set(identifier.as_bytes().to_vec()),
        duration_ms: Set(1_000),
        sequence: Set(1),
        region: Set(b"eu".to_vec()),
        count: Set(1),
        expires_at: Set(3_000),
        updated_at: Set(0),
        refunds: Set(0),
        changed_at: NotSet,
    }
}

async fn migration_is_idempotent_and_creates_the_indexes(kind: Kind) {
    let first = Fixture::unmigrated(kind, SqlSettings::default()).await;
    // Two processes migrating the same empty database at once, then again.
    let second = match kind {
        Kind::Sqlite => None,
        _ => match SqlStore::connect(&first.url).await {
            Ok(s) => Some(s),
            Err(e) => panic!("{e}"),
        },
    };
    let (a, b) = tokio::join!(first.sql().migrate(), async {
        match &second {
            Some(s) => s.migrate().await,
            None => first.sql().migrate().await,
        }
    });
    if let Err(e) = a.and(b) {
        panic!("concurrent migrate: {e}");
    }
    if let Err(e) = first.sql().migrate().await {
        panic!("migrate again: {e}");
    }
    drop(second);

    let found = indexes(first.sql()).await;
    let unique: Vec<String> = crate::dialect::CELL_KEY_COLUMNS
        .iter()
        .chain(&["region"])
        .map(|s| s.to_string())
        .collect();
    let lookup: Vec<String> = crate::dialect::CELL_KEY_COLUMNS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(
        found.values().any(|v| *v == (true, unique.clone())),
        "a unique index on {unique:?}: {found:?}"
    );
    assert_eq!(
        found.get(migration::LOOKUP_INDEX),
        Some(&(false, lookup)),
        "{found:?}"
    );
    assert_eq!(
        found.get(migration::EXPIRES_AT_INDEX),
        Some(&(false, vec!["expires_at".to_string()])),
        "{found:?}"
    );
    if kind != Kind::Sqlite {
        // SQLite names an inline UNIQUE constraint's index itself.
        assert!(found.contains_key(migration::UNIQUE_INDEX), "{found:?}");
    }

    // The unique key holds: a second row with the same key and region is refused.
    let db = first.sql().connection();
    if let Err(e) = row_model("dup").insert(db).await {
        panic!("insert: {e}");
    }
    assert!(row_model("dup").insert(db).await.is_err());
    assert!(row_model("other").insert(db).await.is_ok());
    first.finish().await;
}

async fn stored_columns_follow_the_design(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    let store = fixture.store();
    let k = CellKey::new("w", "1:k/", "1:a", MINUTE, 100);
    publish(store, "eu", &[(k.clone(), u64::MAX)], 1_000).await;
    publish(store, "eu", &[(k.clone(), 1)], 2_000).await;
    publish(store, "eu", &[(k.clone(), 1)], 1_500).await;
    let rows = match entity::Entity::find().all(fixture.sql().connection()).await {
        Ok(rows) => rows,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (
            &row.workspace_id[..],
            &row.namespace[..],
            &row.identifier[..],
            &row.region[..]
        ),
        (&b"w"[..], &b"1:k/"[..], &b"1:a"[..], &b"eu"[..])
    );
    assert_eq!((row.duration_ms, row.sequence), (MINUTE as i64, 100));
    assert_eq!(row.count, i64::MAX, "u64 counts saturate at BIGINT's max");
    assert_eq!(
        row.expires_at,
        102 * MINUTE as i64,
        "(sequence + 2) × duration"
    );
    assert_eq!(row.updated_at, 2_000, "the latest write's time");
    assert_eq!(sync(store, "us", 0).await[&k], (i64::MAX as u64, 0));
    fixture.finish().await;
}

async fn cleanup_deletes_in_bounded_batches(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    let rows: Vec<_> = (0..25)
        .map(|i| (CellKey::new("w", "n", &i.to_string(), 1_000, 0), 1))
        .collect();
    publish(fixture.store(), "eu", &rows, 1).await;
    publish(
        fixture.store(),
        "eu",
        &[(CellKey::new("w", "n", "live", 1_000, 9), 1)],
        1,
    )
    .await;
    let sql = fixture.sql();
    let mut per_statement = Vec::new();
    for _ in 0..4 {
        match sql.delete_expired_batch(2_000, 10).await {
            Ok(n) => per_statement.push(n),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(per_statement, vec![10, 10, 5, 0]);
    let left = entity::Entity::find()
        .filter(entity::Column::ExpiresAt.gt(2_000))
        .count(sql.connection())
        .await;
    assert!(matches!(left, Ok(1)), "{left:?}");
    fixture.finish().await;
}

/// The database's clock as the clock offset gauge reads it: on this host, the process's own
/// (SQLite) or the server's beside it, so within a second of this process's clock; in
/// microseconds since the epoch, not seconds or milliseconds.
async fn the_database_clock_is_this_hosts(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    let before = std::time::SystemTime::now();
    let clock = fixture.sql().clock_us().await;
    let after = std::time::SystemTime::now();
    let us = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    let Ok(Some(database_us)) = clock else {
        panic!("{kind:?}: no clock read: {clock:?}");
    };
    assert!(
        us(before).saturating_sub(1_000_000) <= database_us && database_us <= us(after) + 1_000_000,
        "{kind:?}: database clock {database_us} µs, this process's {}..{} µs",
        us(before),
        us(after)
    );
    fixture.finish().await;
}

async fn chunks_stay_below_the_placeholder_limit(kind: Kind) {
    // No chunk limit asked: the store clamps to the backend's placeholder limit.
    let settings = SqlSettings {
        chunk_rows: usize::MAX,
        ..SqlSettings::default()
    };
    let fixture = Fixture::with_settings(kind, settings).await;
    let chunk_rows = fixture.sql().chunk_rows();
    let expected = if kind == Kind::Sqlite {
        32_766 / PARAMS_PER_ROW
    } else {
        65_535 / PARAMS_PER_ROW
    };
    assert_eq!(chunk_rows, expected);
    // 8,000 rows are 80,000 placeholders: over every backend's limit in one statement.
    let rows: Vec<_> = (0..8_000u64)
        .map(|i| {
            (
                CellKey::new("w", "1:k/", &format!("{i:05}"), MINUTE, 1),
                i + 1,
            )
        })
        .collect();
    let report = publish(fixture.store(), "eu", &rows, 1).await;
    assert_eq!(report.chunks.len(), 8_000_usize.div_ceil(chunk_rows));
    assert_eq!(report.published(), 8_000);
    let seen = sync(fixture.store(), "us", 0).await;
    assert_eq!(seen.len(), 8_000);
    assert!(rows.iter().all(|(k, n)| seen[k] == (*n, 0)));
    fixture.finish().await;
}

async fn concurrent_publishers_do_not_deadlock(kind: Kind) {
    let fixture = Fixture::new(kind).await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        match SqlStore::connect_with(
            &fixture.url,
            SqlSettings {
                chunk_rows: 250,
                ..SqlSettings::default()
            },
        )
        .await
        {
            Ok(s) => stores.push(Arc::new(s)),
            Err(e) => panic!("{e}"),
        }
    }
    // The same rows from every task, half of them in reverse input order, same region, ten
    // rounds each: every statement contends for the others' row locks.
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(t, store)| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let mut errors = Vec::new();
                for round in 0..10u64 {
                    let mut rows: Vec<_> = (0..1_000u64)
                        .map(|i| {
                            (
                                CellKey::new("w", "n", &format!("{i:04}"), MINUTE, 1),
                                i * 40 + round * 4 + t as u64,
                            )
                        })
                        .collect();
                    if t % 2 == 1 {
                        rows.reverse();
                    }
                    match store.publish("eu", &hits_only(&rows), 1).await {
                        Ok(report) => errors.extend(report.errors().map(|e| e.to_string())),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                errors
            })
        })
        .collect();
    for task in tasks {
        match task.await {
            Ok(errors) => assert!(errors.is_empty(), "{errors:?}"),
            Err(e) => panic!("{e}"),
        }
    }
    let seen = sync(fixture.store(), "us", 0).await;
    assert_eq!(seen.len(), 1_000);
    assert!(
        (0..1_000u64).all(
            |i| seen[&CellKey::new("w", "n", &format!("{i:04}"), MINUTE, 1)] == (i * 40 + 39, 0)
        )
    );
    fixture.finish().await;
}

/// A database made before refunds existed (the first migration only, rows written without the
/// column) is upgraded in place: its rows keep their counts as hits with no refunds, and an
/// older binary that writes no `refunds` keeps working beside a newer one.
async fn rows_from_before_refunds_keep_working(kind: Kind) {
    let fixture = Fixture::unmigrated(kind, SqlSettings::default()).await;
    let sql = fixture.sql();
    let db = sql.connection();
    if let Err(e) = migration::Migrator::up(db, Some(1)).await {
        panic!("first migration: {e}");
    }
    let dialect = crate::dialect::Dialect(db.get_database_backend());
    let q = |c: &str| match dialect.0 {
        DbBackend::MySql => format!("`{c}`"),
        _ => format!("\"{c}\""),
    };
    // A binary column's literal in each dialect.
    let bytes = |text: &str| {
        let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
        match dialect.0 {
            DbBackend::Postgres => format!("'\\x{hex}'::bytea"),
            _ => format!("X'{hex}'"),
        }
    };
    // What an older binary writes: no `refunds` column.
    let old_insert = |region: &str, count: u64| {
        format!(
            "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}, {}, {}) VALUES \
             ({}, {}, {}, {MINUTE}, 7, {}, {count}, {}, 1)",
            q(TABLE),
            q("workspace_id"),
            q("namespace"),
            q("identifier"),
            q("duration_ms"),
            q("sequence"),
            q("region"),
            q("count"),
            q("expires_at"),
            q("updated_at"),
            bytes("w"),
            bytes("1:k/"),
            bytes("1:o"),
            bytes(region),
            9 * MINUTE,
        )
    };
    exec(db, &old_insert("us", 5)).await;
    if let Err(e) = sql.migrate().await {
        panic!("upgrade: {e}");
    }
    let k = CellKey::new("w", "1:k/", "1:o", MINUTE, 7);
    assert_eq!(
        sync_pn(sql, "eu", 0).await[&k],
        (PnCount::hits(5), PnCount::default())
    );
    // The old binary goes on writing beside the new one: its row's refunds stay 0.
    exec(db, &old_insert("ap", 2)).await;
    publish_pn(sql, "eu", &[(k.clone(), PnCount::new(4, 3))], 2).await;
    assert_eq!(
        sync_pn(sql, "us", 0).await[&k],
        (PnCount::new(6, 3), PnCount::hits(5))
    );
    fixture.finish().await;
}

mod sqlite {
    use super::*;

    store_tests!(Sqlite, sql: yes);

    #[tokio::test]
    async fn a_file_database_keeps_its_rows() {
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => panic!("{e}"),
        };
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("counts.db").display()
        );
        let k = CellKey::new("w", "n", "i", MINUTE, 1);
        {
            let store = match SqlStore::connect(&url).await {
                Ok(s) => s,
                Err(e) => panic!("{e}"),
            };
            if let Err(e) = store.migrate().await {
                panic!("{e}");
            }
            publish(&store, "eu", &[(k.clone(), 4)], 1).await;
        }
        let store = match SqlStore::connect(&url).await {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        if let Err(e) = store.migrate().await {
            panic!("{e}");
        }
        assert_eq!(sync(&store, "us", 0).await[&k], (4, 0));
    }
}

mod mysql {
    use super::*;

    store_tests!(MySql, sql: yes);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_publishers_do_not_deadlock() {
        super::concurrent_publishers_do_not_deadlock(Kind::MySql).await;
    }

    #[tokio::test]
    async fn string_columns_are_binary() {
        let fixture = Fixture::new(Kind::MySql).await;
        let db = fixture.sql().connection();
        let rows = db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::MySql,
                "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND DATA_TYPE = 'varbinary' \
                 ORDER BY ORDINAL_POSITION",
                [Value::from(TABLE)],
            ))
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => panic!("{e}"),
        };
        let columns: Vec<(String, u64)> = rows
            .iter()
            .map(|r| {
                let length = r.try_get_by_index::<u64>(2);
                let length =
                    length.or_else(|_| r.try_get_by_index::<i64>(2).map(i64::unsigned_abs));
                (
                    r.try_get_by_index(0).unwrap_or_default(),
                    length.unwrap_or_default(),
                )
            })
            .collect();
        let limits = [
            ("workspace_id", WORKSPACE_ID_MAX_BYTES),
            ("namespace", NAMESPACE_MAX_BYTES),
            ("identifier", IDENTIFIER_MAX_BYTES),
            ("region", REGION_MAX_BYTES),
        ];
        let expected: Vec<(String, u64)> = limits
            .iter()
            .map(|(c, n)| (c.to_string(), u64::from(*n)))
            .collect();
        assert_eq!(columns, expected);
        fixture.finish().await;
    }
}

mod postgres {
    store_tests!(Postgres, sql: yes);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_publishers_do_not_deadlock() {
        super::concurrent_publishers_do_not_deadlock(super::Kind::Postgres).await;
    }
}

/// A database down at start is not an error until it is used (`serve` must start and decide
/// locally): the pool connects lazily, and each call fails cleanly,
/// bounded by the connect timeout, until the database answers.
#[tokio::test]
async fn unreachable_or_unknown_databases_fail_cleanly() {
    let settings = SqlSettings {
        connect_timeout: Duration::from_millis(500),
        ..SqlSettings::default()
    };
    for url in [
        "mysql://root@127.0.0.1:1/test",
        "mariadb://root@127.0.0.1:1/test",
        "postgres://postgres@127.0.0.1:1/test",
    ] {
        let store = match SqlStore::connect_with(url, settings.clone()).await {
            Ok(store) => store,
            Err(error) => panic!("{url}: a database down at start must not fail: {error}"),
        };
        let started = std::time::Instant::now();
        let sync = store.sync(SyncQuery::full("a", 0)).await;
        assert!(
            matches!(
                sync,
                Err(StoreError::Connection(_) | StoreError::Timeout(_))
            ),
            "{url}: {:?}",
            sync.err()
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{url}: bounded");
    }
    let result = SqlStore::connect_with("sqlite:///nonexistent-dir/counts.db", settings).await;
    assert!(
        matches!(result, Err(StoreError::Connection(_))),
        "{:?}",
        result.err()
    );
    assert!(matches!(
        SqlStore::connect("redis://127.0.0.1/").await,
        Err(StoreError::UnsupportedUrl(s)) if s == "redis"
    ));
    // The same check without connecting, for a server validating its settings.
    assert!(matches!(
        crate::check_url("redis://u:s3cret@127.0.0.1/"),
        Err(StoreError::UnsupportedUrl(s)) if s == "redis"
    ));
    for url in [
        "mysql://h/db",
        "MariaDB://h/db",
        "postgresql://h/db",
        "sqlite::memory:",
    ] {
        assert!(crate::check_url(url).is_ok(), "{url}");
    }
}

/// A URL that does not parse is quoted whole by sqlx; the error must not carry its password
/// (errors are logged).
#[tokio::test]
async fn a_url_that_does_not_parse_keeps_its_password_secret() {
    for url in [
        "mysql://root:s3cret@127.0.0.1:99999/x",
        "postgres://u:s3cret@[::1/x",
    ] {
        let error = match SqlStore::connect(url).await {
            Ok(_) => panic!("{url} must not parse"),
            Err(error) => error.to_string(),
        };
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("***@"), "{error}");
    }
}

#[test]
fn urls_get_the_test_database() {
    assert_eq!(
        with_database("mysql://root@h:3306/test", "x"),
        "mysql://root@h:3306/x"
    );
    assert_eq!(
        with_database("mysql://root@h:3306", "x"),
        "mysql://root@h:3306/x"
    );
    assert_eq!(
        with_database("mysql://u:p@h/test?ssl-mode=disabled", "x"),
        "mysql://u:p@h/x?ssl-mode=disabled"
    );
}
