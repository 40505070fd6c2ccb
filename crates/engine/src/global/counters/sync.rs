//! Sync: reading the other regions' components into the engine, and what it reads first (this
//! region's own rows, once) and after (the clock offset).
//!
//! A sync reads incrementally (the store's "Incremental sync": only the foreign rows stamped
//! since the previous read's mark, which the store sets an overlap before its clock at that
//! read) except the first one of a process, which reads everything, and one at least every
//! `full_sync_interval`, which catches whatever an incremental read could miss (a commit
//! slower than the overlap, the store's clock stepping back, rows of a writer that does not
//! stamp them). A read returns rows, one region's component each; the engine keeps the
//! other regions' components of each cell and sums them (`Publication::merge_synced_rows`),
//! every merge a `max`, so reading a row again is harmless.
//!
//! A cell this process evicted (its table full) and then needed again gets the other
//! regions' counts back from the components held, at the next read of any of its rows, or
//! from the next full sync: within `full_sync_interval`, not within one sync interval as when
//! every sync was full.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::GlobalCounters;
use crate::global::clock::{CLOCK_CHECK_INTERVAL, clock_offset_seconds};
use crate::global::{ChangeMark, StoreError, SyncQuery, SyncRead};
use crate::pn::PnCount;

/// Where the next sync reads from: the store's mark of the previous read, and when (on this
/// process's clock) the last full read was.
#[derive(Debug, Default)]
pub(super) struct SyncPosition(Mutex<Position>);

#[derive(Debug, Default, Clone, Copy)]
struct Position {
    mark: Option<ChangeMark>,
    full_at_ms: Option<u64>,
}

impl SyncPosition {
    fn get(&self) -> std::sync::MutexGuard<'_, Position> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The mark the next read starts from; `None`: a full read (the first, one
    /// `full_every` after the last, one after this process's clock stepped back, or one
    /// after a store that gave no mark).
    pub(super) fn since(&self, now_ms: u64, full_every: Duration) -> Option<ChangeMark> {
        let position = *self.get();
        let full_every = u64::try_from(full_every.as_millis()).unwrap_or(u64::MAX);
        let due = position
            .full_at_ms
            .is_none_or(|at| now_ms < at || now_ms - at >= full_every);
        if due { None } else { position.mark }
    }

    /// A read succeeded: the next one starts from its mark.
    pub(super) fn read(&self, now_ms: u64, full: bool, next: Option<ChangeMark>) {
        let mut position = self.get();
        position.mark = next;
        if full {
            position.full_at_ms = Some(now_ms);
        }
    }
}

impl GlobalCounters {
    /// Import the other regions' components (and, for those cells, this region's own row as
    /// a lower bound). Cells only this region wrote are not read back (see
    /// `GlobalStore::sync`); after the first full read, only the rows another region changed
    /// since the last read are (see `SyncPosition`). On failure the counts already held
    /// stay. Returns the cells merged.
    pub async fn sync(&self) -> Option<usize> {
        let span = tracing::info_span!(
            target: crate::SPAN_TARGET,
            "global.sync",
            rls.store = self.store.name(),
            rls.cells = tracing::field::Empty,
            rls.full = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let synced = self.sync_rows().instrument(span.clone()).await;
        match synced {
            Some(cells) => span.record("rls.cells", cells),
            None => span.record("otel.status_code", "error"),
        };
        synced
    }

    async fn sync_rows(&self) -> Option<usize> {
        let started = Instant::now();
        let now_ms = self.engine.now_ms();
        if !self.own_read.load(std::sync::atomic::Ordering::Acquire) {
            self.read_own_rows(now_ms).await?;
        }
        let since = self
            .sync_position
            .since(now_ms, self.settings.full_sync_interval);
        tracing::Span::current().record("rls.full", since.is_none());
        let sync = self
            .store
            .sync(SyncQuery::since(&self.region, now_ms, since));
        let SyncRead { rows, next } = match self.within(sync).await {
            Ok(read) => read,
            Err(error) => {
                self.sync_failed(&error, "global sync failed; keeping imported counts");
                return None;
            }
        };
        self.sync_position.read(now_ms, since.is_none(), next);
        if since.is_none() {
            self.engine.publication().forget_expired_components(now_ms);
        }
        let read = rows.len();
        let (cells, created) = self
            .engine
            .publication()
            .merge_synced_rows(rows, &self.region, |row| (&row.key, &row.region, row.count))
            .await;
        self.metrics
            .global_sync(read as u64, created, started.elapsed());
        self.check_clock().await;
        Some(cells)
    }

    /// Measures this process's clock against the database's, at most once per
    /// [`CLOCK_CHECK_INTERVAL`], for the clock offset gauge. A failed measurement only leaves
    /// the gauge where it was: the sync it follows succeeded.
    async fn check_clock(&self) {
        {
            let mut checked = self
                .clock_checked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if checked.is_some_and(|at| at.elapsed() < CLOCK_CHECK_INTERVAL) {
                return;
            }
            *checked = Some(Instant::now());
        }
        let sent_ms = self.engine.now_ms();
        let sent = Instant::now();
        match self.within(self.store.clock_us()).await {
            Ok(Some(database_us)) => {
                let offset = clock_offset_seconds(sent_ms, sent.elapsed(), database_us);
                self.metrics.global_clock_offset(offset);
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "reading the database's clock failed"),
        }
    }

    /// The first sync of a process first reads back its region's own rows, as a lower bound
    /// of `regional` (sync no longer returns cells only this region wrote). Fails like a sync.
    async fn read_own_rows(&self, now_ms: u64) -> Option<()> {
        let own = match self.within(self.store.own_rows(&self.region, now_ms)).await {
            Ok(own) => own,
            Err(error) => {
                self.sync_failed(
                    &error,
                    "reading this region's own global rows failed; retrying on the next sync",
                );
                return None;
            }
        };
        let read = own.len();
        self.engine
            .publication()
            .merge_synced_all(own, |row| (&row.key, PnCount::default(), row.count))
            .await;
        tracing::debug!(cells = read, "own global rows read back");
        self.own_read
            .store(true, std::sync::atomic::Ordering::Release);
        Some(())
    }

    /// A failed read of sync's: warned (once per `repeated_warning_interval`) and counted.
    fn sync_failed(&self, error: &StoreError, what: &str) {
        if let Some(suppressed) = self.sync_warnings.allow() {
            tracing::warn!(%error, store = self.store.name(), suppressed, "{what}");
        }
        self.metrics.global_sync_failed();
    }
}

#[cfg(test)]
mod tests;
