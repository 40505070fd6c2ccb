//! The regional origin: where the processes of one region converge their counts.
//!
//! The engine never waits on it for a warm cell. It reads a cell's regional total when the
//! cell is cold (first use in this process), and replays accepted work to it in batches from a
//! background task. Implementations: [`InProcessOrigin`] (the embedded default, one process is
//! the whole region; also the unit-test double) and, in its own issue, Redis.

mod in_process;

use std::future::Future;
use std::pin::Pin;

pub use in_process::InProcessOrigin;

use crate::cell_key::CellKey;

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
    #[error("regional origin answered {expected} totals for a batch of {got}")]
    BatchMismatch { expected: usize, got: usize },
}

pub trait RegionalOrigin: Send + Sync + 'static {
    /// A short name for logs and metrics ("in-process", "redis").
    fn name(&self) -> &'static str;

    /// The region's current total of one cell (0 when the origin has never seen it).
    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, u64>;

    /// Add each delta to its cell and return the new totals, in batch order, in one round trip.
    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>>;
}
