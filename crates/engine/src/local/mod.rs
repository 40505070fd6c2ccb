//! The local decision layer: every decision is taken here, from memory.
//!
//! It knows cells, windows and the regional origin trait; it knows nothing of gRPC, YAML or
//! any particular backend. A warm decision is: find two cells without allocating, one
//! compare-and-swap, done. Cold cells read the origin once (single flight); accepted work is
//! replayed to the origin by a background task.
//!
//! [`Engine`] holds the state; the server deciding calls it (`decide`: `check`, `refund`).
//! Every other concern is a small borrowed view of the parts it needs, in its own file:
//! [`Engine::convergence`] (replay and convergence with the regional origin,
//! `convergence`), [`Engine::publication`] (the global layer's flush and sync,
//! `publication`), [`Engine::penalties`] (the penalty box, `penalty`) and
//! [`Engine::inspection`] (the admin port's reads, `inspect`). This file holds the state,
//! its construction, the table's figures and reaping, and the background loops.
//!
//! The pieces they use:
//! - `check`: the hot path's result (`Engine::check`, `check_with_penalty`): a warm verdict
//!   taken synchronously, or the boxed slow path of a cold cell or a refresh; `.await` gives
//!   the verdict either way.
//! - `window` (window math), `decision` (the sliding-window decision), `retry` (the exact
//!   wait of a denied request: closed form, brute-force tested).
//! - `cell`: `WindowCell`, a PN-counter per layer with CAS consume, capped refunds, `max`
//!   merges and a freshness deadline, shared as a `SharedCell` (`triomphe::Arc`: no weak
//!   count); `cell::sealed` remembers the previous window's total while no cell changed.
//! - `table`: the cell table bounded in bytes and cells, its eviction order and incremental
//!   reaping; `budget`: the byte budget of everything keyed by a cell.
//! - `replay`: batching with a queue bounded in entries and bytes, cancellation-safe (a
//!   dropped replay queues its unsettled cells again); `refresh`: single-flight refreshes.
//! - `strict` (strict mode after a denial), `penalty` (the penalty box, shared with the
//!   region through the origin), `rights` (`never_above` limits on an origin other processes
//!   share: each admission spends a right taken from it), `clock`, `deadlines`.
//! - `inspect`: `InspectedCounter` (filled in by the server, served by its admin port) and
//!   the sampled Space-Saving heavy-hitters sketch.

mod admitted;
mod budget;
mod cell;
mod check;
mod clock;
mod components;
mod convergence;
mod deadlines;
mod decide;
mod decision;
mod inspect;
mod onset;
mod penalty;
mod publication;
mod refresh;
mod replay;
mod retry;
mod rights;
mod strict;
mod table;
mod window;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub use budget::{CELL_OVERHEAD_BYTES, CellBudget, GHOST_ALLOCATION, GHOST_BYTES};
pub use cell::WindowCell;
pub use check::{Check, CheckFuture, SlowCheck};
pub use clock::{Clock, ManualClock, SystemClock};
pub use convergence::Convergence;
pub use decision::{Decision, WindowCounts, decide};
pub use inspect::{
    CellView, CounterState, HeavyHitter, InspectedCounter, Inspection, SAMPLE_EVERY,
    SKETCH_CAPACITY,
};
pub use onset::OnsetWatch;
pub use penalty::Penalties;
pub use publication::{CellGrowth, Publication, Publishable, PublishableWalk};
pub use retry::until_pass_ms;
pub use table::Reaped;
pub use window::{WindowPosition, Windows};

use decide::current_key;

use crate::cell_key::{CellKey, CounterKeyRef};
use crate::recorder::Recorder;
use crate::regional::RegionalOrigin;
use crate::sharded::ShardedCount;
use crate::throttle::Throttle;
use cell::SharedCell;
use components::ForeignComponents;
use inspect::HeavyHitters;
use penalty::PenaltyBox;
use refresh::RefreshGate;
use replay::ReplayQueue;
use rights::HeldRights;
use strict::StrictMode;
use table::CellTable;

/// How long a decision waits for another caller's read of the same cell before deciding
/// from memory. Above any sane origin read timeout: normally the read ends first.
pub(super) const FOLLOWER_MAX_WAIT: Duration = Duration::from_secs(1);

/// The default of `--max-cell-bytes`: 256 MiB. With the in-process origin (~50 MiB at 1M
/// components) and the runtime, the service stays well inside the 512 MiB limit of the
/// Kubernetes manifest.
pub const DEFAULT_MAX_CELL_BYTES: u64 = 256 * 1_024 * 1_024;

/// Engine tuning. The defaults are the production values.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Cap on evictable cells; least recently used go first. Cells protected from eviction
    /// come on top, bounded by their share of `max_cell_bytes`.
    pub max_cells: usize,
    /// Cap on the bytes held by everything keyed by a cell (table, protected cells, replay
    /// queue, strict mode), shared out by [`CellBudget`].
    pub max_cell_bytes: u64,
    /// The weight of the largest cell a request can make (its key's strings included): the
    /// table's shards are sized to hold many of them.
    pub largest_cell_bytes: u64,
    /// How often accepted work is replayed to the regional origin.
    pub replay_interval: Duration,
    /// Cells per replay round trip.
    pub replay_batch: usize,
    /// Cap on cells waiting for replay (overflow stays in the cell and is counted).
    pub max_pending_replay: usize,
    /// How often cells older than the previous window are dropped.
    pub reap_interval: Duration,
    /// How long a cell's regional count is trusted after a read or replay; past it the next
    /// decision reads the origin first. `None` when the origin is this process (in-process):
    /// there is nobody else to converge with, so cells never go stale and strict mode is off.
    pub freshness: Option<Duration>,
    /// At shutdown, how long the final replay may keep trying (through an open circuit).
    pub final_replay_timeout: Duration,
    /// A repeated warning ("replay failed") is logged once per this interval.
    pub repeated_warning_interval: Duration,
    /// How decisions read a counter's cells: sliding (ours) or fixed (upstream's).
    pub windows: Windows,
    /// Denied hits are counted as hits (as envoyproxy/ratelimit increments its counter on
    /// every request): a client that keeps calling over the limit keeps its counter growing.
    pub count_denied: bool,
    /// How far any process's clock may be from true time, for `never_above` limits decided
    /// from rights: a right of a cell is spent only while this process's clock is at least
    /// this far inside the cell, and a take weighs the previous cell as if it were this much
    /// earlier, so that every admission falls in the cell its right was taken for on any
    /// clock within the margin (`local::rights`). Zero: the clocks agree.
    pub clock_skew: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_cells: 1_000_000,
            max_cell_bytes: DEFAULT_MAX_CELL_BYTES,
            largest_cell_bytes: CELL_OVERHEAD_BYTES + 32 * 1_024,
            replay_interval: Duration::from_millis(100),
            replay_batch: 1_000,
            max_pending_replay: 100_000,
            reap_interval: Duration::from_secs(5),
            freshness: None,
            final_replay_timeout: Duration::from_secs(5),
            repeated_warning_interval: Duration::from_secs(10),
            windows: Windows::Sliding,
            count_denied: false,
            clock_skew: Duration::ZERO,
        }
    }
}

/// One limited descriptor to decide: its counter identity (without the sequence, which the
/// engine derives from the clock), its limit and its cost.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    pub counter: CounterKeyRef<'a>,
    pub limit: u64,
    /// 0 checks without consuming.
    pub cost: u64,
    /// The limit must never be exceeded (`guarantee: never_above`), even by an accept that
    /// reaches its cell after a later window already read the cell's total (a thread delayed
    /// across the boundary): such an accept is withdrawn and the hit decided again, at the
    /// time it is decided now.
    pub exact: bool,
}

/// The engine's answer for one hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u64,
    /// Allowed: milliseconds until the current cell ends (as upstream). Denied: until a
    /// request of the same cost would pass, assuming no more hits (the sliding window's exact
    /// `Retry-After`, see `retry`), or until the penalty box lets the counter out, whichever
    /// is later. With fixed windows: until the current cell ends, in upstream's whole
    /// seconds, allowed or not.
    pub until_reset_ms: u64,
    /// The count the decision saw before this hit (the current cell's with fixed windows,
    /// the sliding estimate otherwise); `u64::MAX` when the penalty box decided. Upstream's
    /// over- and near-limit stats split a hit by it.
    pub seen: u64,
}

pub struct Engine {
    settings: EngineSettings,
    table: CellTable,
    replay: ReplayQueue,
    strict: StrictMode,
    penalties: PenaltyBox,
    /// Rights of `never_above` counters taken from a shared origin or keeper (`rights`).
    rights: HeldRights,
    /// Where rights are taken when not from the origin: the global counters' store, set once
    /// they run (`keep_rights_in`).
    rights_keeper: std::sync::OnceLock<Arc<dyn crate::regional::RightsKeeper>>,
    /// The other regions' components of the cells sync read (`components`).
    components: ForeignComponents,
    hitters: HeavyHitters,
    refresh_gate: RefreshGate,
    origin: Arc<dyn RegionalOrigin>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Recorder>,
    replay_warnings: Throttle,
    /// The origin's [`epoch`](RegionalOrigin::epoch) when its cells were last republished.
    origin_epoch: AtomicU64,
    /// When this process last denied a hit on a cell another region also counts (0: never).
    /// The global counters flush and sync faster while it is recent (`GlobalSettings::
    /// contended_speedup`): that is when the delay before regions hear of each other is
    /// what lets them over-admit (ACCURACY.md).
    contended_at_ms: AtomicU64,
    /// Decisions on cells another region also counts, admitted and denied (cumulative): their
    /// ratio tells the global counters how far over its limit a shared counter is offered,
    /// which is what the delay before regions hear of each other multiplies (ACCURACY.md).
    /// Sharded: written on every decision on a shared cell, by every core.
    shared_admitted: ShardedCount,
    shared_denied: ShardedCount,
    /// Cells whose unpublished count grows fast: the global counters publish and sync them
    /// at a fast cadence (`GlobalSettings::onset_fraction`).
    onset: OnsetWatch,
}

/// One structure's bytes against its budget ([`Engine::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBytes {
    /// `cells` (the cell table: evictable and protected cells), `replay_queue`,
    /// `strict_mode`, `penalty_box`, `rights` or `foreign_components`.
    pub pool: &'static str,
    pub bytes: u64,
    pub budget: u64,
}

/// [`Engine::shared_decisions`]: decisions on cells another region also counts, since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SharedDecisions {
    pub admitted: u64,
    pub denied: u64,
}

impl Engine {
    pub fn new(
        settings: EngineSettings,
        origin: Arc<dyn RegionalOrigin>,
        clock: Arc<dyn Clock>,
        metrics: Arc<dyn Recorder>,
    ) -> Self {
        let budget = CellBudget::new(settings.max_cells, settings.max_cell_bytes)
            .with_origin(origin.bytes_per_cell(), origin.holds_live_cells());
        // An origin that holds no live cells keeps each cell's count as the table evicts it.
        let keeper = (!origin.holds_live_cells()).then(|| Arc::clone(&origin));
        Self {
            table: CellTable::new(budget, settings.largest_cell_bytes, keeper),
            replay: ReplayQueue::new(
                settings.max_pending_replay,
                budget.replay_bytes,
                settings.replay_batch,
            ),
            strict: StrictMode::new(budget.strict_bytes),
            penalties: PenaltyBox::new(budget.penalty_bytes),
            rights: HeldRights::new(budget.rights_bytes),
            rights_keeper: std::sync::OnceLock::new(),
            components: ForeignComponents::new(budget.components_bytes),
            hitters: HeavyHitters::default(),
            refresh_gate: RefreshGate::default(),
            replay_warnings: Throttle::new(settings.repeated_warning_interval),
            origin_epoch: AtomicU64::new(origin.epoch()),
            contended_at_ms: AtomicU64::new(0),
            shared_admitted: ShardedCount::default(),
            shared_denied: ShardedCount::default(),
            onset: OnsetWatch::default(),
            settings,
            origin,
            clock,
            metrics,
        }
    }

    /// How decisions read a counter's cells.
    pub fn windows(&self) -> Windows {
        self.settings.windows
    }

    /// Whether denied hits are counted (see [`EngineSettings::count_denied`]).
    pub fn counts_denied(&self) -> bool {
        self.settings.count_denied
    }

    /// How far any process's clock may be from true time (see
    /// [`EngineSettings::clock_skew`]): the margin a layer that hands out rights of a cell
    /// keeps from the cell's ends.
    pub fn clock_skew(&self) -> Duration {
        self.settings.clock_skew
    }

    /// The engine's clock, for the layers that work beside it.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Drop cells that no decision reads any more, a slice at a time (decisions run between
    /// slices, see `CellTable::reap_closing`); no walk at all while no cell can have expired.
    /// Returns how many were dropped.
    pub async fn reap(&self) -> usize {
        self.reap_counted().await.removed
    }

    /// [`Engine::reap`], also telling how many cells it looked at (0: it did not walk).
    pub async fn reap_counted(&self) -> Reaped {
        let close = |key: &CellKey, cell: &SharedCell| self.queue_closing(key, cell);
        self.table.reap_closing(self.clock.now_ms(), &close).await
    }

    /// Queue an expired cell's closing replay: its cumulative count again (a resend is
    /// harmless; zero for a cell this process holds without counting in it, which the origin
    /// keeps as it is), which reads back the region's final total of the cell, counts the
    /// other processes added after this one's last read included (see
    /// `CellTable::reap_closing`).
    fn queue_closing(&self, key: &CellKey, cell: &SharedCell) {
        if !cell.requeue() {
            return;
        }
        if !self.replay.push(key.clone(), SharedCell::clone(cell)) {
            cell.mark_overflowed();
            self.replay.note_overflow();
            self.metrics.replay_overflow();
        }
    }

    /// Which shard of the cell table holds `hit`'s current cell. For benchmarks that place
    /// keys on purpose (two threads whose keys share a shard and its lock); not an interface.
    #[doc(hidden)]
    pub fn table_shard(&self, hit: &Hit<'_>) -> usize {
        let position = WindowPosition::at(self.clock.now_ms(), hit.counter.duration_ms);
        self.table.shard_of(&current_key(hit, &position))
    }

    pub fn live_cells(&self) -> usize {
        self.table.len()
    }

    /// Bytes of protected cells (at or near their limit, or holding unreplayed work).
    pub fn protected_cell_bytes(&self) -> u64 {
        self.table.protected_bytes()
    }

    /// Weight of the evictable cells.
    pub fn evictable_cell_bytes(&self) -> u64 {
        self.table.evictable_bytes()
    }

    pub fn pending_replay_cells(&self) -> usize {
        self.replay.len()
    }

    /// What each structure keyed by a cell holds against its share of `max_cell_bytes`
    /// (see [`CellBudget`]), as the structures weigh their entries (the cell table with the
    /// slots its ghosts hold): for a metrics scrape.
    pub fn memory(&self) -> [PoolBytes; 6] {
        let budget = CellBudget::new(self.settings.max_cells, self.settings.max_cell_bytes);
        let pool = |pool, (bytes, budget)| PoolBytes {
            pool,
            bytes,
            budget,
        };
        [
            pool(
                "cells",
                (
                    self.table
                        .evictable_bytes()
                        .saturating_add(self.table.protected_bytes())
                        .saturating_add(self.table.ghost_bytes())
                        .saturating_add(self.origin.kept_bytes()),
                    budget.table_bytes.saturating_add(budget.protected_bytes),
                ),
            ),
            pool("replay_queue", self.replay.bytes()),
            pool("strict_mode", self.strict.bytes()),
            pool("penalty_box", self.penalties.bytes()),
            pool("rights", self.rights.bytes()),
            pool(
                "foreign_components",
                (self.components.bytes(), self.components.max_bytes()),
            ),
        ]
    }

    /// The replay and reaping loops. They stop when `shutdown` resolves, after a last replay.
    pub async fn run_background(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let mut replay = tokio::time::interval(self.settings.replay_interval);
        let mut reap = tokio::time::interval(self.settings.reap_interval);
        replay.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = replay.tick() => {
                    let convergence = self.convergence();
                    convergence.republish_after_origin_change().await;
                    convergence.replay_now().await;
                    convergence.recover_overflowed().await;
                    self.give_back_rights(false).await;
                }
                _ = self.replay.batch_ready() => self.convergence().replay_now().await,
                _ = reap.tick() => {
                    let reaped = self.reap_counted().await;
                    tracing::trace!(reaped = reaped.removed, visited = reaped.visited, live = self.live_cells(), "reaped old cells");
                    if reaped.unpublished > 0 {
                        tracing::warn!(cells = reaped.unpublished, "expired cells dropped with counts the global flush never took: the database was unreachable for a whole window");
                    }
                }
                _ = &mut shutdown => break,
            }
        }
        let unpublished = self.convergence().final_replay().await;
        self.give_back_rights(true).await;
        if unpublished > 0 {
            tracing::error!(
                cells = unpublished,
                origin = self.origin.name(),
                "final replay failed at shutdown: these cells' counts never reached the region"
            );
        }
    }
}

#[cfg(test)]
mod fixed_tests;
#[cfg(test)]
pub(crate) mod tests;
