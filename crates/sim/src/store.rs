//! The global store as the simulated fleet sees it: [`MemoryStore`] behind a lag, and counted.
//!
//! A publish becomes visible to syncs `write_latency_ms` after it was issued; a sync sees the
//! store as it was `read_latency_ms` ago (a replica behind the primary). Every call is counted
//! as the SQL store would run it: one upsert statement per chunk of distinct rows, one
//! `SELECT` per sync, one row read per row it returns (each a region's component of a cell).
//!
//! The store's clock, which stamps rows and marks incremental syncs, is virtual time: a write
//! is stamped when it becomes visible, a read is marked at the instant it sees. Incremental
//! reads start an overlap (the fleet's; the SQL store's default is
//! [`DEFAULT_SYNC_OVERLAP`](gcounter_engine::global::DEFAULT_SYNC_OVERLAP))
//! before the previous read, so they read again what changed in it, as the SQL store does.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use gcounter_engine::cell_key::CellKey;
use gcounter_engine::global::{
    Chunk, GlobalStore, MemoryStore, StoreError, StoreFuture, SyncQuery, SyncRead, SyncedRow,
};
use gcounter_engine::pn::PnCount;
use serde::Serialize;

/// What the fleet asked of the database.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Load {
    pub upsert_statements: u64,
    pub rows_written: u64,
    pub sync_statements: u64,
    pub rows_read: u64,
}

struct Pending {
    visible_at: u64,
    region: String,
    rows: Vec<(CellKey, PnCount)>,
    now_ms: u64,
}

pub struct LaggedStore {
    inner: MemoryStore,
    write_latency_ms: u64,
    read_latency_ms: u64,
    /// Chunks not visible yet, in issue order (= visibility order: one constant lag).
    pending: Mutex<VecDeque<Pending>>,
    load: Mutex<Load>,
}

impl LaggedStore {
    pub fn new(write_latency_ms: u64, read_latency_ms: u64, sync_overlap: Duration) -> Self {
        Self {
            inner: MemoryStore::new().with_overlap(sync_overlap),
            write_latency_ms,
            read_latency_ms,
            pending: Mutex::new(VecDeque::new()),
            load: Mutex::new(Load::default()),
        }
    }

    pub fn load(&self) -> Load {
        *self.load.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rows currently held (visible or not).
    pub fn rows(&self) -> usize {
        self.inner.rows().len()
    }

    /// Apply the publishes visible at `cutoff_ms` to the inner store.
    async fn apply_due(&self, cutoff_ms: u64) {
        loop {
            let due = {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                match pending.front() {
                    Some(p) if p.visible_at <= cutoff_ms => pending.pop_front(),
                    _ => None,
                }
            };
            let Some(due) = due else { return };
            self.inner.set_clock(due.visible_at);
            // MemoryStore never fails unless told to.
            let _ = self.inner.publish(&due.region, &due.rows, due.now_ms).await;
        }
    }
}

impl LaggedStore {
    /// A read of the store as it was `read_latency_ms` ago, counted as one statement and the
    /// rows it returns.
    async fn counted_read<'a, T>(
        &'a self,
        now_ms: u64,
        read: impl FnOnce() -> StoreFuture<'a, T>,
        rows: fn(&T) -> usize,
    ) -> Result<T, StoreError> {
        let cutoff = now_ms.saturating_sub(self.read_latency_ms);
        self.apply_due(cutoff).await;
        self.inner.set_clock(cutoff);
        let read = read().await?;
        let mut load = self.load.lock().unwrap_or_else(PoisonError::into_inner);
        load.sync_statements += 1;
        load.rows_read += rows(&read) as u64;
        Ok(read)
    }
}

impl GlobalStore for LaggedStore {
    fn name(&self) -> &'static str {
        "simulated"
    }

    /// Every chunk "commits" at once, counted as one statement; its rows become visible to
    /// reads after the lag.
    fn write_chunk<'a>(&'a self, chunk: Chunk<'a>) -> StoreFuture<'a, ()> {
        let mut load = self.load.lock().unwrap_or_else(PoisonError::into_inner);
        load.upsert_statements += 1;
        load.rows_written += chunk.rows.len() as u64;
        drop(load);
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Pending {
                visible_at: chunk.now_ms + self.write_latency_ms,
                region: chunk.region.to_owned(),
                rows: chunk
                    .rows
                    .iter()
                    .map(|row| {
                        (
                            row.key.clone(),
                            PnCount::new(count(row.count), count(row.refunds)),
                        )
                    })
                    .collect(),
                now_ms: chunk.now_ms,
            });
        Box::pin(async move {
            if self.write_latency_ms == 0 {
                self.apply_due(chunk.now_ms).await;
            }
            Ok(())
        })
    }

    fn sync<'a>(&'a self, query: SyncQuery<'a>) -> StoreFuture<'a, SyncRead> {
        Box::pin(self.counted_read(
            query.now_ms,
            move || self.inner.sync(query),
            |read| read.rows.len(),
        ))
    }

    fn own_rows<'a>(&'a self, region: &'a str, now_ms: u64) -> StoreFuture<'a, Vec<SyncedRow>> {
        Box::pin(self.counted_read(
            now_ms,
            move || self.inner.own_rows(region, now_ms),
            Vec::len,
        ))
    }

    fn cleanup<'a>(&'a self, now_ms: u64, batch: u64) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            self.apply_due(now_ms.saturating_sub(self.read_latency_ms))
                .await;
            self.inner.cleanup(now_ms, batch).await
        })
    }
}

#[cfg(test)]
mod tests;
