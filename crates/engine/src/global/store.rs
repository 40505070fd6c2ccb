//! Where the global layer keeps its G-Counters: one component per (cell, region), merged with
//! `max`, summed across regions.
//!
//! `gcounter_sql::SqlStore` is the real one (the `ratelimit_window_counts` table through
//! sea-orm, on MySQL/MariaDB, PostgreSQL or SQLite; schema in the `migration` crate).
//! [`MemoryStore`] has the same semantics in process, for tests of the engine side. Both go
//! through [`prepare_rows`], so they skip, sort, merge and chunk a publish identically.
//!
//! # Incremental sync
//!
//! Every write stamps its rows with the *store's* clock (`changed_at`: the database's clock in
//! the upsert, never the writer's, which may be skewed), and a sync may ask only for the
//! foreign rows stamped at or after a [`ChangeMark`] ([`GlobalStore::sync`]).
//! A write's stamp is taken before it commits, so a reader can miss a row committed after its
//! read with a stamp before it; each read therefore returns the next mark as the store's clock
//! when the read began minus an overlap ([`DEFAULT_SYNC_OVERLAP`]), and reads again what
//! changed in it (harmless: the merge is `max`). The invariant:
//!
//! > a row committed at most `overlap` after its stamp is returned by the first incremental
//! > read that began after it committed; any other row (a slower commit, a store clock that
//! > stepped back, a row a writer without stamps updated) by the next full read.
//!
//! A full read (no mark) happens at start and at least every `full_sync_interval`
//! (`GlobalSettings`), so those are seen within it; a row missed once is also read when it
//! changes again. A read returns rows, one region's component each, not a cell's sum: the
//! engine keeps the other regions' components to sum them (`Publication::merge_synced_rows`).

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use memory::{MemoryStore, StoredRow};

/// The longest key strings a store must hold (the columns of the `migration` crate; the SQL
/// store checks at compile time that they agree). A longer key is never written: its cell
/// stays local to the region ([`RowOutcome::Skipped`]).
pub const WORKSPACE_ID_MAX_BYTES: u32 = 255;
pub const NAMESPACE_MAX_BYTES: u32 = 1024;
pub const IDENTIFIER_MAX_BYTES: u32 = 1024;
pub const REGION_MAX_BYTES: u32 = 48;

use crate::cell_key::CellKey;
use crate::pn::PnCount;

/// Rows per upsert statement unless a store's settings say otherwise: big enough to amortize
/// the round trip, small enough that one statement holds its row locks briefly.
pub const DEFAULT_CHUNK_ROWS: usize = 1_000;

/// Boxed so the driver can hold any store as `Arc<dyn GlobalStore>`; store calls run a few
/// times a minute, so the allocation is free.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Why a store call (or one chunk of a publish) failed. The caller keeps what it had and
/// retries on its next tick.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Could not reach the database or get a pooled connection.
    #[error("global store unavailable: {0}")]
    Connection(String),
    /// The database answered with an error.
    #[error("global store query failed: {0}")]
    Query(String),
    #[error("global store timed out after {0:?}")]
    Timeout(Duration),
    #[error("global store migration failed: {0}")]
    Migration(String),
    /// The database URL is not one of mysql://, mariadb://, postgres(ql)://, sqlite:.
    #[error("unsupported global store URL scheme {0:?}")]
    UnsupportedUrl(String),
    #[error("invalid region {0:?}: it must be 1 to {REGION_MAX_BYTES} bytes")]
    InvalidRegion(String),
}

/// One row of the table as sync reads it: a region's component of a cell, both halves (hits,
/// refunds capped at hits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedRow {
    pub key: CellKey,
    pub region: Arc<str>,
    pub count: PnCount,
}

/// One cell's counts as a region sees them, each a PN-counter pair (hits, refunds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedCell {
    pub key: CellKey,
    /// The sum of the other regions' components: what merges into `cell.global`.
    pub foreign: PnCount,
    /// This region's own component (0s when it has none): may only raise the regional count.
    pub own: PnCount,
}

/// How far before the store's clock at the start of a read the next incremental read starts:
/// the longest a write may take to commit after it took its stamp and still be seen without a
/// full read. An upsert commits within milliseconds; one that takes longer than this is a sick
/// database, whose rows the periodic full read catches, or the next read after the row
/// changes again (a hot cell's rows change every flush). Every row read again in the overlap
/// is a row read for nothing: at one hot key, 2 s read every region's row on every sync
/// (ACCURACY.md, "Incremental sync").
pub const DEFAULT_SYNC_OVERLAP: Duration = Duration::from_millis(50);

/// What one sync reads (see [`GlobalStore::sync`]): the live rows of the cells another region
/// than `region` wrote, all of them (`since` `None`) or those changed since a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncQuery<'a> {
    pub region: &'a str,
    pub now_ms: u64,
    pub since: Option<ChangeMark>,
}

impl<'a> SyncQuery<'a> {
    /// Every live row of the cells another region wrote.
    pub fn full(region: &'a str, now_ms: u64) -> Self {
        Self::since(region, now_ms, None)
    }

    /// The rows changed since `since` (every one when `None`).
    pub fn since(region: &'a str, now_ms: u64, since: Option<ChangeMark>) -> Self {
        Self {
            region,
            now_ms,
            since,
        }
    }
}

/// Where an incremental sync starts, on the store's clock (opaque to the caller): the cells
/// with a foreign row stamped at or after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChangeMark(pub i64);

/// What one sync read: its rows, and where the next incremental read starts.
#[derive(Debug, Default)]
pub struct SyncRead {
    pub rows: Vec<SyncedRow>,
    /// `None`: this store cannot tell (or saw no clock); the next read must be a full one.
    pub next: Option<ChangeMark>,
}

impl SyncRead {
    /// The rows summed per cell as `region` sees them: each cell's foreign rows of this read
    /// and its own. The whole sums for a full read; for an incremental one, only of the rows
    /// it returned (the engine adds those to the components it already knows).
    pub fn cells(&self, region: &str) -> Vec<SyncedCell> {
        let mut cells: std::collections::BTreeMap<&CellKey, (PnCount, PnCount)> =
            std::collections::BTreeMap::new();
        for row in &self.rows {
            let (foreign, own) = cells.entry(&row.key).or_default();
            if &*row.region == region {
                *own = row.count;
            } else {
                *foreign = foreign.plus(row.count);
            }
        }
        cells
            .into_iter()
            .map(|(key, (foreign, own))| SyncedCell {
                key: key.clone(),
                foreign,
                own,
            })
            .collect()
    }
}

/// What happened to one row of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOutcome {
    /// Its chunk committed: the row may be marked flushed at this count.
    Published,
    /// Never written: a string is longer than its column, or duration/sequence do not fit a
    /// BIGINT. Retrying cannot help; the cell stays local to this region.
    Skipped,
    /// Its chunk failed: keep it pending and retry next tick.
    Failed,
}

/// The result of one publish, per row and per chunk.
#[derive(Debug, Default)]
pub struct PublishReport {
    /// One per input row, in input order.
    pub outcomes: Vec<RowOutcome>,
    /// One per chunk statement, in write order: the number of distinct rows it upserted, or why
    /// it failed.
    pub chunks: Vec<Result<usize, StoreError>>,
}

impl PublishReport {
    /// One chunk written (or not): its row count, and its inputs published if it committed.
    pub fn record_chunk(&mut self, chunk: &[PreparedRow<'_>], written: Result<(), StoreError>) {
        if written.is_ok() {
            for i in chunk.iter().flat_map(|row| &row.inputs) {
                if let Some(outcome) = self.outcomes.get_mut(*i) {
                    *outcome = RowOutcome::Published;
                }
            }
        }
        self.chunks.push(written.map(|()| chunk.len()));
    }

    fn count(&self, outcome: RowOutcome) -> usize {
        self.outcomes.iter().filter(|o| **o == outcome).count()
    }

    /// Input rows now in the store.
    pub fn published(&self) -> usize {
        self.count(RowOutcome::Published)
    }

    /// Input rows that can never be stored (see [`RowOutcome::Skipped`]).
    pub fn skipped(&self) -> usize {
        self.count(RowOutcome::Skipped)
    }

    /// Input rows whose chunk failed.
    pub fn failed(&self) -> usize {
        self.count(RowOutcome::Failed)
    }

    pub fn errors(&self) -> impl Iterator<Item = &StoreError> {
        self.chunks.iter().filter_map(|c| c.as_ref().err())
    }
}

/// The global counters' storage: per cell, one PN-counter component per region (hits and
/// refunds, each grow-only; refunds capped at the component's hits).
pub trait GlobalStore: Send + Sync + 'static {
    /// A short name for logs and metrics ("mysql", "postgres", "sqlite", "memory").
    fn name(&self) -> &'static str;

    /// Upsert this region's components, keeping the greatest hits and the greatest refunds per
    /// row (refunds capped at the row's hits), so a resend or an older value never moves
    /// either half back. Rows are sorted in unique-key order (two
    /// flushers lock rows in the same order: no deadlock between them), duplicates merged with
    /// `max`, and written in chunks below the database's placeholder limit; each chunk commits
    /// on its own. `expires_at = (sequence + 2) × duration_ms`, `updated_at = now_ms`; counts
    /// above `i64::MAX` are stored as `i64::MAX`.
    ///
    /// An `Err` means nothing was attempted (an invalid region); otherwise see the report.
    /// Every store writes through [`publish_in_chunks`], with its own [`Self::write_chunk`].
    fn publish<'a>(
        &'a self,
        region: &'a str,
        rows: &'a [(CellKey, PnCount)],
        now_ms: u64,
    ) -> StoreFuture<'a, PublishReport> {
        Box::pin(publish_in_chunks(self, region, rows, now_ms))
    }

    /// Distinct rows per chunk of a publish (at least 1).
    fn chunk_rows(&self) -> usize {
        DEFAULT_CHUNK_ROWS
    }

    /// Upsert one chunk of a publish (see [`Self::publish`]); it commits on its own.
    fn write_chunk<'a>(&'a self, chunk: Chunk<'a>) -> StoreFuture<'a, ()>;

    /// The live rows (`expires_at > now_ms`) of the cells another region wrote, one region's
    /// component each: every foreign row (`region != region`), and this region's own row of
    /// each cell one of them belongs to (it may only raise the regional count: a sibling
    /// process's publish, read back). The rows of a cell only this region wrote are not
    /// returned: it has nothing to import, and the region's count of it is held by the
    /// regional origin (returning it made every process read back every row its region
    /// published; ACCURACY.md).
    ///
    /// `query.since` `None` is a full read. With a [`ChangeMark`] a previous read returned, only
    /// the foreign rows stamped at or after it are returned, with this region's own row of
    /// their cells: a row per changed component, not the cell's every row.
    /// Either read returns the mark the next one starts from (see the module's "Incremental
    /// sync"); a store without change stamps reads everything and returns no mark.
    fn sync<'a>(&'a self, query: SyncQuery<'a>) -> StoreFuture<'a, SyncRead>;

    /// This region's own rows of the cells with `expires_at > now_ms`. Read once when a
    /// process starts: sync leaves out cells only this region wrote, and a restarted process
    /// whose regional origin is its own memory (or is down) gets its region's counts back from
    /// here, as it used to from sync.
    fn own_rows<'a>(&'a self, region: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<SyncedRow>>;

    /// Delete rows with `expires_at <= now_ms`, at most `batch` per statement, until none are
    /// left (short statements, so a big cleanup never holds locks for long). Returns the
    /// number of rows deleted.
    fn cleanup<'a>(&'a self, now_ms: u64, batch: u64) -> StoreFuture<'a, u64>;

    /// The database's clock, in microseconds since the Unix epoch: what the clock offset gauge
    /// compares this process's clock with. `None` for a store with no clock of its own (the
    /// memory store, which shares the process's).
    fn clock_us(&self) -> StoreFuture<'_, Option<u64>> {
        Box::pin(async { Ok(None) })
    }

    /// Create or upgrade the schema (`--migrate`). Safe to run again. A store without one
    /// has nothing to do.
    fn migrate_schema(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    /// Take up to `ask.want` rights of a `never_above` counter's cell, atomically with every
    /// region's takes ([`RightsRow::take`](crate::regional::RightsRow::take) on the counter's
    /// row): how many were granted. A store that keeps no rights refuses.
    fn take_rights<'a>(&'a self, ask: &'a crate::regional::RightsAsk) -> StoreFuture<'a, u64> {
        let _ = ask;
        Box::pin(async { Err(StoreError::Query("this store keeps no rights".into())) })
    }

    /// Give back rights a process holds and will never spend.
    fn give_back_rights<'a>(
        &'a self,
        returns: &'a [crate::regional::RightsReturn],
    ) -> StoreFuture<'a, ()> {
        let _ = returns;
        Box::pin(async { Err(StoreError::Query("this store keeps no rights".into())) })
    }
}

/// One distinct row of a publish, ready to write: values already clamped to BIGINT.
#[derive(Debug, Clone)]
pub struct PreparedRow<'a> {
    pub key: &'a CellKey,
    /// Hits.
    pub count: i64,
    /// Refunds, at most `count`.
    pub refunds: i64,
    pub expires_at: i64,
    /// The input rows merged into this one (the same key may come more than once).
    pub inputs: Vec<usize>,
}

/// Validate, sort in unique-key order and merge duplicates. Returns the rows to write and the
/// outcomes so far (skipped rows are final; the others are `Failed` until their chunk commits).
pub fn prepare_rows(rows: &[(CellKey, PnCount)]) -> (Vec<PreparedRow<'_>>, Vec<RowOutcome>) {
    let outcomes: Vec<RowOutcome> = rows
        .iter()
        .map(|(key, _)| {
            if fits(key) {
                RowOutcome::Failed
            } else {
                RowOutcome::Skipped
            }
        })
        .collect();
    let mut order: Vec<(usize, &CellKey, PnCount)> = rows
        .iter()
        .enumerate()
        .filter(|(_, (key, _))| fits(key))
        .map(|(i, (key, count))| (i, key, *count))
        .collect();
    // CellKey orders like the unique key (region is constant within a publish), and str
    // compares bytes like the binary columns. Stable: duplicates keep their input order.
    order.sort_by(|a, b| a.1.cmp(b.1));
    let mut prepared: Vec<PreparedRow<'_>> = Vec::with_capacity(order.len());
    for (i, key, count) in order {
        let count = count.capped();
        let (hits, refunds) = (clamp(count.hits), clamp(count.refunds));
        match prepared.last_mut() {
            Some(last) if last.key == key => {
                last.count = last.count.max(hits);
                last.refunds = last.refunds.max(refunds).min(last.count);
                last.inputs.push(i);
            }
            _ => prepared.push(PreparedRow {
                key,
                count: hits,
                refunds,
                expires_at: expires_at(key),
                inputs: vec![i],
            }),
        }
    }
    (prepared, outcomes)
}

/// Whether a key fits the table: strings within their columns, numbers within BIGINT.
pub fn fits(key: &CellKey) -> bool {
    key.workspace().len() <= WORKSPACE_ID_MAX_BYTES as usize
        && key.namespace().len() <= NAMESPACE_MAX_BYTES as usize
        && key.identifier.len() <= IDENTIFIER_MAX_BYTES as usize
        && i64::try_from(key.duration_ms).is_ok()
        && i64::try_from(key.sequence).is_ok()
}

/// One chunk of a region's publish, as [`GlobalStore::write_chunk`] writes it.
#[derive(Clone, Copy)]
pub struct Chunk<'a> {
    pub region: &'a str,
    pub rows: &'a [PreparedRow<'a>],
    pub now_ms: u64,
}

/// [`GlobalStore::publish`] of every store: the region checked, the rows prepared
/// ([`prepare_rows`]) and written chunk by chunk, the inputs of each chunk that committed
/// marked published. After a chunk could not reach the store (a connection error or a
/// timeout) the rest are not attempted: waiting out every chunk's timeout would only delay
/// the report.
pub async fn publish_in_chunks<S: GlobalStore + ?Sized>(
    writer: &S,
    region: &str,
    rows: &[(CellKey, PnCount)],
    now_ms: u64,
) -> Result<PublishReport, StoreError> {
    check_region(region)?;
    let (prepared, outcomes) = prepare_rows(rows);
    let mut report = PublishReport {
        outcomes,
        chunks: Vec::new(),
    };
    let mut down = false;
    for chunk in prepared.chunks(writer.chunk_rows().max(1)) {
        let written = if down {
            Err(StoreError::Connection(
                "not attempted: an earlier chunk could not reach the database".into(),
            ))
        } else {
            let rows = chunk;
            writer
                .write_chunk(Chunk {
                    region,
                    rows,
                    now_ms,
                })
                .await
        };
        down = matches!(
            written,
            Err(StoreError::Connection(_) | StoreError::Timeout(_))
        );
        report.record_chunk(chunk, written);
    }
    Ok(report)
}

pub fn check_region(region: &str) -> Result<(), StoreError> {
    if region.is_empty() || region.len() > REGION_MAX_BYTES as usize {
        return Err(StoreError::InvalidRegion(region.to_owned()));
    }
    Ok(())
}

/// The row is the previous window of window `sequence + 1`, and useless after it.
pub fn expires_at(key: &CellKey) -> i64 {
    clamp(
        key.sequence
            .saturating_add(2)
            .saturating_mul(key.duration_ms),
    )
}

/// u64 into a signed BIGINT: larger values saturate.
pub fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
