//! The decision: a hit against its two cells, warm from memory or, for a cold or stale
//! cell, after one read of the regional origin; refunds, strict mode and the penalty box on
//! the way. Apart from the engine's state so that the hot path reads as one piece.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::WindowCell;
use super::cell::{ReplayNeed, SharedCell};
use super::check::Check;
use super::decision::{WindowCounts, decide};
use super::refresh::Turn;
use super::retry::until_pass_ms;
use super::table::Lookup;
use super::{Engine, FOLLOWER_MAX_WAIT, Hit, SharedDecisions, Verdict, WindowPosition, Windows};
use crate::cell_key::{CellKeyRef, CounterKeyRef};
use crate::recorder::{DecisionSource, OriginOp};

impl Engine {
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
        if hit.exact
            && hit.cost > 0
            && self.decides_from_rights()
            && !crate::plant::planted(crate::plant::Plant::NeverAboveUnshared)
        {
            return self.check_from_rights(hit, penalty_ms);
        }
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
            let consumed = self.consume(
                &hit,
                &key,
                &position,
                previous,
                &current,
                DecisionSource::Local,
            );
            if let Some(verdict) = consumed {
                return Check::Ready(self.penalize_denial(verdict, &hit, penalty_ms, now_ms));
            }
            // Withdrawn (an exact hit accepted after its window ended): decided again now.
            let now_ms = self.clock.now_ms();
            let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
            let key = current_key(&hit, &position);
            return Check::Slow(Box::pin(
                self.check_slow(hit, key, position, now_ms, penalty_ms),
            ));
        }
        // Boxed: the slow path's future is large, and rare.
        Check::Slow(Box::pin(
            self.check_slow(hit, key, position, now_ms, penalty_ms),
        ))
    }

    /// Give back `hit.cost` of what this process consumed of the counter (a refund, e.g. the
    /// unused part of a reservation), and answer with what is left of the limit after it.
    ///
    /// The refund rule ([`PnCount::capped`](crate::pn::PnCount::capped)): a process refunds at most what it consumed
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
        if hit.exact && self.decides_from_rights() {
            self.refund_rights(&key, given);
        }
        let mut left = hit.cost.saturating_sub(given);
        let previous_total = match self.previous_sequence(&position) {
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
            until_reset_ms: self.until_reset_ms(&position),
            seen: decision.seen,
        }
    }

    /// The previous cell a decision at `position` reads: none with fixed windows, none for
    /// the first cell after the epoch.
    #[inline]
    pub(super) fn previous_sequence(&self, position: &WindowPosition) -> Option<u64> {
        match self.settings.windows {
            Windows::Sliding => position.previous_sequence(),
            Windows::Fixed => None,
        }
    }

    /// When an accepted hit's window resets: the cell's end (upstream's whole seconds with
    /// fixed windows, as its `duration_until_reset`).
    #[inline]
    pub(super) fn until_reset_ms(&self, position: &WindowPosition) -> u64 {
        match self.settings.windows {
            Windows::Sliding => position.until_reset_ms(),
            Windows::Fixed => position.until_boundary_ms(),
        }
    }

    /// Put a cell whose work waits for replay in the queue (or mark it overflowed).
    pub(super) fn queue_replay(&self, need: ReplayNeed, key: &CellKeyRef<'_>, cell: &SharedCell) {
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
    pub(super) async fn check_slow(
        &self,
        hit: Hit<'_>,
        mut key: CellKeyRef<'_>,
        mut position: WindowPosition,
        mut now_ms: u64,
        penalty_ms: u64,
    ) -> Verdict {
        if penalty_ms > 0
            && let Some(until) = self.region_penalty(&hit.counter, now_ms).await
        {
            self.metrics.decision_source(DecisionSource::Origin);
            return penalized(now_ms, until);
        }
        loop {
            let mut source = DecisionSource::Local;
            let previous = match self.previous_sequence(&position) {
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
            if let Some(verdict) = self.consume(&hit, &key, &position, previous, &current, source) {
                return self.penalize_denial(verdict, &hit, penalty_ms, now_ms);
            }
            // Withdrawn (an exact hit accepted after its window ended): decided again now.
            now_ms = self.clock.now_ms();
            position = WindowPosition::at(now_ms, hit.counter.duration_ms);
            key = current_key(&hit, &position);
        }
    }

    /// A denial on a rule with a penalty puts the counter in the box (here at once, in the
    /// region with the next replay cycle): it answers the penalty's length if that is later
    /// than the window's own wait.
    pub(super) fn penalize_denial(
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
    pub(super) async fn region_penalty(
        &self,
        counter: &CounterKeyRef<'_>,
        now_ms: u64,
    ) -> Option<u64> {
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
    pub(super) fn previous_total(
        &self,
        current: &WindowCell,
        key: &CellKeyRef<'_>,
        position: &WindowPosition,
    ) -> Option<(u64, bool)> {
        let Some(sequence) = self.previous_sequence(position) else {
            return Some((0, false));
        };
        if let Some(remembered) = current.previous(self.table.changes()) {
            return Some(remembered);
        }
        let previous = self.table.get(&key.with_sequence(sequence))?;
        Some(current.remember_previous(&previous, self.table.changes()))
    }

    /// Why the cell must be read from the origin before deciding, if it must.
    pub(super) fn refresh_needed(
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
    /// the previous cell's total and whether another region counts in it. `None`: an exact
    /// hit's accept was withdrawn (it reached its cell after a later window read the cell's
    /// total: [`WindowCell::withdraw_if_sealed`]); the caller decides it again at a time read
    /// now.
    pub(super) fn consume(
        &self,
        hit: &Hit<'_>,
        key: &CellKeyRef<'_>,
        position: &WindowPosition,
        (previous_total, previous_shared): (u64, bool),
        current: &SharedCell,
        source: DecisionSource,
    ) -> Option<Verdict> {
        let now_ms = position.now_ms();
        self.hitters.offer(&key.counter, hit.limit);
        let (decision, need) = current.try_consume(
            previous_total,
            position.elapsed_ms,
            position.duration_ms,
            hit.cost,
            hit.limit,
            self.settings.count_denied,
            self.table.changes(),
        );
        self.queue_replay(need, key, current);
        if decision.allowed
            && hit.exact
            && let Some(need) = current.withdraw_if_sealed(hit.cost, self.table.changes())
        {
            self.queue_replay(need, key, current);
            return None;
        }
        // Early in a window the current cell has no foreign count yet: the previous one's
        // tells that the limit is shared. A peek (cost 0) is no demand: not counted.
        if hit.cost > 0 && (current.global() > 0 || previous_shared) {
            self.note_shared(decision.allowed, now_ms);
            if !decision.allowed {
                self.onset.note_contended(current, key);
            }
        }
        if !decision.allowed && self.settings.freshness.is_some() {
            self.strict
                .enter(&key.counter, now_ms.saturating_add(position.duration_ms));
        }
        self.metrics.decision_source(source);
        if decision.allowed {
            self.onset.note(current, key, hit.cost, hit.limit, now_ms);
            return Some(Verdict {
                allowed: true,
                remaining: decision.remaining,
                until_reset_ms: self.until_reset_ms(position),
                seen: decision.seen,
            });
        }
        if self.settings.windows == Windows::Fixed {
            // Only the boundary resets a fixed window.
            return Some(Verdict {
                allowed: false,
                remaining: decision.remaining,
                until_reset_ms: position.until_boundary_ms(),
                seen: decision.seen,
            });
        }
        // Denied: nothing was consumed (or, counting denials, this hit's cost, which stays
        // in the window as any hit), so the cell's count now is what the next request meets
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
        Some(Verdict {
            allowed: false,
            remaining: decision.remaining,
            until_reset_ms: until_pass,
            seen: decision.seen,
        })
    }

    /// A warm cell straight from memory; a cold one seeded from the regional origin (one read
    /// shared by concurrent callers).
    pub(super) async fn cell(
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
                let read = self.origin.read_cold(&owned).await;
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
    pub(super) async fn refresh(
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
    pub(super) fn fresh_until(&self, now_ms: u64) -> u64 {
        match self.settings.freshness {
            Some(freshness) => now_ms.saturating_add(freshness.as_millis() as u64),
            None => u64::MAX,
        }
    }

    /// A decision on a cell with a foreign count: counted, and a denial's instant kept
    /// (written at most once per millisecond of change, so denials at a high rate do not
    /// bounce its cache line between cores).
    pub(super) fn note_shared(&self, allowed: bool, now_ms: u64) {
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
}

/// The cell of `hit`'s counter at `position`. A duration of 0 (never from a validated
/// config) counts as 1 ms.
pub(super) fn current_key<'a>(hit: &Hit<'a>, position: &WindowPosition) -> CellKeyRef<'a> {
    if hit.counter.duration_ms == position.duration_ms {
        hit.counter.cell(position.sequence)
    } else {
        CellKeyRef::new(
            hit.counter.scope,
            hit.counter.identifier,
            position.duration_ms,
            position.sequence,
        )
    }
}

/// A counter held in the penalty box: denied, told how long it stays there.
pub(super) fn penalized(now_ms: u64, until_ms: u64) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        until_reset_ms: until_ms.saturating_sub(now_ms),
        seen: u64::MAX,
    }
}
