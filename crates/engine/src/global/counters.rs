//! `GlobalCounters`: the loops that converge regions through the global store.
//!
//! Flush publishes this region's meaningful counts (its G-Counter components); sync imports
//! the other regions' sums. Neither is on the request path: both read and merge cells through
//! the engine's public API, on jittered cadences, behind timeouts and a back-off.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use super::cadence::{Backoff, Cadence};
use super::overload::{Overload, speedup};
use super::{GlobalStore, RowOutcome, StoreError, StoreFuture};
use crate::local::{Engine, Publishable};
use crate::plant::{self, Plant};
use crate::pn::PnCount;
use crate::reachability::Reachability;
use crate::recorder::{FlushRecord, Recorder};
use crate::throttle::Throttle;

/// The default publish floor: 2 % of a limit. Chosen with `gcounter-sim`: a floor of 0.5 let
/// ten regions at 0.2× each admit 2× the limit (nobody ever published); at 0.02 the free zone
/// is 0.2× with ten regions, and the design's load model writes ~2,100 rows/s (3.6 upserts/s)
/// at 10 s intervals, within the database load it is sized for (ACCURACY.md).
pub const DEFAULT_PUBLISH_FLOOR: f64 = 0.02;

/// Rows the flush takes from the table walk and hands to the store at a time: one statement
/// at the stores' default chunk size, and a bounded amount of keys to clone and drop between
/// two turns of the runtime.
const FLUSH_CHUNK_ROWS: usize = super::DEFAULT_CHUNK_ROWS;

/// The shortest interval a contended speedup brings flush or sync down to.
const MIN_CONTENDED_INTERVAL: Duration = Duration::from_millis(100);

/// The overload is measured over this many of the longer interval (half as many to as many):
/// over one, the admissions when the sliding window frees capacity (exactly when regions race
/// for it) pulled the ratio down and the speedup lapsed then; over ten, ten regions at 10×
/// stay within 1.44–1.49× over any window instead of 1.65× (ACCURACY.md).
const OVERLOAD_SPAN_INTERVALS: u64 = 10;

/// The default [`GlobalSettings::contended_speedup`]: at most four times as often. Chosen
/// with `gcounter-sim`: 2 left ten regions at 10× at 1.86× over a window, 4 holds
/// every hot-key target at 1 s intervals (ACCURACY.md, "Overload cadence").
pub const DEFAULT_CONTENDED_SPEEDUP: u32 = 4;

/// The default [`GlobalSettings::contended_overload`]: speed up once a shared counter is
/// offered about 3× its limit (2 denials per admission). At the design's load model keys run at
/// most 2× over, so its statements stay those of the normal cadence.
pub const DEFAULT_CONTENDED_OVERLOAD: f64 = 2.0;

/// The default [`GlobalSettings::full_sync_interval`]: six of the default syncs, one of the
/// design's windows (ACCURACY.md, "Incremental sync").
pub const DEFAULT_FULL_SYNC_INTERVAL: Duration = Duration::from_secs(60);

pub use onset::{
    DEFAULT_ONSET_FRACTION, DEFAULT_ONSET_INTERVAL, DEFAULT_ONSET_MIN_HITS,
    DEFAULT_ONSET_URGENT_DIVISOR,
};

/// The default of [`GlobalSettings::rights_timeout`]: a few round trips to a database a
/// region away, well under a client's deadline.
pub const DEFAULT_RIGHTS_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct GlobalSettings {
    pub flush_interval: Duration,
    pub sync_interval: Duration,
    /// ± fraction of the interval each tick may move.
    pub jitter: f64,
    /// A cell is published once its count reaches this fraction of its limit. Counts below it
    /// stay in their region: with `R` regions a limit can be exceeded by up to `R × floor`
    /// of it before any region hears of the others (ACCURACY.md). With the fast cadence on
    /// (`onset_fraction` > 0), a cell another region counts is published from its first hit
    /// (`PublishableWalk::shared_from_first_hit`).
    pub publish_floor: f64,
    /// The most times as often flush and sync run while this process's counters that another
    /// region also counts are offered far over their limit (1: never faster; never below
    /// 100 ms). The speedup is the overload itself (see `contended_overload`), up to this:
    /// the over-admission while regions hear of each other grows with the overload times the
    /// delay, so dividing the delay by it spends statements only where they buy accuracy
    /// (ACCURACY.md, "Overload cadence").
    pub contended_speedup: u32,
    /// Speed up only while, over the last ten (longer) intervals, decisions on shared cells were
    /// denied at least this many times per admission (`ρ − 1` for a counter offered `ρ` times
    /// its limit: 2.0 is about 3×). The speedup is the ratio rounded down, so below 2 (or
    /// with `contended_speedup` 1) the cadence never changes.
    pub contended_overload: f64,
    /// A cell whose unpublished count reaches this fraction of its limit (and
    /// `onset_min_hits`) within a second of a flush is a surge at its onset: it is published
    /// and synced every `onset_interval` while it keeps growing so. 0 turns the fast cadence
    /// off, contended cells included (see `counters::onset`).
    pub onset_fraction: f64,
    /// The fewest unpublished hits that make an onset, whatever the limit: a low limit's
    /// fraction is a handful of hits that a quiet key's chance bunching reaches.
    pub onset_min_hits: u64,
    /// The fast cadence of the cells at their onset and of contended cells.
    pub onset_interval: Duration,
    /// While a shared cell at its onset closes in on its limit, the fast ticks come this
    /// many times as often (never below 10 ms); 1 turns the urgent ticks off (see
    /// `counters::onset`).
    pub onset_urgent_divisor: u32,
    /// A sync reads everything at least this often, and only the cells another region
    /// changed since the previous read in between (see `counters::sync`): the longest a row
    /// that an incremental read missed (a commit slower than the store's overlap) stays
    /// unseen.
    pub full_sync_interval: Duration,
    /// Bound on one flush or sync, so a sick database cannot hold the next tick.
    pub timeout: Duration,
    /// Bound on one take (or give-back) of `never_above` rights: a decision that needs a
    /// right waits for its take, so this is part of its answer's latency.
    pub rights_timeout: Duration,
    /// Periodic cleanup of expired rows; `None` leaves it to `gcounter-rls cleanup`.
    pub cleanup_interval: Option<Duration>,
    pub cleanup_batch: u64,
    /// Create or upgrade the schema before the first flush or sync (`--migrate`); retried
    /// on each tick while the database is unreachable.
    pub migrate: bool,
    /// A repeated warning (a failed flush or sync) is logged once per this interval.
    pub repeated_warning_interval: Duration,
}

impl Default for GlobalSettings {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_secs(10),
            sync_interval: Duration::from_secs(10),
            jitter: 0.2,
            publish_floor: DEFAULT_PUBLISH_FLOOR,
            contended_speedup: DEFAULT_CONTENDED_SPEEDUP,
            contended_overload: DEFAULT_CONTENDED_OVERLOAD,
            onset_fraction: DEFAULT_ONSET_FRACTION,
            onset_min_hits: DEFAULT_ONSET_MIN_HITS,
            onset_interval: DEFAULT_ONSET_INTERVAL,
            onset_urgent_divisor: DEFAULT_ONSET_URGENT_DIVISOR,
            full_sync_interval: DEFAULT_FULL_SYNC_INTERVAL,
            timeout: Duration::from_secs(5),
            rights_timeout: DEFAULT_RIGHTS_TIMEOUT,
            cleanup_interval: None,
            cleanup_batch: 1_000,
            migrate: false,
            repeated_warning_interval: Duration::from_secs(10),
        }
    }
}

/// What one flush did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    pub published: usize,
    pub skipped: usize,
    pub failed: usize,
}

pub struct GlobalCounters {
    store: Arc<dyn GlobalStore>,
    engine: Arc<Engine>,
    region: String,
    settings: GlobalSettings,
    metrics: Arc<dyn Recorder>,
    flush_warnings: Throttle,
    sync_warnings: Throttle,
    /// The schema is ready (migrated, or not ours to migrate).
    schema_ready: std::sync::atomic::AtomicBool,
    /// This region's own rows were read back once (see [`GlobalStore::own_rows`]).
    own_read: std::sync::atomic::AtomicBool,
    /// Denials per admission on shared cells of late: how much faster to flush and sync.
    overload: Overload,
    /// Where the next sync reads from (see `sync`).
    sync_position: sync::SyncPosition,
    /// When the sync last measured the clock offset (see `CLOCK_CHECK_INTERVAL`).
    clock_checked: std::sync::Mutex<Option<Instant>>,
    /// Cells at their onset (see `onset`) and when each last grew so.
    hot: onset::HotCells,
    /// Logs the database's first answer, its loss, and its first answer after.
    reachability: Reachability,
}

impl GlobalCounters {
    pub fn new(
        store: Arc<dyn GlobalStore>,
        engine: Arc<Engine>,
        region: String,
        settings: GlobalSettings,
        metrics: Arc<dyn Recorder>,
    ) -> Self {
        // `never_above` limits take their rights from the store every region shares.
        engine.keep_rights_in(Arc::new(super::GlobalRights::new(
            Arc::clone(&store),
            settings.rights_timeout,
        )));
        // The flush publishes what the table holds: an expired cell gets the region's final
        // count and is published before it leaves (`CellTable::reap_closing`).
        // Rechecked after two flush intervals: the closing replay and a flush (jittered) are
        // done by then unless the database is down.
        engine
            .publication()
            .hold_unpublished(settings.publish_floor, settings.flush_interval * 2);
        onset::watch(&engine, &settings);
        Self {
            reachability: Reachability::new(
                format!("the database ({})", store.name()),
                "each region decides from its own counts meanwhile",
            ),
            store,
            engine,
            region,
            flush_warnings: Throttle::new(settings.repeated_warning_interval),
            sync_warnings: Throttle::new(settings.repeated_warning_interval),
            schema_ready: std::sync::atomic::AtomicBool::new(!settings.migrate),
            own_read: std::sync::atomic::AtomicBool::new(false),
            overload: Overload::default(),
            sync_position: sync::SyncPosition::default(),
            clock_checked: std::sync::Mutex::new(None),
            hot: onset::HotCells::default(),
            settings,
            metrics,
        }
    }

    /// Whether the schema is ready; with `migrate`, tries the migration (bounded by the
    /// timeout) until it succeeds once, so a database that appears after start is migrated.
    pub async fn ensure_schema(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.schema_ready.load(Ordering::Acquire) {
            return true;
        }
        match self.within(self.store.migrate_schema()).await {
            Ok(()) => {
                tracing::info!(store = self.store.name(), "database migrations applied");
                self.schema_ready.store(true, Ordering::Release);
                true
            }
            Err(error) => {
                if let Some(suppressed) = self.sync_warnings.allow() {
                    tracing::warn!(%error, store = self.store.name(), suppressed, "database migration failed; retrying on the next tick");
                }
                false
            }
        }
    }

    /// A store call within `settings.timeout`; running out of it is a [`StoreError::Timeout`].
    async fn within<T>(&self, call: StoreFuture<'_, T>) -> Result<T, StoreError> {
        let outcome = match tokio::time::timeout(self.settings.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(self.settings.timeout)),
        };
        self.reached(&outcome);
        outcome
    }

    /// Says (once per change) whether the database answered: an error it sent is an answer.
    fn reached<T>(&self, outcome: &Result<T, StoreError>) {
        match outcome {
            Err(error @ (StoreError::Connection(_) | StoreError::Timeout(_))) => {
                self.reachability.lost(error);
            }
            _ => {
                self.reachability.reached();
            }
        }
    }

    /// Publish own components: cells at or above the floor whose count changed since their
    /// last successful publication. A cell is marked published only when its chunk committed;
    /// rows of a failed chunk stay pending for the next tick.
    ///
    /// The table is walked and published `FLUSH_CHUNK_ROWS` rows at a time (one store
    /// call, one statement at the default chunk size), each chunk dropped before the walk
    /// goes on: gathering every row first, cloning every key at once and dropping them all
    /// held a one-worker runtime's only thread for tens of milliseconds at 1M cells.
    /// The whole flush stays within `settings.timeout`; a store call that fails or runs out
    /// of it ends the flush, and the rows not yet offered wait for the next tick as the failed
    /// ones do.
    pub async fn flush(&self) -> Flushed {
        let span = tracing::info_span!(
            target: crate::SPAN_TARGET,
            "global.flush",
            rls.store = self.store.name(),
            rls.rows_published = tracing::field::Empty,
            rls.rows_failed = tracing::field::Empty,
        );
        let flushed = self.flush_rows().instrument(span.clone()).await;
        span.record("rls.rows_published", flushed.published);
        span.record("rls.rows_failed", flushed.failed);
        flushed
    }

    async fn flush_rows(&self) -> Flushed {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        // The onset watch counts the growth of the span after a flush (see `onset`).
        self.engine
            .onset()
            .open_until(self.engine.now_ms().saturating_add(onset::SPAN_MS));
        let mut walk = self
            .engine
            .publication()
            .publishable_walk(self.settings.publish_floor);
        if self.onset_enabled() {
            walk = walk.shared_from_first_hit();
        }
        let mut flushed = Flushed::default();
        let (mut offered, mut failed_chunks) = (0, 0);
        loop {
            let rows = walk.next_chunk(FLUSH_CHUNK_ROWS).await;
            if rows.is_empty() {
                break;
            }
            offered += rows.len();
            if !self
                .publish_chunk(&rows, deadline, &mut flushed, &mut failed_chunks)
                .await
            {
                break;
            }
        }
        if offered == 0 {
            return flushed;
        }
        self.metrics.global_flush(FlushRecord {
            written: flushed.published as u64,
            failed_chunks,
            skipped: flushed.skipped as u64,
            took: started.elapsed(),
        });
        flushed
    }

    /// Publish one chunk of rows and mark those that committed; counts the outcome into
    /// `flushed`. Returns whether the flush may go on (false: the call failed or ran out of
    /// the flush's time, and every row of the chunk stays pending).
    async fn publish_chunk(
        &self,
        rows: &[Publishable],
        deadline: tokio::time::Instant,
        flushed: &mut Flushed,
        failed_chunks: &mut u64,
    ) -> bool {
        let input: Vec<_> = rows
            .iter()
            .map(|r| {
                // The chaos checker's `flush-short` defect (debug builds only).
                let hits = plant::short(Plant::FlushShort, r.count.hits);
                (r.key.clone(), PnCount { hits, ..r.count })
            })
            .collect();
        let now_ms = self.engine.now_ms();
        let publish = self.store.publish(&self.region, &input, now_ms);
        let outcome = match tokio::time::timeout_at(deadline, publish).await {
            Ok(outcome) => outcome,
            Err(_) => Err(StoreError::Timeout(self.settings.timeout)),
        };
        self.reached(&outcome);
        let report = match outcome {
            Ok(report) => report,
            Err(error) => {
                self.flush_failed(&error);
                flushed.failed += rows.len();
                *failed_chunks += 1;
                return false;
            }
        };
        for (row, outcome) in rows.iter().zip(&report.outcomes) {
            match outcome {
                RowOutcome::Published => {
                    row.mark_published();
                    flushed.published += 1;
                }
                // The table can never hold it: stop offering it (counted once per change).
                RowOutcome::Skipped => {
                    row.mark_published();
                    flushed.skipped += 1;
                }
                RowOutcome::Failed => flushed.failed += 1,
            }
        }
        if let Some(error) = report.errors().next()
            && let Some(suppressed) = self.flush_warnings.allow()
        {
            let chunks = report.errors().count();
            tracing::warn!(%error, chunks, store = self.store.name(), suppressed, "global flush chunks failed; their rows stay pending");
        }
        *failed_chunks += report.errors().count() as u64;
        true
    }

    /// A publish call that failed as a whole (or ran out of the flush's time): warned once
    /// per `repeated_warning_interval`.
    fn flush_failed(&self, error: &StoreError) {
        if let Some(suppressed) = self.flush_warnings.allow() {
            tracing::warn!(%error, store = self.store.name(), suppressed, "global flush failed; rows stay pending");
        }
    }

    /// The flush and sync intervals to use now: divided by the overload of this process's
    /// shared counters over the last ten (longer) intervals, when it reaches `contended_overload`,
    /// up to `contended_speedup` times (see `overload`).
    pub fn intervals(&self) -> (Duration, Duration) {
        let (flush, sync) = (self.settings.flush_interval, self.settings.sync_interval);
        let max = self.settings.contended_speedup.max(1);
        if max == 1 {
            return (flush, sync);
        }
        let span = u64::try_from(flush.max(sync).as_millis())
            .unwrap_or(u64::MAX)
            .saturating_mul(OVERLOAD_SPAN_INTERVALS);
        let ratio = self
            .overload
            .ratio(self.engine.now_ms(), self.engine.shared_decisions(), span);
        let by = speedup(ratio, self.settings.contended_overload, max);
        let faster = |every: Duration| every.div_f64(by).max(every.min(MIN_CONTENDED_INTERVAL));
        (faster(flush), faster(sync))
    }

    /// Delete expired rows; returns how many.
    pub async fn cleanup(&self) -> Option<u64> {
        let started = Instant::now();
        let cleanup = self
            .store
            .cleanup(self.engine.now_ms(), self.settings.cleanup_batch);
        let deleted = match self.within(cleanup).await {
            Ok(deleted) => Some(deleted),
            Err(error) => {
                tracing::warn!(%error, "global cleanup failed");
                None
            }
        };
        self.metrics.global_cleanup(started.elapsed());
        deleted
    }

    /// Flush and sync (and cleanup, when enabled) until `shutdown`, then a final flush.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let now = tokio::time::Instant::now();
        let jitter = self.settings.jitter;
        let mut flush = Cadence::new(self.settings.flush_interval, jitter, now);
        let mut sync = Cadence::new(self.settings.sync_interval, jitter, now);
        let mut cleanup = self
            .settings
            .cleanup_interval
            .map(|every| Cadence::new(every, 0.0, now));
        let (mut flush_backoff, mut sync_backoff) = (Backoff::default(), Backoff::default());
        tokio::pin!(shutdown);
        // The database may be down at start: sync and flush wait for the schema.
        self.ensure_schema().await;
        // Each job's next instant is drawn once and kept until it fires: a `select!` drops the
        // branches that did not fire, so a tick drawn inside it would be lost each time
        // another job ran first (flush and sync then stole each other's ticks, and the slower
        // one could starve).
        let mut next_flush = flush.next(tokio::time::Instant::now(), fastrand::f64());
        let mut next_sync = sync.next(tokio::time::Instant::now(), fastrand::f64());
        let mut next_cleanup = cleanup
            .as_mut()
            .map(|cleanup| cleanup.next(tokio::time::Instant::now(), 0.0));
        // With a contended speedup, contention is looked for at the fast interval, so a long
        // tick already drawn is brought forward when it starts.
        let speedup = self.settings.contended_speedup.max(1);
        let probe_every = self
            .settings
            .flush_interval
            .min(self.settings.sync_interval)
            / speedup;
        let mut next_probe = tokio::time::Instant::now() + probe_every;
        let mut next_onset = tokio::time::Instant::now() + self.onset_wait();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_flush) => {
                    if flush_backoff.should_run() && self.ensure_schema().await {
                        let flushed = self.flush().await;
                        flush_backoff.record(flushed.failed == 0 || flushed.published > 0);
                    }
                    let now = tokio::time::Instant::now();
                    flush.set_interval(self.intervals().0, now);
                    next_flush = flush.next(now, fastrand::f64());
                }
                () = tokio::time::sleep_until(next_sync) => {
                    if sync_backoff.should_run() && self.ensure_schema().await {
                        sync_backoff.record(self.sync().await.is_some());
                    }
                    let now = tokio::time::Instant::now();
                    sync.set_interval(self.intervals().1, now);
                    next_sync = sync.next(now, fastrand::f64());
                }
                () = tokio::time::sleep_until(next_probe), if speedup > 1 => {
                    let now = tokio::time::Instant::now();
                    let (flush_every, sync_every) = self.intervals();
                    if flush_every < flush.interval() {
                        flush.set_interval(flush_every, now);
                        next_flush = next_flush.min(flush.next(now, fastrand::f64()));
                    }
                    if sync_every < sync.interval() {
                        sync.set_interval(sync_every, now);
                        next_sync = next_sync.min(sync.next(now, fastrand::f64()));
                    }
                    next_probe = now + probe_every;
                }
                () = tokio::time::sleep_until(next_onset), if self.onset_enabled() => {
                    if self.ensure_schema().await {
                        self.onset_tick().await;
                    }
                    next_onset = tokio::time::Instant::now() + self.onset_wait();
                }
                // Without a cleanup interval the branch is disabled: its sleep is never polled.
                () = tokio::time::sleep_until(next_cleanup.unwrap_or(now)), if next_cleanup.is_some() => {
                    if self.ensure_schema().await && let Some(deleted) = self.cleanup().await {
                        tracing::debug!(deleted, "expired global rows deleted");
                    }
                    next_cleanup = cleanup
                        .as_mut()
                        .map(|cleanup| cleanup.next(tokio::time::Instant::now(), 0.0));
                }
                _ = &mut shutdown => break,
            }
        }
        if !self.ensure_schema().await {
            tracing::error!("final global flush skipped: the database was never migrated");
            return;
        }
        // The last chance for this region's counts: retry a failed flush (50 ms, doubling)
        // until the timeout; each attempt is bounded by it too.
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let mut pause = Duration::from_millis(50);
        let mut flushed = self.flush().await;
        while flushed.failed > 0 && tokio::time::Instant::now() + pause < deadline {
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2);
            flushed = self.flush().await;
        }
        if flushed.failed > 0 {
            tracing::error!(
                rows = flushed.failed,
                "final global flush failed at shutdown"
            );
        }
    }
}

mod onset;
mod sync;
#[cfg(test)]
mod tests;
