//! The store on a SQL database through sea-orm: MySQL/MariaDB, PostgreSQL or SQLite.
//!
//! The three statements that matter are hand-written per backend (the `dialect` module: placeholders,
//! quoting, `GREATEST` vs `MAX`, `DELETE … LIMIT` vs a sub-select differ); this module runs
//! them (timeouts, retries, chunks, decoding); sea-orm provides the pool, binding, decoding and
//! the migrations.
//!
//! `dialect` holds the upsert, the sync (rows of cells with a foreign row only), a process's
//! own rows and the bounded delete; `examples/sync_rows.rs` shows what one sync reads on a real
//! database; `tests` runs the one store contract against `MemoryStore`, SQLite, MariaDB and
//! PostgreSQL.

use std::future::Future;
use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, QueryResult,
    RuntimeErr, Statement,
};

use decode::{Interner, decode_synced};
use dialect::{Dialect, PARAMS_PER_ROW};
use gcounter_engine::aside;
use gcounter_engine::global::{
    ChangeMark, Chunk, DEFAULT_CHUNK_ROWS, DEFAULT_SYNC_OVERLAP, GlobalStore, StoreError,
    StoreFuture, SyncQuery, SyncRead, SyncedRow, check_region,
};
use gcounter_engine::redact::{redact_in, redact_url};
use gcounter_engine::regional::{RightsAsk, RightsReturn};
use overlap::{ReadOverlap, UpsertTimer};

mod decode;
mod dialect;
pub mod entity;
mod overlap;
mod rights;
#[cfg(test)]
mod tests;

// The engine's key limits are this table's columns.
const _: () = assert!(
    gcounter_engine::global::WORKSPACE_ID_MAX_BYTES == migration::WORKSPACE_ID_MAX_BYTES
        && gcounter_engine::global::NAMESPACE_MAX_BYTES == migration::NAMESPACE_MAX_BYTES
        && gcounter_engine::global::IDENTIFIER_MAX_BYTES == migration::IDENTIFIER_MAX_BYTES
        && gcounter_engine::global::REGION_MAX_BYTES == migration::REGION_MAX_BYTES
);

/// Placeholders per statement: MySQL and PostgreSQL count them in 16 bits; SQLite allows
/// 32,766 since 3.32 and 999 before.
const MAX_PARAMS_MYSQL_POSTGRES: usize = 65_535;
const MAX_PARAMS_SQLITE: usize = 32_766;
const MAX_PARAMS_OLD_SQLITE: usize = 999;

/// Retries of a chunk or cleanup batch that lost a deadlock (or SQLite's busy lock).
const DEADLOCK_RETRIES: u32 = 2;

/// Rows a sync decodes between two yields to the runtime (the engine's walks take 256
/// cells per slice too): a decision waits for at most this many rows' decode.
const DECODE_SLICE: usize = 256;

/// Retries of a migration that raced another process's migration.
const MIGRATE_RETRIES: u32 = 3;

#[derive(Debug, Clone)]
pub struct SqlSettings {
    /// Pool size for MySQL and PostgreSQL; SQLite always uses one connection (one writer).
    pub max_connections: u32,
    /// Bounds connecting and waiting for a pooled connection.
    pub connect_timeout: Duration,
    /// Bounds each statement (client side; PostgreSQL also gets it as `statement_timeout`).
    pub statement_timeout: Duration,
    /// Rows per upsert statement, lowered to the backend's placeholder limit. A row is at
    /// most ~2.4 KB, so the default 1,000 stays below MySQL 5.7's 4 MiB `max_allowed_packet`.
    pub chunk_rows: usize,
    /// How far before the database's clock at a sync the next incremental sync starts: the
    /// longest an upsert may take to commit after its statement began and still be read
    /// without a full sync (see `gcounter_engine::global`, "Incremental sync"). At least
    /// this; twice this store's slowest upsert of the last minute or two when that is more.
    pub sync_overlap: Duration,
}

impl Default for SqlSettings {
    fn default() -> Self {
        Self {
            max_connections: 4,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            chunk_rows: DEFAULT_CHUNK_ROWS,
            sync_overlap: DEFAULT_SYNC_OVERLAP,
        }
    }
}

/// The `ratelimit_window_counts` table on MySQL/MariaDB, PostgreSQL or SQLite.
pub struct SqlStore {
    db: DatabaseConnection,
    backend: DbBackend,
    statement_timeout: Duration,
    chunk_rows: usize,
    /// [`SqlSettings::sync_overlap`], widened while this store's upserts are slow.
    overlap: ReadOverlap,
}

/// Checks that `url` names a database this store can use (its scheme), without connecting:
/// what a server validates among its settings before it starts anything.
pub fn check_url(url: &str) -> Result<(), StoreError> {
    backend_of(url).map(|_| ())
}

/// The backend a URL's scheme names, and the URL sqlx takes for it.
fn backend_of(url: &str) -> Result<(DbBackend, String), StoreError> {
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    match scheme.to_ascii_lowercase().as_str() {
        "mysql" => Ok((DbBackend::MySql, url.to_owned())),
        // sqlx speaks MariaDB under the mysql scheme.
        "mariadb" => Ok((DbBackend::MySql, format!("mysql:{rest}"))),
        "postgres" | "postgresql" => Ok((DbBackend::Postgres, url.to_owned())),
        "sqlite" => Ok((DbBackend::Sqlite, url.to_owned())),
        _ => Err(StoreError::UnsupportedUrl(redact_url(scheme))),
    }
}

impl SqlStore {
    /// Connect with [`SqlSettings::default`]. URLs: `mysql://` (or `mariadb://`),
    /// `postgres://` (or `postgresql://`), `sqlite:` (e.g. `sqlite::memory:`,
    /// `sqlite:///var/lib/rls/counts.db?mode=rwc`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, SqlSettings::default()).await
    }

    pub async fn connect_with(url: &str, settings: SqlSettings) -> Result<Self, StoreError> {
        let (backend, url) = backend_of(url)?;
        let mut options = ConnectOptions::new(url.clone());
        // The database may be down at start: the pool connects on first use, and every flush
        // and sync retries, so the service starts and decides locally meanwhile.
        options.connect_lazy(!matches!(backend, DbBackend::Sqlite));
        options
            .connect_timeout(settings.connect_timeout)
            .acquire_timeout(settings.connect_timeout)
            // One INFO line per statement otherwise; slow or failing calls surface as errors.
            .sqlx_logging(false);
        match backend {
            DbBackend::Sqlite => {
                options.max_connections(1);
                if url.contains(":memory:") || url.contains("mode=memory") {
                    // An in-memory database lives as long as its one connection.
                    options
                        .min_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None);
                }
            }
            DbBackend::Postgres => {
                options
                    .max_connections(settings.max_connections.max(1))
                    .statement_timeout(settings.statement_timeout);
            }
            _ => {
                options.max_connections(settings.max_connections.max(1));
            }
        }
        // The pool's own timeouts bound this; the outer one covers DNS and TLS stalls too.
        let limit = settings.connect_timeout.saturating_mul(2);
        let db = match tokio::time::timeout(limit, Database::connect(options)).await {
            Ok(Ok(db)) => db,
            // sqlx quotes a URL it cannot parse whole, password included.
            Ok(Err(e)) => return Err(StoreError::Connection(redact_in(&e.to_string(), &url))),
            Err(_) => return Err(StoreError::Timeout(limit)),
        };
        let mut store = Self {
            db,
            backend,
            statement_timeout: settings.statement_timeout,
            chunk_rows: 1,
            overlap: ReadOverlap::new(settings.sync_overlap),
        };
        let max_params = match backend {
            DbBackend::Sqlite => store.sqlite_max_params().await?,
            _ => MAX_PARAMS_MYSQL_POSTGRES,
        };
        store.chunk_rows = settings.chunk_rows.clamp(1, max_params / PARAMS_PER_ROW);
        Ok(store)
    }

    /// Create or update the schema (the `migration` crate). Safe to run again, and from
    /// several processes at once: a run that loses a race retries and finds the work done.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut attempt = 0;
        loop {
            match Migrator::up(&self.db, None).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < MIGRATE_RETRIES => {
                    tracing::debug!(error = %e, attempt, "migration failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(StoreError::Migration(e.to_string())),
            }
        }
    }

    /// The pool, for plain reads through [`entity`].
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Rows per upsert statement after the backend's placeholder limit.
    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    async fn sqlite_max_params(&self) -> Result<usize, StoreError> {
        let row = self
            .query_one(Statement::from_string(
                self.backend,
                "SELECT sqlite_version()",
            ))
            .await?;
        let version: String = match row {
            Some(row) => row.try_get_by_index(0).map_err(db_error)?,
            None => return Ok(MAX_PARAMS_OLD_SQLITE),
        };
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        Ok(if (major, minor) >= (3, 32) {
            MAX_PARAMS_SQLITE
        } else {
            MAX_PARAMS_OLD_SQLITE
        })
    }

    /// Run one statement under the statement timeout, retrying lost deadlocks.
    async fn run<T, F, Fut>(&self, mut call: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, DbErr>>,
    {
        let mut attempt = 0;
        loop {
            match tokio::time::timeout(self.statement_timeout, call()).await {
                Err(_) => return Err(StoreError::Timeout(self.statement_timeout)),
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if attempt < DEADLOCK_RETRIES && lost_a_lock(self.backend, &e) => {
                    attempt += 1;
                    // A short random pause so the two losers do not collide again.
                    let pause = 5 + fastrand::u64(0..20) * u64::from(attempt);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Ok(Err(e)) => return Err(db_error(e)),
            }
        }
    }

    /// The statements in this store's SQL dialect.
    fn dialect(&self) -> Dialect {
        Dialect(self.backend)
    }

    async fn query_one(&self, stmt: Statement) -> Result<Option<QueryResult>, StoreError> {
        self.run(|| self.db.query_one_raw(stmt.clone())).await
    }

    async fn clock_now(&self) -> Result<Option<u64>, StoreError> {
        let Some(row) = self.query_one(self.dialect().clock_us()).await? else {
            return Ok(None);
        };
        let us: i64 = row.try_get_by_index(0).map_err(db_error)?;
        Ok(u64::try_from(us).ok())
    }

    /// The overlap the next sync's mark takes, in ms (see `overlap`).
    #[cfg(test)]
    pub(crate) fn overlap_ms(&self) -> i64 {
        self.overlap.ms()
    }

    /// A sync, full or from `since`. The next mark is the database's clock at this read
    /// (its last column) less the overlap; a read that returned nothing has no clock, and
    /// the next one starts where this one did.
    async fn sync_now(&self, query: SyncQuery<'_>) -> Result<SyncRead, StoreError> {
        let SyncQuery {
            region,
            now_ms,
            since,
        } = query;
        check_region(region)?;
        let stmt = self.dialect().sync(region, now_ms, since.map(|m| m.0));
        let (rows, clock) = self.synced(stmt, true).await?;
        let next = match clock {
            Some(clock) => Some(ChangeMark(clock.saturating_sub(self.overlap.ms()))),
            None => since,
        };
        Ok(SyncRead { rows, next })
    }

    async fn own_rows_now(&self, region: &str, now_ms: u64) -> Result<Vec<SyncedRow>, StoreError> {
        check_region(region)?;
        let stmt = self.dialect().own_rows(region, now_ms);
        Ok(self.synced(stmt, false).await?.0)
    }

    /// Run a statement whose rows are rows as sync returns them, and decode them.
    ///
    /// A full sync reads up to a row per live row (millions): the decode yields to the runtime
    /// every [`DECODE_SLICE`] rows and drops each row once decoded, and the emptied buffer
    /// of rows is freed on the blocking pool, so that with one worker no decision waits for
    /// the whole read to be decoded or freed.
    /// With `clock`, the rows' last column is the database's clock, returned too.
    async fn synced(
        &self,
        stmt: Statement,
        clock: bool,
    ) -> Result<(Vec<SyncedRow>, Option<i64>), StoreError> {
        let rows = self.run(|| self.db.query_all_raw(stmt.clone())).await?;
        let clock = match rows.first() {
            Some(row) if clock => Some(row.try_get_by_index::<i64>(8).map_err(db_error)?),
            _ => None,
        };
        let mut interned = Interner::default();
        let mut synced = Vec::with_capacity(rows.len());
        let mut invalid = 0usize;
        let bytes = aside::buffer_bytes(&rows);
        let mut rows = rows.into_iter();
        for (decoded, row) in rows.by_ref().enumerate() {
            if decoded % DECODE_SLICE == DECODE_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            match decode_synced(&row, &mut interned) {
                Ok(Some(row)) => synced.push(row),
                Ok(None) => invalid += 1,
                Err(e) => return Err(db_error(e)),
            }
        }
        aside::drop_aside(rows, bytes);
        if invalid > 0 {
            // Rows this code never writes (not UTF-8, negative numbers): someone else's.
            tracing::warn!(
                invalid,
                "global sync ignored rows this service could not have written"
            );
        }
        Ok((synced, clock))
    }

    /// One bounded `DELETE` of expired rows; returns the rows deleted.
    pub(crate) async fn delete_expired_batch(
        &self,
        now_ms: u64,
        batch: u64,
    ) -> Result<u64, StoreError> {
        let stmt = self.dialect().delete_expired(now_ms, batch);
        let result = self.run(|| self.db.execute_raw(stmt.clone())).await?;
        Ok(result.rows_affected())
    }

    async fn cleanup_now(&self, now_ms: u64, batch: u64) -> Result<u64, StoreError> {
        let batch = batch.max(1);
        let mut deleted = 0u64;
        loop {
            let n = self.delete_expired_batch(now_ms, batch).await?;
            deleted += n;
            if n < batch {
                return Ok(deleted + self.cleanup_rights(now_ms, batch).await?);
            }
            // Let the flushers' statements in between batches.
            tokio::task::yield_now().await;
        }
    }
}

impl GlobalStore for SqlStore {
    fn migrate_schema(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.migrate())
    }

    fn name(&self) -> &'static str {
        match self.backend {
            DbBackend::MySql => "mysql",
            DbBackend::Postgres => "postgres",
            _ => "sqlite",
        }
    }

    fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    fn write_chunk<'a>(&'a self, chunk: Chunk<'a>) -> StoreFuture<'a, ()> {
        let stmt = self
            .dialect()
            .upsert(chunk.region, chunk.rows, chunk.now_ms);
        Box::pin(async move {
            self.run(|| async {
                // Timed on every attempt, a timed-out one too (the guard records on drop): a
                // statement still running may commit later with its early stamp.
                let _timed = UpsertTimer::start(&self.overlap);
                self.db.execute_raw(stmt.clone()).await
            })
            .await?;
            Ok(())
        })
    }

    fn sync<'a>(&'a self, query: SyncQuery<'a>) -> StoreFuture<'a, SyncRead> {
        Box::pin(self.sync_now(query))
    }

    fn own_rows<'a>(&'a self, region: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<SyncedRow>> {
        Box::pin(self.own_rows_now(region, now_ms))
    }

    fn cleanup<'a>(&'a self, now_ms: u64, batch: u64) -> StoreFuture<'a, u64> {
        Box::pin(self.cleanup_now(now_ms, batch))
    }

    fn clock_us(&self) -> StoreFuture<'_, Option<u64>> {
        Box::pin(self.clock_now())
    }

    fn take_rights<'a>(&'a self, ask: &'a RightsAsk) -> StoreFuture<'a, u64> {
        Box::pin(self.take_rights_now(ask))
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [RightsReturn]) -> StoreFuture<'a, ()> {
        Box::pin(self.give_back_rights_now(returns))
    }
}

fn sqlx_error(e: &DbErr) -> Option<&sea_orm::sqlx::Error> {
    match e {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => Some(e),
        _ => None,
    }
}

/// A deadlock victim, a serialization failure or SQLite's busy/locked: worth one more try.
fn lost_a_lock(backend: DbBackend, e: &DbErr) -> bool {
    let Some(sea_orm::sqlx::Error::Database(db)) = sqlx_error(e) else {
        return false;
    };
    let Some(code) = db.code() else {
        return false;
    };
    match backend {
        // SQLite's extended codes: the low byte is the primary code, 5 BUSY, 6 LOCKED.
        DbBackend::Sqlite => code.parse::<u32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6)),
        // SQLSTATE: MySQL's deadlock (1213) and PostgreSQL's serialization failure; PostgreSQL's
        // deadlock.
        _ => matches!(code.as_ref(), "40001" | "40P01"),
    }
}

fn db_error(e: DbErr) -> StoreError {
    use sea_orm::sqlx::Error as Sqlx;
    let unreachable = match &e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        _ => matches!(
            sqlx_error(&e),
            Some(
                Sqlx::Io(_)
                    | Sqlx::Tls(_)
                    | Sqlx::PoolTimedOut
                    | Sqlx::PoolClosed
                    | Sqlx::WorkerCrashed
            )
        ),
    };
    if unreachable {
        StoreError::Connection(e.to_string())
    } else {
        StoreError::Query(e.to_string())
    }
}
