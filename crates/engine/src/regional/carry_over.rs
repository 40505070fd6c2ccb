//! Counts carried over at the switch from the limiter this service replaces: a counter used
//! up to 7 of 10 before the switch allows 3 more after it, not 10.
//!
//! [`CarryOverOrigin`] wraps the regional origin. On a cold read (a cell this process has no
//! cell for) of a window that began before the switch, it asks a [`CarrySource`] for the
//! replaced limiter's count of that window and seeds it into the origin as the cell's carried
//! component ([`RegionalOrigin::seed`]: set-if-absent, so a region's processes seed a cell
//! once). From there every layer sees it as any other component of the region's count: local
//! decisions (the cold cell starts from the seeded total), the other processes (they read
//! the cell from the origin) and the global counters (a region's component is its total).
//!
//! Bounded: one read per cold cell, each with a timeout, at most `max_reads_per_second` of
//! them (past the cap, or on a failed or slow read, the cell starts without a carried count
//! and the outcome is recorded). The read sits on the cold path, before the cell's first
//! decision, because a decision taken without it could admit what the carried count forbids
//! and a cold read waits on the origin anyway; the timeout bounds what the wait adds. Windows
//! that began after the switch are never read: the replaced limiter no longer counts them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{CellRead, CircuitState, OriginFuture, RegionalOrigin};
use crate::cell_key::{CellKey, CounterKey};
use crate::pn::PnCount;
use crate::recorder::{CarryOutcome, Recorder};

/// Where carried counts come from: the replaced limiter's store.
pub trait CarrySource: Send + Sync + 'static {
    /// The replaced limiter's count of `key`'s window; `None` when it holds none (or `key`
    /// names no counter it could have kept).
    fn count<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, Option<u64>>;
}

/// The bounds of a carry-over.
#[derive(Debug, Clone)]
pub struct CarrySettings {
    /// The moment of the switch (ms since the epoch): only windows begun by then are read.
    pub switched_at_ms: u64,
    /// Deadline of one read of the replaced limiter's store.
    pub read_timeout: Duration,
    /// Reads per second at most; past it, a cold cell starts without a carried count.
    pub max_reads_per_second: u32,
}

/// A regional origin that seeds cold cells with the replaced limiter's counts.
pub struct CarryOverOrigin {
    inner: Arc<dyn RegionalOrigin>,
    source: Arc<dyn CarrySource>,
    settings: CarrySettings,
    recorder: Arc<dyn Recorder>,
    /// Reads taken in the current second since `started`: (second, reads). Tokio's clock, so
    /// a test on paused time decides which second a read falls in.
    reads: Mutex<(u64, u32)>,
    started: Instant,
}

impl CarryOverOrigin {
    pub fn new(
        inner: Arc<dyn RegionalOrigin>,
        source: Arc<dyn CarrySource>,
        settings: CarrySettings,
        recorder: Arc<dyn Recorder>,
    ) -> Self {
        Self {
            inner,
            source,
            settings,
            recorder,
            reads: Mutex::new((0, 0)),
            started: Instant::now(),
        }
    }

    /// Whether the replaced limiter could have counted in `key`'s window: it began by the
    /// switch.
    fn before_switch(&self, key: &CellKey) -> bool {
        key.sequence.saturating_mul(key.duration_ms) <= self.settings.switched_at_ms
    }

    /// Takes one read from this second's allowance.
    fn admit(&self) -> bool {
        let second = self.started.elapsed().as_secs();
        let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
        if reads.0 != second {
            *reads = (second, 0);
        }
        if reads.1 >= self.settings.max_reads_per_second {
            return false;
        }
        reads.1 += 1;
        true
    }

    async fn carried(&self, key: &CellKey) -> Option<u64> {
        if !self.admit() {
            self.recorder.carry_over(CarryOutcome::OverCap);
            return None;
        }
        match tokio::time::timeout(self.settings.read_timeout, self.source.count(key)).await {
            Ok(Ok(Some(count))) if count > 0 => Some(count),
            Ok(Ok(_)) => {
                self.recorder.carry_over(CarryOutcome::Absent);
                None
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "carry-over read failed; the cell starts without it");
                self.recorder.carry_over(CarryOutcome::Failed);
                None
            }
            Err(_) => {
                tracing::debug!("carry-over read timed out; the cell starts without it");
                self.recorder.carry_over(CarryOutcome::Failed);
                None
            }
        }
    }

    async fn cold(&self, key: &CellKey) -> Result<CellRead, super::OriginError> {
        if !self.before_switch(key) {
            return self.inner.read_cold(key).await;
        }
        let Some(count) = self.carried(key).await else {
            return self.inner.read_cold(key).await;
        };
        let read = self.inner.seed(key, count).await;
        if read.is_ok() {
            self.recorder.carry_over(CarryOutcome::Seeded);
        } else {
            self.recorder.carry_over(CarryOutcome::Failed);
        }
        read
    }
}

impl RegionalOrigin for CarryOverOrigin {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.inner.read(key)
    }

    fn read_cold<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(self.cold(key))
    }

    fn seed<'a>(&'a self, key: &'a CellKey, carried: u64) -> OriginFuture<'a, CellRead> {
        self.inner.seed(key, carried)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        self.inner.replay(batch)
    }

    fn bytes_per_cell(&self) -> u64 {
        self.inner.bytes_per_cell()
    }

    fn holds_live_cells(&self) -> bool {
        self.inner.holds_live_cells()
    }

    fn keep_evicted(&self, key: &CellKey, own: PnCount) {
        self.inner.keep_evicted(key, own);
    }

    fn kept_bytes(&self) -> u64 {
        self.inner.kept_bytes()
    }

    fn kept(&self, key: &CellKey) -> Option<CellRead> {
        self.inner.kept(key)
    }

    fn max_replay_batch(&self) -> usize {
        self.inner.max_replay_batch()
    }

    fn replay_final<'a>(
        &'a self,
        batch: &'a [(CellKey, PnCount)],
        deadline: tokio::time::Instant,
    ) -> OriginFuture<'a, Vec<PnCount>> {
        self.inner.replay_final(batch, deadline)
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        self.inner.penalize(penalties)
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        self.inner.penalty_until(counter)
    }

    fn shares_rights(&self) -> bool {
        self.inner.shares_rights()
    }

    fn take_rights<'a>(&'a self, ask: &'a super::RightsAsk) -> OriginFuture<'a, u64> {
        self.inner.take_rights(ask)
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [super::RightsReturn]) -> OriginFuture<'a, ()> {
        self.inner.give_back_rights(returns)
    }

    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    fn circuit_state(&self) -> CircuitState {
        self.inner.circuit_state()
    }
}

#[cfg(test)]
mod tests;
