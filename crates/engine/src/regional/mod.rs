//! The regional origin: where the processes of one region converge their counts.
//!
//! The engine never waits on it for a warm cell. It reads a cell's regional total when the
//! cell is cold (first use in this process), and replays accepted work to it in batches from a
//! background task. Implementations: [`InProcessOrigin`] (the embedded default, one process is
//! the whole region; also the unit-test double) and `gcounter_redis::RedisOrigin` (one node, TLS
//! or a cluster, in its own crate).
//! [`GuardedOrigin`] wraps any of them with timeouts and a circuit breaker.

mod breaker;
mod carry_over;
mod guard;
mod in_process;
mod rights;

use std::future::Future;
use std::pin::Pin;

pub use breaker::CircuitState;
pub use carry_over::{CarryOverOrigin, CarrySettings, CarrySource};
pub use guard::{GuardSettings, GuardedOrigin};
pub use in_process::{COMPONENT_BYTES as IN_PROCESS_COMPONENT_BYTES, InProcessOrigin};
pub use rights::{RightsAsk, RightsKeeper, RightsReturn, RightsRow, counter_id, room};

use crate::cell_key::{CellKey, CounterKey};
use crate::pn::PnCount;

/// Boxed so the engine can hold any origin as `Arc<dyn RegionalOrigin>`: origin calls are off
/// the warm path, so one allocation per call costs nothing that matters.
pub type OriginFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, OriginError>> + Send + 'a>>;

/// Why an origin call failed. The engine degrades to local decisions on any of these.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("regional origin unavailable: {0}")]
    Unavailable(String),
    #[error("regional origin timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("regional origin answered {got} totals for a batch of {expected}")]
    BatchMismatch { expected: usize, got: usize },
    /// The origin refused a command (e.g. out of memory, no permission).
    #[error("regional origin refused the command: {0}")]
    Refused(String),
    /// The origin holds something that is not a count; it answered, so it is not an outage.
    #[error("regional origin holds an invalid value: {0}")]
    InvalidValue(String),
    /// Too many recent failures: the call was not attempted (see `GuardedOrigin`).
    #[error("regional origin circuit is open")]
    CircuitOpen,
}

/// A cell as the origin holds it: a PN-counter with one component (hits, refunds) per process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellRead {
    /// The sum of all processes' components, per half: the region's count.
    pub total: PnCount,
    /// This process's own component (what it published before, e.g. before an eviction).
    pub own: PnCount,
}

/// The regional layer as a PN-counter per cell, one component per process: a pair of
/// grow-only counts (hits, refunds).
///
/// Replay publishes a process's *cumulative* hits and refunds of a cell and the origin keeps
/// the `max` of each per component, so sending the same value twice (a retry after a timeout
/// whose command did land) changes nothing: replay is idempotent, and a region never counts
/// work (or a refund) twice. A component's refunds never exceed its hits (the refund rule,
/// [`PnCount::capped`]); an origin enforces it on what it stores.
pub trait RegionalOrigin: Send + Sync + 'static {
    /// A short name for logs and metrics ("in-process", "redis").
    fn name(&self) -> &'static str;

    /// The cell's region total and this process's component (0s when never seen).
    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead>;

    /// The read of a cell this process has no cell for (a cold read): [`read`](Self::read),
    /// unless the origin carries counts over from the limiter it replaces
    /// ([`CarryOverOrigin`]). Refreshes of a warm cell call [`read`](Self::read).
    fn read_cold<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.read(key)
    }

    /// Store `carried` as the cell's carried-over component (the count the replaced limiter
    /// held, a component of no process) unless the cell already has one, then read the cell
    /// as [`read`](Self::read) does. Set-if-absent, so the processes of a region that each
    /// read the same carried count seed it once, never once per process. The default stores
    /// nothing: an origin without a carried component just reads.
    fn seed<'a>(&'a self, key: &'a CellKey, carried: u64) -> OriginFuture<'a, CellRead> {
        let _ = carried;
        self.read(key)
    }

    /// Publish this process's cumulative hits and refunds of each cell (merged with `max`
    /// into its component, per half) and return each cell's region total, in batch order, in
    /// one round trip.
    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>>;

    /// Bytes this process holds for the origin per cell: an in-process origin's component of
    /// it. The engine weighs each live cell with them when the origin holds live cells, and
    /// otherwise reserves them per evictable cell for what the origin keeps of the cells that
    /// left the table ([`keep_evicted`](Self::keep_evicted)), so the cell budget
    /// (`--max-cell-bytes`, and `--max-memory` it is derived from) counts what the embedded
    /// default really holds. A remote origin holds nothing per cell here: 0.
    fn bytes_per_cell(&self) -> u64 {
        0
    }

    /// Whether the origin must hold the counts of the cells the engine's table still holds.
    /// An origin that is this process alone (the embedded default) answers `false`: while a
    /// cell is in the table its count there is the region's whole count, so the origin keeps
    /// a count only once its cell leaves the table ([`keep_evicted`](Self::keep_evicted)),
    /// and the replay sends it only such cells (module `local::cell::departure`).
    fn holds_live_cells(&self) -> bool {
        true
    }

    /// Keep this process's cumulative count of a cell the engine's table just evicted, for
    /// an origin that does not hold live cells. Called under the table's shard lock: it must
    /// not wait on anything and never panic. The default keeps nothing.
    fn keep_evicted(&self, key: &CellKey, own: PnCount) {
        let _ = (key, own);
    }

    /// Bytes this process holds for the origin now beyond the live cells' weight (the
    /// in-process origin's counts of cells that left the table), for the memory metric.
    fn kept_bytes(&self) -> u64 {
        0
    }

    /// What an origin that does not hold live cells kept of a cell that left the table, read
    /// at once (no I/O): the table seeds a cell it creates without a read (the global sync
    /// brings it back) from it, so the count resumes. `None`: the origin keeps nothing this
    /// way (the default), and such a cell is created empty and replayed to the origin.
    /// Called while the table holds the cell's placeholder: it must not wait on anything.
    fn kept(&self, key: &CellKey) -> Option<CellRead> {
        let _ = key;
        None
    }

    /// The most cells one [`replay`](Self::replay) call should carry; the replay splits its
    /// pending cells into batches of at most this (and of `EngineSettings::replay_batch`)
    /// and yields to the decisions between two. A remote origin wants large batches (one round trip each: no
    /// limit of its own, the default); an origin that answers on the caller's thread wants
    /// small ones, or each batch holds a runtime thread for its whole length.
    fn max_replay_batch(&self) -> usize {
        usize::MAX
    }

    /// The final replay at shutdown: as [`replay`](Self::replay), but it must be tried even
    /// when recent failures would hold regular calls back (a circuit breaker), and give up
    /// by `deadline`. Unguarded origins just replay.
    fn replay_final<'a>(
        &'a self,
        batch: &'a [(CellKey, PnCount)],
        deadline: tokio::time::Instant,
    ) -> OriginFuture<'a, Vec<PnCount>> {
        let _ = deadline;
        self.replay(batch)
    }

    /// Put counters in the region's penalty box (`penalty` on a rule): each until its moment
    /// (ms since the epoch), keeping the later one when a counter is already in it. Entries
    /// expire by themselves at their moment. The default is an origin that shares no
    /// penalties: each process keeps its own (as after a failed call).
    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        let _ = penalties;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Until when (ms since the epoch) the region holds `counter` in its penalty box; 0 when
    /// it does not (or no longer does).
    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        let _ = counter;
        Box::pin(std::future::ready(Ok(0)))
    }

    /// Whether other processes decide from this origin's counts too: then a `never_above`
    /// limit is decided from rights taken from it ([`take_rights`](Self::take_rights)), as
    /// one process's exact decision would not bound the region's admissions. An origin that
    /// is this process alone (the embedded default) answers `false`.
    fn shares_rights(&self) -> bool {
        false
    }

    /// Take up to `ask.want` rights of a `never_above` counter's cell, atomically with every
    /// other process's takes: how many were granted (module `rights`). The default, for an
    /// origin that keeps no rights, grants none.
    fn take_rights<'a>(&'a self, ask: &'a RightsAsk) -> OriginFuture<'a, u64> {
        let _ = ask;
        Box::pin(std::future::ready(Ok(0)))
    }

    /// Give back rights this process holds and will never spend.
    fn give_back_rights<'a>(&'a self, returns: &'a [RightsReturn]) -> OriginFuture<'a, ()> {
        let _ = returns;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Changes when the origin's store was replaced by one that may lack what this process
    /// published (a Redis Sentinel failover: writes the old master took but never replicated
    /// are gone). The engine then queues every cell holding its work again, so the next replays
    /// republish the cumulative counts. Origins whose store is never replaced keep 0.
    fn epoch(&self) -> u64 {
        0
    }

    /// The circuit breaker's state, for the metrics gauge; unguarded origins are always closed.
    fn circuit_state(&self) -> CircuitState {
        CircuitState::Closed
    }
}
