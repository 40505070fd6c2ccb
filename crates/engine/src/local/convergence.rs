//! Convergence with the regional origin: the replay of accepted work and penalties, the
//! final replay at shutdown, the recovery of overflowed cells and the republish after the
//! origin's store was replaced. What keeps this process's counts and the region's in step.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Engine;
use super::cell::SharedCell;
use super::table;
use crate::cell_key::{CellKey, CounterKey};
use crate::pn::PnCount;
use crate::recorder::OriginOp;
use crate::regional::{CellRead, OriginFuture};
use crate::regional::{CircuitState, RegionalOrigin};

/// Convergence with the regional origin ([`Engine::convergence`]).
#[derive(Clone, Copy)]
pub struct Convergence<'e> {
    engine: &'e Engine,
}

impl Engine {
    /// Replaying to the regional origin and converging with it.
    pub fn convergence(&self) -> Convergence<'_> {
        Convergence { engine: self }
    }
}

impl Convergence<'_> {
    /// Replay everything pending now.
    pub async fn replay_now(&self) {
        self.replay_to(self.engine.origin.as_ref()).await;
    }

    async fn replay_to(&self, origin: &dyn RegionalOrigin) {
        self.send_penalties(origin).await;
        let started = std::time::Instant::now();
        let now_ms = self.engine.clock.now_ms();
        let replayed = self
            .engine
            .replay
            .replay(
                origin,
                self.engine.fresh_until(now_ms),
                self.engine.table.changes(),
            )
            .await;
        for &cells in &replayed.batches {
            self.engine.metrics.replay_batch(cells);
        }
        if !replayed.batches.is_empty() || replayed.error.is_some() {
            self.engine.metrics.origin_call(
                OriginOp::Replay,
                replayed.error.is_none(),
                started.elapsed(),
            );
        }
        if let Some(error) = replayed.error
            && let Some(suppressed) = self.engine.replay_warnings.allow()
        {
            tracing::warn!(%error, origin = self.engine.origin.name(), suppressed, "replay failed; work kept for the next cycle");
        }
    }

    /// Send the penalties entered since the last cycle to the region. A failure keeps them
    /// for the next cycle (bounded); meanwhile they hold in this process only.
    ///
    /// Cancellation-safe as the replay is: dropped before the origin answered, the penalties
    /// go back to the pending list.
    async fn send_penalties(&self, origin: &dyn RegionalOrigin) {
        let mut sending = PenaltiesInFlight {
            engine: self.engine,
            penalties: self.engine.penalties.take_pending(),
        };
        if sending.penalties.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let sent = origin.penalize(&sending.penalties).await;
        self.engine
            .metrics
            .origin_call(OriginOp::Replay, sent.is_ok(), started.elapsed());
        match sent {
            // Sent: nothing to give back on drop.
            Ok(()) => sending.penalties.clear(),
            Err(error) => {
                tracing::debug!(%error, origin = self.engine.origin.name(), "sending penalties failed; they hold locally");
            }
        }
    }

    /// The final replay at shutdown: everything pending and every overflowed cell, tried
    /// through an open circuit breaker and again after a failure (50 ms, doubling to 1 s) until
    /// `final_replay_timeout`. Returns the cells still unreplayed in the queue.
    pub async fn final_replay(&self) -> usize {
        let deadline = tokio::time::Instant::now() + self.engine.settings.final_replay_timeout;
        let last_chance = FinalAttempt {
            origin: Arc::clone(&self.engine.origin),
            deadline,
        };
        let mut pause = Duration::from_millis(50);
        loop {
            self.replay_to(&last_chance).await;
            let left = self.engine.pending_replay_cells();
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

    /// Queue again the cells whose work the replay queue refused (overflowed), once it has
    /// room: walks the table a slice at a time, stops when the queue is full again (the next
    /// cycle goes on). Returns how many cells were queued.
    pub async fn recover_overflowed(&self) -> usize {
        if !self.engine.replay.has_room() || !self.engine.replay.take_overflow() {
            return 0;
        }
        let mut recovered = 0;
        for (visited, (key, cell)) in self.engine.table.cells().enumerate() {
            if visited % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            if !cell.is_overflowed() || !cell.claim_overflowed() {
                continue;
            }
            if !self.engine.replay.push(key, SharedCell::clone(&cell)) {
                cell.mark_overflowed();
                self.engine.replay.note_overflow();
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
        let epoch = self.engine.origin.epoch();
        if self.engine.origin_epoch.swap(epoch, Ordering::AcqRel) == epoch {
            return 0;
        }
        let (mut queued, mut waiting) = (0, 0);
        for (visited, (key, cell)) in self.engine.table.cells().enumerate() {
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
            if self.engine.replay.push(key, SharedCell::clone(&cell)) {
                queued += 1;
            } else {
                cell.mark_overflowed();
                self.engine.replay.note_overflow();
                self.engine.metrics.replay_overflow();
            }
        }
        tracing::info!(
            queued,
            already_queued = waiting,
            origin = self.engine.origin.name(),
            "the regional origin's store was replaced: republishing this process's counts"
        );
        queued
    }

    pub fn origin_circuit_state(&self) -> CircuitState {
        self.engine.origin.circuit_state()
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

/// The penalties one `Convergence::send_penalties` took: whatever it holds when dropped (a
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
