//! `never_above` limits when other processes decide the same counters: every unit admitted
//! spends a right this process took from the region's origin (Redis), or, with the global
//! counters, from their store, shared by every region (`regional::rights`), so the fleet's
//! admissions never exceed what one process deciding alone would admit.
//!
//! One process exact on its own counts is not enough there: each process sees the others'
//! admissions only after a replay, and a decision from local memory may take what another
//! process already took. Rights move instead of counts: a process takes a few at a time
//! (twice its demand over the take's horizon: a replay interval from the origin, the
//! keeper's from the global store; at least the hit's cost), spends them from memory, and
//! gives back what it will not spend (idle for [`IDLE_MS`], or of a cell its clock has left)
//! on the replay cadence and at shutdown.
//!
//! **Clocks apart.** Each process cuts cells by its own clock. With clocks up to `ε` from
//! true time (`EngineSettings::clock_skew`), a right of a cell is spent only while this
//! process's clock is at least `ε` inside it (its first and last `ε` are refused), so the
//! admission falls inside the cell by true time; and a take weighs the previous cell at
//! `elapsed − ε`, at least its weight at any true instant the right can be spent.
//!
//! The cell table still records every admission, so inspection, metrics and the replayed
//! counts stay as for any limit; the rights decide first and the table's own rule after
//! (it only ever denies more).

mod held;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::decide::current_key;
use super::{Check, Engine, Hit, Verdict, WindowPosition, Windows};
use crate::cell_key::{CellKey, CellKeyRef};
use crate::recorder::{DecisionSource, OriginOp, Recorder};
use crate::regional::{RightsAsk, RightsKeeper, RightsReturn};

pub(super) use held::HeldRights;
use held::Holding;
pub use held::IDLE_MS;

impl Engine {
    /// Takes the rights of `never_above` limits from `keeper` from now on, instead of the
    /// regional origin: the global counters' store, which every region shares. Set once;
    /// a second call changes nothing.
    pub fn keep_rights_in(&self, keeper: Arc<dyn RightsKeeper>) {
        let _ = self.rights_keeper.set(keeper);
    }

    /// Whether `never_above` hits are decided from rights: other processes (of the region,
    /// or of other regions) decide the same counters.
    pub(super) fn decides_from_rights(&self) -> bool {
        self.rights_keeper.get().is_some() || self.origin.shares_rights()
    }

    /// How long a take should last at the measured demand: the keeper's horizon, else a
    /// replay interval (the origin's cadence); at most a tenth of the window, since what a
    /// process holds when its cell ends is lost to every other.
    fn take_horizon_ms(&self, duration_ms: u64) -> u64 {
        let horizon = match self.rights_keeper.get() {
            Some(keeper) => keeper.horizon(),
            None => self.settings.replay_interval,
        };
        u64::try_from(horizon.as_millis())
            .unwrap_or(u64::MAX)
            .min(duration_ms / 10)
            .max(1)
    }

    fn skew_ms(&self) -> u64 {
        u64::try_from(self.settings.clock_skew.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether this process's clock is within the clock margin of the cell's start or end:
    /// an admission there could fall in the neighbouring cell by true time.
    fn near_a_cell_edge(&self, position: &WindowPosition) -> bool {
        let skew_ms = self.skew_ms();
        skew_ms > 0 && (position.elapsed_ms < skew_ms || position.until_reset_ms() <= skew_ms)
    }

    fn rights_source(&self) -> &'static str {
        match self.rights_keeper.get() {
            Some(keeper) => keeper.name(),
            None => self.origin.name(),
        }
    }

    async fn take_from_source(&self, ask: &RightsAsk) -> Result<u64, crate::regional::OriginError> {
        match self.rights_keeper.get() {
            Some(keeper) => keeper.take(ask).await,
            None => self.origin.take_rights(ask).await,
        }
    }

    async fn give_back_to_source(
        &self,
        returns: &[RightsReturn],
    ) -> Result<(), crate::regional::OriginError> {
        match self.rights_keeper.get() {
            Some(keeper) => keeper.give_back(returns).await,
            None => self.origin.give_back_rights(returns).await,
        }
    }

    /// A `never_above` hit when other processes share the origin: from a right held when it
    /// can ([`Self::check_with_rights_held`]), else on the slow path. Kept out of line: the
    /// other limits' warm path stays as small as it was.
    #[inline(never)]
    pub(super) fn check_from_rights<'a>(&'a self, hit: Hit<'a>, penalty_ms: u64) -> Check<'a> {
        match self.check_with_rights_held(&hit, penalty_ms) {
            Some(verdict) => Check::Ready(verdict),
            None => Check::Slow(Box::pin(self.check_with_rights(hit, penalty_ms))),
        }
    }

    /// The warm decision of a `never_above` hit when other processes share the origin: a
    /// right this process holds, spent, and the cell warm in the table; nothing awaited.
    /// `None`: [`Self::check_with_rights`] decides (no right held, a penalty, a cell's edge
    /// within the clock margin, a cold or stale cell).
    fn check_with_rights_held(&self, hit: &Hit<'_>, penalty_ms: u64) -> Option<Verdict> {
        let now_ms = self.clock.now_ms();
        if penalty_ms > 0 && self.penalties.held_until(&hit.counter, now_ms).is_some() {
            return None;
        }
        let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
        if self.near_a_cell_edge(&position) {
            return None;
        }
        let key = current_key(hit, &position);
        let holding = self.rights.held(&key)?;
        let current = self.table.get(&key)?;
        if self.refresh_needed(&current, &key, now_ms).is_some() {
            return None;
        }
        let previous = self.previous_total(&current, &key, &position)?;
        if !holding.spend(hit.cost) {
            return None;
        }
        holding.offer(hit.cost, now_ms);
        // The right decides the bound; the table records the admission (see below).
        let recorded = Hit {
            exact: false,
            ..*hit
        };
        let consumed = self.consume(
            &recorded,
            &key,
            &position,
            previous,
            &current,
            DecisionSource::Local,
        );
        if !consumed.is_some_and(|verdict| verdict.allowed) {
            // Not admitted (or withdrawn): the right is still this process's to spend.
            self.rights.add(&key, &holding, hit.cost);
        }
        consumed.map(|verdict| self.penalize_denial(verdict, hit, penalty_ms, now_ms))
    }

    /// A `never_above` hit when other processes share the origin: a right of the current
    /// cell first (taken from the region when none is held), then the cell table's own
    /// decision at the same instant. No right: denied.
    async fn check_with_rights(&self, hit: Hit<'_>, penalty_ms: u64) -> Verdict {
        let now_ms = self.clock.now_ms();
        if penalty_ms > 0
            && let Some(until) = self.penalties.held_until(&hit.counter, now_ms)
        {
            self.metrics.decision_source(DecisionSource::Local);
            return super::decide::penalized(now_ms, until);
        }
        let position = WindowPosition::at(now_ms, hit.counter.duration_ms);
        let key = current_key(&hit, &position);
        // The right decides the bound; the table records the admission in the same cell
        // (its own withdrawal of late accepts is for one process alone).
        let recorded = Hit {
            exact: false,
            ..hit
        };
        // A right spent, or none: within the clock margin of a cell's edge nothing is spent.
        let spent = if self.near_a_cell_edge(&position) {
            None
        } else {
            let owned = key.to_owned_key();
            let holding = self.rights.holding(&owned);
            holding.offer(hit.cost, now_ms);
            let spent = holding.spend(hit.cost)
                || self.wait_for_rights(&holding, &hit, owned, &position).await;
            spent.then_some(holding)
        };
        let Some(holding) = spent else {
            return self
                .deny_without_rights(recorded, key, position, now_ms, &hit, penalty_ms)
                .await;
        };
        let verdict = self
            .check_slow(recorded, key, position, now_ms, penalty_ms)
            .await;
        if !verdict.allowed {
            // Not admitted: the right is still this process's to spend.
            self.rights.add(&key, &holding, hit.cost);
        }
        verdict
    }

    /// [`Self::take_rights`], within the keeper's timeout when the rights come from the
    /// global store: a decision queued behind a slow take, then taking itself, would
    /// otherwise wait for two. The regional origin bounds each take itself (a Redis read's
    /// deadline, tens of milliseconds).
    async fn wait_for_rights(
        &self,
        holding: &Arc<Holding>,
        hit: &Hit<'_>,
        cell: CellKey,
        position: &WindowPosition,
    ) -> bool {
        let Some(keeper) = self.rights_keeper.get() else {
            return self.take_rights(holding, hit, cell, position).await;
        };
        let taken = self.take_rights(holding, hit, cell, position);
        match tokio::time::timeout(keeper.timeout(), taken).await {
            Ok(spent) => spent,
            Err(_) => {
                // A take cut off may have been granted: its rights count as spent until
                // their cell ends, never twice.
                let quiet = self.clock.now_ms().saturating_add(IDLE_MS);
                holding.quiet_until_ms.store(quiet, Ordering::Relaxed);
                tracing::debug!(keeper = keeper.name(), "no right came in time; denied");
                false
            }
        }
    }

    /// Takes rights of `cell` from the origin, one take at a time per holding, and spends
    /// `hit.cost` of them: whether it could.
    async fn take_rights(
        &self,
        holding: &Arc<Holding>,
        hit: &Hit<'_>,
        cell: CellKey,
        position: &WindowPosition,
    ) -> bool {
        let _turn = holding.taking.lock().await;
        // A take that finished while this one waited may have brought enough.
        if holding.spend(hit.cost) {
            return true;
        }
        let now_ms = self.clock.now_ms();
        if now_ms < holding.quiet_until_ms.load(Ordering::Relaxed) {
            return false;
        }
        let horizon_ms = self.take_horizon_ms(hit.counter.duration_ms);
        let ask = RightsAsk {
            want: holding.want(hit.cost, now_ms, horizon_ms, hit.limit),
            cell,
            limit: hit.limit,
            // The previous cell weighs as at the earliest true instant this take's rights
            // can be spent.
            elapsed_ms: if crate::plant::planted(crate::plant::Plant::NeverAbovePreviousFull) {
                0
            } else {
                position.elapsed_ms.saturating_sub(self.skew_ms())
            },
            sliding: self.settings.windows == Windows::Sliding,
        };
        let mut counted = CountedTake {
            metrics: &*self.metrics,
            started: Instant::now(),
            ok: false,
        };
        let taken = self.take_from_source(&ask).await;
        counted.ok = taken.is_ok();
        drop(counted);
        match taken {
            Ok(granted) => {
                self.rights.add(&ask.cell.borrowed(), holding, granted);
                if granted < ask.want {
                    let quiet = now_ms.saturating_add(horizon_ms / 4);
                    holding.quiet_until_ms.store(quiet, Ordering::Relaxed);
                }
            }
            Err(error) => {
                let quiet = now_ms.saturating_add(IDLE_MS);
                holding.quiet_until_ms.store(quiet, Ordering::Relaxed);
                tracing::debug!(%error, keeper = self.rights_source(), "taking rights failed; deciding from the rights held");
            }
        }
        holding.spend(hit.cost)
    }

    /// The region's rights of the cell are spent (or out of reach): denied, with the
    /// counts the table holds for the answer's figures.
    async fn deny_without_rights(
        &self,
        recorded: Hit<'_>,
        key: CellKeyRef<'_>,
        position: WindowPosition,
        now_ms: u64,
        hit: &Hit<'_>,
        penalty_ms: u64,
    ) -> Verdict {
        let peek = Hit {
            cost: 0,
            ..recorded
        };
        let seen = self.check_slow(peek, key, position, now_ms, 0).await;
        let verdict = Verdict {
            allowed: false,
            remaining: 0,
            until_reset_ms: self.until_reset_ms(&position),
            seen: seen.seen,
        };
        self.penalize_denial(verdict, hit, penalty_ms, now_ms)
    }

    /// A refund of a `never_above` hit given back in the current cell is this process's to
    /// spend again: the region's admissions net of refunds shrank by as much.
    pub(super) fn refund_rights(&self, key: &CellKeyRef<'_>, given: u64) {
        if given > 0 {
            let owned = key.to_owned_key();
            let holding = self.rights.holding(&owned);
            self.rights.add(key, &holding, given);
        }
    }

    /// Gives back the rights this process will not spend (see [`HeldRights::returns`]); all
    /// of them at shutdown. Rights whose return fails stay counted as spent until their
    /// cell ends.
    pub(super) async fn give_back_rights(&self, everything: bool) {
        let returns = self
            .rights
            .returns(self.clock.now_ms(), self.skew_ms(), everything);
        if returns.is_empty() {
            return;
        }
        let started = Instant::now();
        let given = self.give_back_to_source(&returns).await;
        self.metrics
            .origin_call(OriginOp::Rights, given.is_ok(), started.elapsed());
        if let Err(error) = given {
            tracing::debug!(%error, keeper = self.rights_source(), cells = returns.len(), "giving rights back failed; they return when their cells end");
        }
    }
}

/// A take from the origin or the keeper, counted in `rls_origin_operations_total{op="rights"}`
/// when it ends, however it ends: a take the keeper's timeout cuts off (its future dropped
/// while the store has not answered) counts as failed, as the decision it kept waiting was.
struct CountedTake<'a> {
    metrics: &'a dyn Recorder,
    started: Instant,
    ok: bool,
}

impl Drop for CountedTake<'_> {
    fn drop(&mut self) {
        self.metrics
            .origin_call(OriginOp::Rights, self.ok, self.started.elapsed());
    }
}

#[cfg(test)]
mod tests;
