//! The local engine: every decision is taken here, from memory.
//!
//! It knows cells, windows and the regional origin trait; it knows nothing of gRPC, YAML or
//! any particular backend. A warm decision is: find two cells without allocating, one
//! compare-and-swap, done. Cold cells read the origin once (single flight); accepted work is
//! replayed to the origin by a background task.

mod budget;
mod cell;
mod check;
mod clock;
mod deadlines;
mod decision;
mod inspect;
mod penalty;
mod refresh;
mod replay;
mod retry;
mod strict;
mod table;
mod window;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use budget::{CELL_OVERHEAD_BYTES, CellBudget};
pub use cell::WindowCell;
pub use check::{Check, CheckFuture, SlowCheck};
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::{Decision, WindowCounts, decide};
pub use inspect::{
    CellView, CounterState, HeavyHitter, InspectedCounter, SAMPLE_EVERY, SKETCH_CAPACITY,
};
pub use retry::until_pass_ms;
pub use table::Reaped;
pub use window::WindowPosition;

use crate::cell_key::{CellKey, CellKeyRef, CounterKey, CounterKeyRef};
use crate::pn::PnCount;
use crate::recorder::{DecisionSource, OriginOp, Recorder};
use crate::regional::{CellRead, OriginFuture};
use crate::regional::{CircuitState, RegionalOrigin};
use crate::sharded::ShardedCount;
use crate::throttle::Throttle;
use cell::{ReplayNeed, SharedCell};
use inspect::HeavyHitters;
use penalty::PenaltyBox;
use refresh::{RefreshGate, Turn};
use replay::ReplayQueue;
use strict::StrictMode;
use table::{CellTable, Lookup};

/// How long a decision waits for another caller's read of the same cell before deciding
/// from memory. Above any sane origin read timeout: normally the read ends first.
const FOLLOWER_MAX_WAIT: Duration = Duration::from_secs(1);

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
}

/// A cell's regional count on its way to the global counters.
pub struct Publishable {
    pub key: CellKey,
    /// The region's hits and refunds of the cell.
    pub count: PnCount,
    cell: SharedCell,
}

impl Publishable {
    /// Call only after the row was written: a failed write leaves the cell to publish again.
    pub fn mark_published(&self) {
        self.cell.mark_published(self.count);
    }
}

/// A walk of the cell table for [`Publishable`] cells, a chunk at a time
/// ([`Engine::publishable_walk`]). Cells created or changed while it runs may or may not be
/// seen; a later walk sees them (a cell stays publishable until it is marked published).
pub struct PublishableWalk<'a> {
    cells: Box<dyn Iterator<Item = (CellKey, SharedCell)> + Send + 'a>,
    floor: f64,
    /// Cells visited so far: the walk yields to the runtime every `table::WALK_SLICE`.
    visited: usize,
}

impl PublishableWalk<'_> {
    /// The next publishable cells, at most `max` of them; empty once the table is walked.
    pub async fn next_chunk(&mut self, max: usize) -> Vec<Publishable> {
        let mut rows = Vec::with_capacity(max.min(table::WALK_SLICE));
        while rows.len() < max {
            let Some((key, cell)) = self.cells.next() else {
                break;
            };
            self.visited += 1;
            if self.visited.is_multiple_of(table::WALK_SLICE) {
                tokio::task::yield_now().await;
            }
            if let Some(count) = cell.to_publish(self.floor) {
                rows.push(Publishable { key, count, cell });
            }
        }
        rows
    }
}

/// The engine's answer for one hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u64,
    /// Allowed: milliseconds until the current cell ends (as upstream). Denied: until a
    /// request of the same cost would pass, assuming no more hits (the sliding window's exact
    /// `Retry-After`, see `retry`), or until the penalty box lets the counter out, whichever
    /// is later.
    pub until_reset_ms: u64,
}

pub struct Engine {
    settings: EngineSettings,
    table: CellTable,
    replay: ReplayQueue,
    strict: StrictMode,
    penalties: PenaltyBox,
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
}

/// One structure's bytes against its budget ([`Engine::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBytes {
    /// `cells` (the cell table: evictable and protected cells), `replay_queue`,
    /// `strict_mode` or `penalty_box`.
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
        let budget = CellBudget::new(settings.max_cells, settings.max_cell_bytes);
        Self {
            table: CellTable::new(budget, settings.largest_cell_bytes),
            replay: ReplayQueue::new(
                settings.max_pending_replay,
                budget.replay_bytes,
                settings.replay_batch,
            ),
            strict: StrictMode::new(budget.strict_bytes),
            penalties: PenaltyBox::new(budget.penalty_bytes),
            hitters: HeavyHitters::default(),
            refresh_gate: RefreshGate::default(),
            replay_warnings: Throttle::new(settings.repeated_warning_interval),
            origin_epoch: AtomicU64::new(origin.epoch()),
            contended_at_ms: AtomicU64::new(0),
            shared_admitted: ShardedCount::default(),
            shared_denied: ShardedCount::default(),
            settings,
            origin,
            clock,
            metrics,
        }
    }

    /// Decide one hit; `.await` the [`Check`] for the verdict. Never fails: an origin that
    /// cannot be read degrades to local counts.
    ///
    /// A warm decision is taken here, before the caller awaits (see [`Check`]); only a cold
    /// cell or a refresh returns a future to await.
    #[inline]
    pub fn check<'a>(&'a self, hit: Hit<'a>) -> Check<'a> {
        self.check_with_penalty(hit, 0)
    }

    /// [`check`](Self::check) for a rule with a penalty box: a denial holds the counter
    /// denied for `penalty_ms` (in this process at once, in the region's other processes
    /// once they read the origin: a cold cell, a refresh). 0: no penalty.
    pub fn check_with_penalty<'a>(&'a self, hit: Hit<'a>, penalty_ms: u64) -> Check<'a> {
        let now_ms = self.clock.now_ms();
        if penalty_ms > 0
            && let Some(until) = self.penalties.held_until(&hit.counter, now_ms)
        {
            self.hitters.offer(&hit.counter, hit.limit);
            self.metrics.decision_source(DecisionSource::Local);
            return Check::Ready(penalized(now_ms, until));
        }
        let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
        let key = current_key(&hit, &position);
        // The warm path: the current cell in memory, nothing to refresh, and the previous
        // window's total remembered in it (one lookup) or its cell in memory (two). It awaits
        // nothing.
        if let Some(current) = self.table.get(&key)
            && self.refresh_needed(&current, &key, now_ms).is_none()
            && let Some(previous) = self.previous_total(&current, &key, &position)
        {
            let verdict = self.consume(
                &hit,
                &key,
                &position,
                previous,
                &current,
                DecisionSource::Local,
            );
            return Check::Ready(self.penalize_denial(verdict, &hit, penalty_ms, now_ms));
        }
        // Boxed: the slow path's future is large, and rare.
        Check::Slow(Box::pin(
            self.check_slow(hit, key, position, now_ms, penalty_ms),
        ))
    }

    /// Give back `hit.cost` of what this process consumed of the counter (a refund, e.g. the
    /// unused part of a reservation), and answer with what is left of the limit after it.
    ///
    /// The refund rule ([`PnCount::capped`]): a process refunds at most what it consumed
    /// itself in a cell. The current cell is refunded first, what is left from the previous
    /// cell (a reservation made before the window rolled over), and anything beyond is not
    /// refunded: a refund can give budget back, never create any. Never fails; a cold cell
    /// is read from the origin first (to learn this process's component), as for a decision.
    pub async fn refund(&self, hit: Hit<'_>) -> Verdict {
        let now_ms = self.clock.now_ms();
        let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
        let key = current_key(&hit, &position);
        let mut source = DecisionSource::Local;
        let current = self.cell(key, now_ms, &mut source).await;
        let (given, need) = current.refund(hit.cost, self.table.changes());
        self.queue_replay(need, &key, &current);
        let mut left = hit.cost.saturating_sub(given);
        let previous_total = match position.previous_sequence() {
            Some(sequence) => {
                let previous_key = key.with_sequence(sequence);
                let previous = self.cell(previous_key, now_ms, &mut source).await;
                if left > 0 {
                    let (given, need) = previous.refund(left, self.table.changes());
                    self.queue_replay(need, &previous_key, &previous);
                    left = left.saturating_sub(given);
                }
                previous.total()
            }
            None => 0,
        };
        self.metrics.refund(hit.cost.saturating_sub(left), left);
        let decision = decide(
            current.total(),
            previous_total,
            position.elapsed_ms,
            position.duration_ms,
            0,
            hit.limit,
        );
        Verdict {
            allowed: true,
            remaining: decision.remaining,
            until_reset_ms: position.until_reset_ms(),
        }
    }

    /// Put a cell whose work waits for replay in the queue (or mark it overflowed).
    fn queue_replay(&self, need: ReplayNeed, key: &CellKeyRef<'_>, cell: &SharedCell) {
        if need == ReplayNeed::Enqueue
            && !self
                .replay
                .push(key.to_owned_key(), SharedCell::clone(cell))
        {
            cell.mark_overflowed();
            self.metrics.replay_overflow();
        }
    }

    /// A cold cell (seeded from the origin) or a refresh before deciding.
    async fn check_slow(
        &self,
        hit: Hit<'_>,
        key: CellKeyRef<'_>,
        position: WindowPosition,
        now_ms: u64,
        penalty_ms: u64,
    ) -> Verdict {
        if penalty_ms > 0
            && let Some(until) = self.region_penalty(&hit.counter, now_ms).await
        {
            self.metrics.decision_source(DecisionSource::Origin);
            return penalized(now_ms, until);
        }
        let mut source = DecisionSource::Local;
        let previous = match position.previous_sequence() {
            Some(sequence) => Some(
                self.cell(key.with_sequence(sequence), now_ms, &mut source)
                    .await,
            ),
            None => None,
        };
        let current = self.cell(key, now_ms, &mut source).await;
        let previous = previous.map_or((0, false), |previous| {
            current.remember_previous(&previous, self.table.changes())
        });
        if let Some(freshness) = self.settings.freshness
            && let Some(op) = self.refresh_needed(&current, &key, now_ms)
            && self.refresh(&current, &key, op, now_ms, freshness).await
        {
            source = DecisionSource::Origin;
        }
        let verdict = self.consume(&hit, &key, &position, previous, &current, source);
        self.penalize_denial(verdict, &hit, penalty_ms, now_ms)
    }

    /// A denial on a rule with a penalty puts the counter in the box (here at once, in the
    /// region with the next replay cycle): it answers the penalty's length if that is later
    /// than the window's own wait.
    fn penalize_denial(
        &self,
        verdict: Verdict,
        hit: &Hit<'_>,
        penalty_ms: u64,
        now_ms: u64,
    ) -> Verdict {
        if verdict.allowed || penalty_ms == 0 {
            return verdict;
        }
        self.penalties
            .enter(&hit.counter, now_ms.saturating_add(penalty_ms), true);
        Verdict {
            until_reset_ms: verdict.until_reset_ms.max(penalty_ms),
            ..verdict
        }
    }

    /// Whether the region holds the counter in its penalty box (another process put it
    /// there): taken into this process's box, and until when. A failed read: not held (the
    /// local box and the window decide).
    async fn region_penalty(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> Option<u64> {
        let owned = counter.to_owned_key();
        let started = std::time::Instant::now();
        let read = self.origin.penalty_until(&owned).await;
        self.metrics
            .origin_call(OriginOp::Cold, read.is_ok(), started.elapsed());
        match read {
            Ok(until) if now_ms < until => {
                self.penalties.enter(counter, until, false);
                Some(until)
            }
            Ok(_) => None,
            Err(error) => {
                tracing::debug!(%error, origin = self.origin.name(), "penalty read failed; deciding locally");
                None
            }
        }
    }

    /// The previous window's total and whether another region counts in it, for a decision
    /// in `current`: remembered in the current cell while still valid, else read from the
    /// previous cell (and remembered for the next decisions). `None`: the previous cell is not
    /// in memory (the slow path reads it from the origin).
    fn previous_total(
        &self,
        current: &WindowCell,
        key: &CellKeyRef<'_>,
        position: &WindowPosition,
    ) -> Option<(u64, bool)> {
        let Some(sequence) = position.previous_sequence() else {
            return Some((0, false));
        };
        if let Some(remembered) = current.previous(self.table.changes()) {
            return Some(remembered);
        }
        let previous = self.table.get(&key.with_sequence(sequence))?;
        Some(current.remember_previous(&previous, self.table.changes()))
    }

    /// Why the cell must be read from the origin before deciding, if it must.
    fn refresh_needed(
        &self,
        cell: &WindowCell,
        key: &CellKeyRef<'_>,
        now_ms: u64,
    ) -> Option<OriginOp> {
        self.settings.freshness?;
        if self.strict.is_strict(&key.counter, now_ms) {
            Some(OriginOp::Strict)
        } else if cell.is_stale(now_ms) {
            Some(OriginOp::Stale)
        } else {
            None
        }
    }

    /// Decide from memory, consume on accept, and queue the cell for replay. `previous` is
    /// the previous cell's total and whether another region counts in it.
    fn consume(
        &self,
        hit: &Hit<'_>,
        key: &CellKeyRef<'_>,
        position: &WindowPosition,
        (previous_total, previous_shared): (u64, bool),
        current: &SharedCell,
        source: DecisionSource,
    ) -> Verdict {
        let now_ms = position.now_ms();
        self.hitters.offer(&key.counter, hit.limit);
        let (decision, need) = current.try_consume(
            previous_total,
            position.elapsed_ms,
            position.duration_ms,
            hit.cost,
            hit.limit,
            self.table.changes(),
        );
        self.queue_replay(need, key, current);
        // Early in a window the current cell has no foreign count yet: the previous one's
        // tells that the limit is shared. A peek (cost 0) is no demand: not counted.
        if hit.cost > 0 && (current.global() > 0 || previous_shared) {
            self.note_shared(decision.allowed, now_ms);
        }
        if !decision.allowed && self.settings.freshness.is_some() {
            self.strict
                .enter(&key.counter, now_ms.saturating_add(position.duration_ms));
        }
        self.metrics.decision_source(source);
        if decision.allowed {
            return Verdict {
                allowed: true,
                remaining: decision.remaining,
                until_reset_ms: position.until_reset_ms(),
            };
        }
        // Denied: nothing was consumed, so the cell's count now is what the decision saw
        // (give or take a concurrent accept).
        let counts = WindowCounts {
            current: current.total(),
            previous: previous_total,
            elapsed_ms: position.elapsed_ms,
            duration_ms: position.duration_ms,
        };
        let until_pass = until_pass_ms(counts, hit.cost, hit.limit)
            // A cost above the limit never passes: the end of the cell, as before.
            .unwrap_or_else(|| position.until_reset_ms());
        Verdict {
            allowed: false,
            remaining: decision.remaining,
            until_reset_ms: until_pass,
        }
    }

    /// A warm cell straight from memory; a cold one seeded from the regional origin (one read
    /// shared by concurrent callers).
    async fn cell(
        &self,
        key: CellKeyRef<'_>,
        now_ms: u64,
        source: &mut DecisionSource,
    ) -> SharedCell {
        if let Some(cell) = self.table.get(&key) {
            return cell;
        }
        let owned = key.to_owned_key();
        match self.table.get_or_guard(&owned).await {
            Lookup::Warm(cell) => cell,
            Lookup::Cold(guard) => {
                let started = std::time::Instant::now();
                let read = self.origin.read(&owned).await;
                self.metrics
                    .origin_call(OriginOp::Cold, read.is_ok(), started.elapsed());
                let cell = match read {
                    Ok(read) => {
                        *source = DecisionSource::Origin;
                        let cell = WindowCell::seeded(read.total, read.own);
                        cell.mark_fresh_until(self.fresh_until(now_ms));
                        cell
                    }
                    Err(error) => {
                        tracing::debug!(%error, origin = self.origin.name(), "cold read failed; deciding locally");
                        WindowCell::default()
                    }
                };
                let cell = SharedCell::new(cell);
                self.table.fill(guard, &owned, SharedCell::clone(&cell));
                cell
            }
        }
    }

    /// Read the cell's regional total before deciding. One read per cell is in flight;
    /// concurrent callers wait for it (bounded) and decide from the refreshed value.
    /// Returns whether this call's decision is based on a read that succeeded.
    async fn refresh(
        &self,
        cell: &WindowCell,
        key: &CellKeyRef<'_>,
        op: OriginOp,
        now_ms: u64,
        freshness: Duration,
    ) -> bool {
        let leader = match self.refresh_gate.enter(cell, FOLLOWER_MAX_WAIT).await {
            Turn::Leader(leader) => leader,
            Turn::Followed => return !cell.is_stale(now_ms),
        };
        let owned = key.to_owned_key();
        let started = std::time::Instant::now();
        let read = self.origin.read(&owned).await;
        self.metrics
            .origin_call(op, read.is_ok(), started.elapsed());
        let ok = match read {
            Ok(read) => {
                cell.merge_regional(read.total, self.table.changes());
                cell.merge_own(read.own, self.table.changes());
                cell.mark_fresh_until(now_ms.saturating_add(freshness.as_millis() as u64));
                true
            }
            Err(error) => {
                tracing::debug!(%error, ?op, origin = self.origin.name(), "origin read failed; deciding locally");
                false
            }
        };
        leader.finish();
        ok
    }

    /// When a cell read or replayed now stops being fresh.
    fn fresh_until(&self, now_ms: u64) -> u64 {
        match self.settings.freshness {
            Some(freshness) => now_ms.saturating_add(freshness.as_millis() as u64),
            None => u64::MAX,
        }
    }

    /// Replay everything pending now.
    pub async fn replay_now(&self) {
        self.replay_to(self.origin.as_ref()).await;
    }

    async fn replay_to(&self, origin: &dyn RegionalOrigin) {
        self.send_penalties(origin).await;
        let started = std::time::Instant::now();
        let now_ms = self.clock.now_ms();
        let replayed = self
            .replay
            .replay(origin, self.fresh_until(now_ms), self.table.changes())
            .await;
        for &cells in &replayed.batches {
            self.metrics.replay_batch(cells);
        }
        if !replayed.batches.is_empty() || replayed.error.is_some() {
            self.metrics.origin_call(
                OriginOp::Replay,
                replayed.error.is_none(),
                started.elapsed(),
            );
        }
        if let Some(error) = replayed.error
            && let Some(suppressed) = self.replay_warnings.allow()
        {
            tracing::warn!(%error, origin = self.origin.name(), suppressed, "replay failed; work kept for the next cycle");
        }
    }

    /// Send the penalties entered since the last cycle to the region. A failure keeps them
    /// for the next cycle (bounded); meanwhile they hold in this process only.
    ///
    /// Cancellation-safe as the replay is: dropped before the origin answered, the penalties
    /// go back to the pending list.
    async fn send_penalties(&self, origin: &dyn RegionalOrigin) {
        let mut sending = PenaltiesInFlight {
            engine: self,
            penalties: self.penalties.take_pending(),
        };
        if sending.penalties.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let sent = origin.penalize(&sending.penalties).await;
        self.metrics
            .origin_call(OriginOp::Replay, sent.is_ok(), started.elapsed());
        match sent {
            // Sent: nothing to give back on drop.
            Ok(()) => sending.penalties.clear(),
            Err(error) => {
                tracing::debug!(%error, origin = self.origin.name(), "sending penalties failed; they hold locally");
            }
        }
    }

    /// Until when this process holds the counter in its penalty box, if it does now.
    pub fn penalty_until(&self, counter: &CounterKeyRef<'_>) -> Option<u64> {
        self.penalties.held_until(counter, self.clock.now_ms())
    }

    /// What the engine holds for `counter` now (for inspection): its two cells if in memory,
    /// strict mode, the penalty box. Reads only; creates nothing, reads no origin.
    pub fn inspect(&self, counter: &CounterKeyRef<'_>) -> CounterState {
        let now_ms = self.clock.now_ms();
        let position = WindowPosition::at(now_ms, counter.duration_ms);
        let view = |sequence: u64| {
            let key = CellKeyRef::new(
                counter.workspace,
                counter.namespace,
                counter.identifier,
                position.duration_ms,
                sequence,
            );
            self.table.get(&key).map(|cell| CellView {
                regional: cell.regional(),
                global: cell.global(),
                own: cell.own(),
            })
        };
        CounterState {
            now_ms,
            duration_ms: position.duration_ms,
            elapsed_ms: position.elapsed_ms,
            current: view(position.sequence),
            previous: position.previous_sequence().and_then(view),
            strict: self.strict.is_strict(counter, now_ms),
            penalty_until_ms: self.penalties.held_until(counter, now_ms),
        }
    }

    /// The busiest counters of late (a sampled heavy-hitters sketch of at most
    /// [`SKETCH_CAPACITY`] entries), most sampled first.
    pub fn heavy_hitters(&self) -> Vec<HeavyHitter> {
        self.hitters.snapshot()
    }

    /// The final replay at shutdown: everything pending and every overflowed cell, tried
    /// through an open circuit breaker and again after a failure (50 ms, doubling to 1 s) until
    /// `final_replay_timeout`. Returns the cells still unreplayed in the queue.
    pub async fn final_replay(&self) -> usize {
        let deadline = tokio::time::Instant::now() + self.settings.final_replay_timeout;
        let last_chance = FinalAttempt {
            origin: Arc::clone(&self.origin),
            deadline,
        };
        let mut pause = Duration::from_millis(50);
        loop {
            self.replay_to(&last_chance).await;
            let left = self.pending_replay_cells();
            if left == 0 {
                // The queue is empty: bring back the cells that overflowed it, and go again.
                if self.recover_overflowed().await > 0 {
                    continue;
                }
                return 0;
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return left;
            }
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2).min(Duration::from_secs(1));
        }
    }

    /// Cells whose regional count is worth publishing to the global counters: at or above
    /// `floor × limit` (skipped first, the cheap test) and changed since the last successful
    /// publication.
    ///
    /// A walk of the whole table, so it yields to the runtime every `table::WALK_SLICE`
    /// cells, as the reaper does: with one worker it must not hold the only thread. It
    /// gathers every row at once; the global flush takes them a chunk at a time instead
    /// ([`publishable_walk`](Self::publishable_walk)).
    pub async fn publishable(&self, floor: f64) -> Vec<Publishable> {
        let mut walk = self.publishable_walk(floor);
        let mut rows = Vec::new();
        loop {
            let chunk = walk.next_chunk(usize::MAX).await;
            if chunk.is_empty() {
                return rows;
            }
            rows.extend(chunk);
        }
    }

    /// The walk of [`publishable`](Self::publishable), a chunk of rows at a time: the global
    /// flush publishes and drops each chunk before it walks on. Gathering 500,000 rows first
    /// held a one-worker runtime's only thread for 18 ms when they were dropped (a free
    /// and three reference counts each) and again to clone their keys.
    pub fn publishable_walk(&self, floor: f64) -> PublishableWalk<'_> {
        PublishableWalk {
            cells: Box::new(self.table.cells()),
            floor,
            visited: 0,
        }
    }

    /// Merge what the global sync read for one cell: the other regions' sum into `global`,
    /// and this region's own row as a lower bound of `regional` (it never makes the cell
    /// fresh: only the regional origin does). Creates the cell when missing; returns whether
    /// it did.
    pub fn merge_synced(&self, key: &CellKey, foreign: PnCount, own: PnCount) -> bool {
        let (cell, created) = self.table.get_or_insert_empty(key);
        cell.merge_global(foreign, self.table.changes());
        cell.merge_regional(own, self.table.changes());
        created
    }

    /// [`merge_synced`](Self::merge_synced) for every cell one sync read, yielding to the
    /// runtime every `table::WALK_SLICE` cells as the table walks do: a sync of a million
    /// cells must not hold a one-worker runtime's only thread. Returns the cells created.
    /// `counts` gives each cell's key, the other regions' sum and this region's own row (a
    /// function pointer, not a closure: the future stays `Send` for any caller).
    ///
    /// It takes the cells and drops each one once merged, so their keys are freed a slice at
    /// a time too: dropping a million read cells at once held the only thread for tens of
    /// milliseconds. The emptied buffer (104 MB at a million cells) is freed on
    /// the blocking pool ([`crate::aside`]): giving its pages back to the kernel in the last
    /// slice was that slice's 7 to 16 ms of CPU (`munmap`, by profile).
    pub async fn merge_synced_all<S: Send + 'static>(
        &self,
        cells: Vec<S>,
        counts: for<'s> fn(&'s S) -> (&'s CellKey, PnCount, PnCount),
    ) -> u64 {
        let bytes = crate::aside::buffer_bytes(&cells);
        let mut cells = cells.into_iter();
        let mut created = 0;
        for (merged, cell) in cells.by_ref().enumerate() {
            if merged % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let (key, foreign, own) = counts(&cell);
            if self.merge_synced(key, foreign, own) {
                created += 1;
            }
        }
        crate::aside::drop_aside(cells, bytes);
        created
    }

    /// A decision on a cell with a foreign count: counted, and a denial's instant kept
    /// (written at most once per millisecond of change, so denials at a high rate do not
    /// bounce its cache line between cores).
    fn note_shared(&self, allowed: bool, now_ms: u64) {
        if allowed {
            self.shared_admitted.inc();
            return;
        }
        self.shared_denied.inc();
        if self.contended_at_ms.load(Ordering::Relaxed) < now_ms {
            self.contended_at_ms.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    /// Decisions on cells another region also counts since start (relaxed reads).
    pub fn shared_decisions(&self) -> SharedDecisions {
        SharedDecisions {
            admitted: self.shared_admitted.get(),
            denied: self.shared_denied.get(),
        }
    }

    /// Whether this process denied a hit on a cell that another region also counts at or
    /// after `since_ms`: its limit is contended across regions right now.
    pub fn contended_since(&self, since_ms: u64) -> bool {
        let at = self
            .contended_at_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        at != 0 && at >= since_ms
    }

    /// The engine's clock, for the layers that work beside it.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Drop cells that no decision reads any more, a slice at a time (decisions run between
    /// slices, see `CellTable::reap`); no walk at all while no cell can have expired.
    /// Returns how many were dropped.
    pub async fn reap(&self) -> usize {
        self.reap_counted().await.removed
    }

    /// [`Engine::reap`], also telling how many cells it looked at (0: it did not walk).
    pub async fn reap_counted(&self) -> Reaped {
        self.table.reap(self.clock.now_ms()).await
    }

    /// Queue again the cells whose work the replay queue refused (overflowed), once it has
    /// room: walks the table a slice at a time, stops when the queue is full again (the next
    /// cycle goes on). Returns how many cells were queued.
    pub async fn recover_overflowed(&self) -> usize {
        if !self.replay.has_room() || !self.replay.take_overflow() {
            return 0;
        }
        let mut recovered = 0;
        for (visited, (key, cell)) in self.table.cells().enumerate() {
            if visited % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            if !cell.is_overflowed() || !cell.claim_overflowed() {
                continue;
            }
            if !self.replay.push(key, SharedCell::clone(&cell)) {
                cell.mark_overflowed();
                self.replay.note_overflow();
                break;
            }
            recovered += 1;
        }
        if recovered > 0 {
            tracing::debug!(recovered, "overflowed cells queued for replay again");
        }
        recovered
    }

    /// After the origin's store was replaced ([`RegionalOrigin::epoch`] changed): queue every
    /// cell holding this process's work again, so the next replays republish the cumulative
    /// counts the new store may lack. Walks the table a slice at a time like the reaper; a cell
    /// the full queue refuses is marked overflowed and recovered later. Returns how many
    /// cells were queued.
    pub async fn republish_after_origin_change(&self) -> usize {
        let epoch = self.origin.epoch();
        if self.origin_epoch.swap(epoch, Ordering::AcqRel) == epoch {
            return 0;
        }
        let (mut queued, mut waiting) = (0, 0);
        for (visited, (key, cell)) in self.table.cells().enumerate() {
            if visited % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            if cell.own() == 0 {
                continue;
            }
            if !cell.requeue() {
                // Already queued: its next replay publishes the cumulative count anyway.
                waiting += 1;
                continue;
            }
            if self.replay.push(key, SharedCell::clone(&cell)) {
                queued += 1;
            } else {
                cell.mark_overflowed();
                self.replay.note_overflow();
                self.metrics.replay_overflow();
            }
        }
        tracing::info!(
            queued,
            already_queued = waiting,
            origin = self.origin.name(),
            "the regional origin's store was replaced: republishing this process's counts"
        );
        queued
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
    /// (see [`CellBudget`]), as the structures weigh their entries: for a metrics scrape.
    pub fn memory(&self) -> [PoolBytes; 4] {
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
                        .saturating_add(self.table.protected_bytes()),
                    budget.table_bytes.saturating_add(budget.protected_bytes),
                ),
            ),
            pool("replay_queue", self.replay.bytes()),
            pool("strict_mode", self.strict.bytes()),
            pool("penalty_box", self.penalties.bytes()),
        ]
    }

    pub fn origin_circuit_state(&self) -> CircuitState {
        self.origin.circuit_state()
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
                    self.republish_after_origin_change().await;
                    self.replay_now().await;
                    self.recover_overflowed().await;
                }
                _ = self.replay.batch_ready() => self.replay_now().await,
                _ = reap.tick() => {
                    let reaped = self.reap_counted().await;
                    tracing::trace!(reaped = reaped.removed, visited = reaped.visited, live = self.live_cells(), "reaped old cells");
                }
                _ = &mut shutdown => break,
            }
        }
        let unpublished = self.final_replay().await;
        if unpublished > 0 {
            tracing::error!(
                cells = unpublished,
                origin = self.origin.name(),
                "final replay failed at shutdown: these cells' counts never reached the region"
            );
        }
    }
}

/// The cell of `hit`'s counter at `position`. A duration of 0 (never from a validated
/// config) counts as 1 ms.
fn current_key<'a>(hit: &Hit<'a>, position: &WindowPosition) -> CellKeyRef<'a> {
    if hit.counter.duration_ms == position.duration_ms {
        hit.counter.cell(position.sequence)
    } else {
        CellKeyRef::new(
            hit.counter.workspace,
            hit.counter.namespace,
            hit.counter.identifier,
            position.duration_ms,
            position.sequence,
        )
    }
}

/// The origin as the final replay sees it: every replay is a last chance
/// ([`RegionalOrigin::replay_final`]), bounded by one deadline. It keeps the default
/// [`RegionalOrigin::max_replay_batch`] (no limit of its own): at shutdown no decision waits
/// behind a batch, so the final replay goes in the engine's full batches.
struct FinalAttempt {
    origin: Arc<dyn RegionalOrigin>,
    deadline: tokio::time::Instant,
}

impl RegionalOrigin for FinalAttempt {
    fn name(&self) -> &'static str {
        self.origin.name()
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.origin.read(key)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        self.origin.replay_final(batch, self.deadline)
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        self.origin.penalize(penalties)
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        self.origin.penalty_until(counter)
    }

    fn epoch(&self) -> u64 {
        self.origin.epoch()
    }
}

/// The penalties one [`Engine::send_penalties`] took: whatever it holds when dropped (a
/// failed send, or the send's future dropped mid-call) goes back to the pending list.
struct PenaltiesInFlight<'e> {
    engine: &'e Engine,
    penalties: Vec<(CounterKey, u64)>,
}

impl Drop for PenaltiesInFlight<'_> {
    fn drop(&mut self) {
        if self.penalties.is_empty() {
            return;
        }
        let penalties = std::mem::take(&mut self.penalties);
        self.engine
            .penalties
            .give_back(penalties, self.engine.clock.now_ms());
    }
}

/// A counter held in the penalty box: denied, told how long it stays there.
fn penalized(now_ms: u64, until_ms: u64) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        until_reset_ms: until_ms.saturating_sub(now_ms),
    }
}

#[cfg(test)]
mod tests;
