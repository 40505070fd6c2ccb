//! The store in process: the same semantics as the SQL table, for tests of the engine side
//! (including failures: a whole store down, or some chunks of a publish failing).
//!
//! Its clock, which stamps rows (`changed_at`) and marks incremental reads, is its own: it
//! stands still unless [`MemoryStore::set_clock`] moves it (the simulator moves it with virtual
//! time), so that tests decide what a read can miss.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use super::{
    ChangeMark, Chunk, DEFAULT_SYNC_OVERLAP, GlobalStore, StoreError, StoreFuture, SyncQuery,
    SyncRead, SyncedRow, check_region, clamp, prepare_rows,
};
use crate::cell_key::CellKey;
use crate::pn::PnCount;
use crate::regional::{RightsAsk, RightsReturn, RightsRow, counter_id};

/// One row of the table, as [`MemoryStore::rows`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    pub key: CellKey,
    pub region: String,
    /// Hits.
    pub count: u64,
    pub refunds: u64,
    pub expires_at: u64,
    pub updated_at: u64,
    /// The store's clock when the row last changed (see [`MemoryStore::set_clock`]).
    pub changed_at: i64,
}

#[derive(Debug, Clone, Copy)]
struct Component {
    count: i64,
    refunds: i64,
    expires_at: i64,
    updated_at: i64,
    changed_at: i64,
}

#[derive(Default)]
struct State {
    /// Ordered like the unique key, so `rows()` and `sync` read like the table.
    rows: BTreeMap<(CellKey, Box<str>), Component>,
    failing: bool,
    failing_chunks: usize,
    /// Rights of `never_above` counters, by counter id (`regional::rights`).
    rights: std::collections::HashMap<[u8; 16], crate::regional::RightsRow>,
    /// The store's clock (ms): stamps writes, marks reads.
    clock: i64,
}

pub struct MemoryStore {
    state: Mutex<State>,
    chunk_rows: usize,
    /// See [`DEFAULT_SYNC_OVERLAP`].
    overlap_ms: i64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::with_chunk_rows(super::DEFAULT_CHUNK_ROWS)
    }

    /// Chunks of `chunk_rows` distinct rows (at least 1), like the SQL store's statements.
    pub fn with_chunk_rows(chunk_rows: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            chunk_rows: chunk_rows.max(1),
            overlap_ms: clamp(DEFAULT_SYNC_OVERLAP.as_millis() as u64),
        }
    }

    /// Incremental reads start `overlap` before the store's clock at the previous read.
    pub fn with_overlap(mut self, overlap: std::time::Duration) -> Self {
        self.overlap_ms = clamp(u64::try_from(overlap.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Move the store's clock forward to `ms` (never back): what later writes are stamped
    /// with and reads are marked at.
    pub fn set_clock(&self, ms: u64) {
        let mut state = self.state();
        state.clock = state.clock.max(clamp(ms));
    }

    /// A publish whose rows are stamped `stamp_ms` instead of the store's clock, as a
    /// transaction that took its stamp then and commits only now; for tests of what an
    /// incremental read may miss. Chunk failures are not injected.
    pub fn commit_stamped(
        &self,
        region: &str,
        rows: &[(CellKey, PnCount)],
        now_ms: u64,
        stamp_ms: u64,
    ) -> Result<(), StoreError> {
        check_region(region)?;
        let (prepared, _) = prepare_rows(rows);
        let chunk = Chunk {
            region,
            rows: &prepared,
            now_ms,
        };
        self.upsert(&mut self.state(), chunk, clamp(stamp_ms));
        Ok(())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Never held across an await; a panic elsewhere leaves the map consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// While set, every call fails as if the database were down.
    pub fn set_failing(&self, failing: bool) {
        self.state().failing = failing;
    }

    /// The next `chunks` chunk statements of publishes fail (then writes succeed again).
    pub fn fail_next_chunks(&self, chunks: usize) {
        self.state().failing_chunks = chunks;
    }

    /// Every row, in unique-key order.
    pub fn rows(&self) -> Vec<StoredRow> {
        self.state()
            .rows
            .iter()
            .map(|((key, region), c)| StoredRow {
                key: key.clone(),
                region: region.to_string(),
                count: c.count.unsigned_abs(),
                refunds: c.refunds.unsigned_abs(),
                expires_at: c.expires_at.unsigned_abs(),
                updated_at: c.updated_at.unsigned_abs(),
                changed_at: c.changed_at,
            })
            .collect()
    }

    fn down(&self) -> Result<(), StoreError> {
        if self.state().failing {
            return Err(StoreError::Connection("memory store set to fail".into()));
        }
        Ok(())
    }

    /// One chunk's upsert, or the failure the store was told to inject.
    fn write_chunk_now(&self, chunk: Chunk<'_>) -> Result<(), StoreError> {
        let mut state = self.state();
        if state.failing {
            return Err(StoreError::Connection("memory store set to fail".into()));
        }
        if state.failing_chunks > 0 {
            state.failing_chunks -= 1;
            return Err(StoreError::Query("injected chunk failure".into()));
        }
        let stamp = state.clock;
        self.upsert(&mut state, chunk, stamp);
        Ok(())
    }

    /// The upsert of the SQL store: `max` of each half, the greatest stamp kept.
    fn upsert(&self, state: &mut State, chunk: Chunk<'_>, stamp: i64) {
        let updated_at = clamp(chunk.now_ms);
        for row in chunk.rows {
            state
                .rows
                .entry((row.key.clone(), chunk.region.into()))
                .and_modify(|c| {
                    c.count = c.count.max(row.count);
                    c.refunds = c.refunds.max(row.refunds).min(c.count);
                    c.updated_at = c.updated_at.max(updated_at);
                    c.changed_at = c.changed_at.max(stamp);
                })
                .or_insert(Component {
                    count: row.count,
                    refunds: row.refunds,
                    expires_at: row.expires_at,
                    updated_at,
                    changed_at: stamp,
                });
        }
    }

    fn sync_now(&self, query: SyncQuery<'_>) -> Result<SyncRead, StoreError> {
        let SyncQuery {
            region,
            now_ms,
            since,
        } = query;
        self.down()?;
        check_region(region)?;
        let now = clamp(now_ms);
        let state = self.state();
        let next = Some(ChangeMark(state.clock.saturating_sub(self.overlap_ms)));
        let changed = |c: &Component| since.is_none_or(|since| c.changed_at >= since.0);
        let mut rows: Vec<SyncedRow> = Vec::new();
        // The rows of one cell are adjacent (the map is ordered by key first): each cell's
        // live rows are gathered, then kept as the SQL store's statement keeps them.
        let mut cell: Vec<(&CellKey, &str, &Component)> = Vec::new();
        let mut live = state
            .rows
            .iter()
            .filter(|(_, c)| c.expires_at > now)
            .peekable();
        while let Some(((key, row_region), c)) = live.next() {
            cell.push((key, row_region, c));
            if live.peek().is_some_and(|((next, _), _)| next == key) {
                continue;
            }
            // This region's own row only of a cell with a foreign row read: the SQL store's
            // join on those cells' keys.
            let shared = cell.iter().any(|(_, r, c)| *r != region && changed(c));
            for (key, row_region, c) in cell.drain(..) {
                let keep = if row_region == region {
                    shared
                } else {
                    changed(c)
                };
                if keep {
                    rows.push(SyncedRow {
                        key: key.clone(),
                        region: row_region.into(),
                        count: stored(c),
                    });
                }
            }
        }
        Ok(SyncRead { rows, next })
    }

    fn own_rows_now(&self, region: &str, now_ms: u64) -> Result<Vec<SyncedRow>, StoreError> {
        self.down()?;
        check_region(region)?;
        let now = clamp(now_ms);
        Ok(self
            .state()
            .rows
            .iter()
            .filter(|((_, r), c)| &**r == region && c.expires_at > now)
            .map(|((key, r), c)| SyncedRow {
                key: key.clone(),
                region: (**r).into(),
                count: stored(c),
            })
            .collect())
    }

    fn cleanup_now(&self, now_ms: u64, batch: u64) -> Result<u64, StoreError> {
        self.down()?;
        let now = clamp(now_ms);
        let batch = usize::try_from(batch.max(1)).unwrap_or(usize::MAX);
        let mut deleted = 0u64;
        loop {
            let mut state = self.state();
            let expired: Vec<_> = state
                .rows
                .iter()
                .filter(|(_, c)| c.expires_at <= now)
                .map(|(k, _)| k.clone())
                .take(batch)
                .collect();
            for k in &expired {
                state.rows.remove(k);
            }
            deleted += expired.len() as u64;
            if expired.len() < batch {
                return Ok(deleted);
            }
        }
    }
}

/// A row's component as a read returns it: refunds capped at hits, like the SQL store's.
fn stored(c: &Component) -> PnCount {
    PnCount::new(c.count.unsigned_abs(), c.refunds.unsigned_abs()).capped()
}

impl GlobalStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    fn write_chunk<'a>(&'a self, chunk: Chunk<'a>) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.write_chunk_now(chunk)))
    }

    fn sync<'a>(&'a self, query: SyncQuery<'a>) -> StoreFuture<'a, SyncRead> {
        Box::pin(std::future::ready(self.sync_now(query)))
    }

    fn own_rows<'a>(&'a self, region: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<SyncedRow>> {
        Box::pin(std::future::ready(self.own_rows_now(region, now_ms)))
    }

    fn cleanup<'a>(&'a self, now_ms: u64, batch: u64) -> StoreFuture<'a, u64> {
        Box::pin(std::future::ready(self.cleanup_now(now_ms, batch)))
    }

    fn take_rights<'a>(&'a self, ask: &'a RightsAsk) -> StoreFuture<'a, u64> {
        let taken = self.down().map(|()| {
            let mut state = self.state();
            let id = counter_id(&ask.cell);
            let (granted, row) = RightsRow::take(state.rights.get(&id).copied(), ask);
            if let Some(row) = row {
                state.rights.insert(id, row);
            }
            granted
        });
        Box::pin(std::future::ready(taken))
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [RightsReturn]) -> StoreFuture<'a, ()> {
        let given = self.down().map(|()| {
            let mut state = self.state();
            for returned in returns {
                let id = counter_id(&returned.cell);
                let row = state.rights.get(&id).copied();
                if let Some(row) =
                    row.and_then(|r| r.give_back(returned.cell.sequence, returned.count))
                {
                    state.rights.insert(id, row);
                }
            }
        });
        Box::pin(std::future::ready(given))
    }
}
