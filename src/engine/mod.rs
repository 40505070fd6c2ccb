//! The local engine: every decision is taken here, from memory.
//!
//! It knows cells, windows and the regional origin trait; it knows nothing of gRPC, YAML or
//! any particular backend. A warm decision is: find two cells without allocating, one
//! compare-and-swap, done. Cold cells read the origin once (single flight); accepted work is
//! replayed to the origin by a background task.

mod cell;
mod clock;
mod decision;
mod replay;
mod table;
mod window;

use std::sync::Arc;
use std::time::Duration;

pub use cell::WindowCell;
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::{Decision, decide};
pub use window::WindowPosition;

use crate::cell_key::CellKeyRef;
use crate::regional::RegionalOrigin;
use replay::ReplayQueue;
use table::{CellTable, Lookup};

/// Engine tuning. The defaults are the production values.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Cap on live cells; least recently used go first.
    pub max_cells: usize,
    /// How often accepted work is replayed to the regional origin.
    pub replay_interval: Duration,
    /// Cells per replay round trip.
    pub replay_batch: usize,
    /// How often cells older than the previous window are dropped.
    pub reap_interval: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_cells: 1_000_000,
            replay_interval: Duration::from_millis(100),
            replay_batch: 1_000,
            reap_interval: Duration::from_secs(5),
        }
    }
}

/// One limited descriptor to decide: its counter identity (without the sequence, which the
/// engine derives from the clock), its limit and its cost.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    pub workspace: &'a Arc<str>,
    pub namespace: &'a Arc<str>,
    pub identifier: &'a str,
    pub duration_ms: u64,
    pub limit: u64,
    /// 0 checks without consuming.
    pub cost: u64,
}

/// The engine's answer for one hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u64,
    /// Milliseconds until the current cell ends.
    pub until_reset_ms: u64,
}

pub struct Engine {
    settings: EngineSettings,
    table: CellTable,
    replay: ReplayQueue,
    origin: Arc<dyn RegionalOrigin>,
    clock: Arc<dyn Clock>,
}

impl Engine {
    pub fn new(
        settings: EngineSettings,
        origin: Arc<dyn RegionalOrigin>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            table: CellTable::new(settings.max_cells),
            replay: ReplayQueue::default(),
            settings,
            origin,
            clock,
        }
    }

    /// Decide one hit. Never fails: an origin that cannot be read degrades to local counts.
    pub async fn check(&self, hit: Hit<'_>) -> Verdict {
        let position = WindowPosition::at(self.clock.now_ms(), hit.duration_ms);
        let key = CellKeyRef {
            workspace: hit.workspace,
            namespace: hit.namespace,
            identifier: hit.identifier,
            duration_ms: position.duration_ms,
            sequence: position.sequence,
        };
        let previous_total = match position.previous_sequence() {
            Some(sequence) => self.cell(CellKeyRef { sequence, ..key }).await.total(),
            None => 0,
        };
        let current = self.cell(key).await;
        let (decision, queue_replay) = current.try_consume(
            previous_total,
            position.elapsed_ms,
            position.duration_ms,
            hit.cost,
            hit.limit,
        );
        if queue_replay {
            self.replay.push(key.to_owned_key(), current);
        }
        Verdict {
            allowed: decision.allowed,
            remaining: decision.remaining,
            until_reset_ms: position.until_reset_ms(),
        }
    }

    /// A warm cell straight from memory; a cold one seeded from the regional origin.
    async fn cell(&self, key: CellKeyRef<'_>) -> Arc<WindowCell> {
        if let Some(cell) = self.table.get(&key) {
            return cell;
        }
        let owned = key.to_owned_key();
        match self.table.get_or_guard(&owned).await {
            Lookup::Warm(cell) => cell,
            Lookup::Cold(guard) => {
                let seed = match self.origin.read(&owned).await {
                    Ok(total) => total,
                    Err(error) => {
                        tracing::debug!(%error, origin = self.origin.name(), "cold read failed; deciding locally");
                        0
                    }
                };
                let cell = Arc::new(WindowCell::with_regional(seed));
                let _ = guard.insert(Arc::clone(&cell));
                cell
            }
        }
    }

    /// Replay everything pending now (also used on shutdown).
    pub async fn flush_replay(&self) {
        if let Err(error) = self
            .replay
            .flush(self.origin.as_ref(), self.settings.replay_batch)
            .await
        {
            tracing::warn!(%error, origin = self.origin.name(), "replay failed; work kept for the next cycle");
        }
    }

    /// Drop cells that no decision reads any more.
    pub fn reap(&self) -> usize {
        self.table.reap(self.clock.now_ms())
    }

    pub fn live_cells(&self) -> usize {
        self.table.len()
    }

    pub fn pending_replay_cells(&self) -> usize {
        self.replay.len()
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
                _ = replay.tick() => self.flush_replay().await,
                _ = reap.tick() => {
                    let reaped = self.reap();
                    tracing::trace!(reaped, live = self.live_cells(), "reaped old cells");
                }
                _ = &mut shutdown => break,
            }
        }
        self.flush_replay().await;
    }
}

#[cfg(test)]
mod tests;
