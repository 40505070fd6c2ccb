//! Replay: accepted local work travels to the regional origin in batches, off the hot path.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::cell::WindowCell;
use crate::cell_key::CellKey;
use crate::regional::{OriginError, RegionalOrigin};

/// Cells with unreplayed work, each listed once per cycle, at most `capacity` of them.
///
/// A std mutex, not a tokio one: the critical sections are a push or a swap of a `Vec`, never
/// held across an await, and a cell enters the queue only on its first accept of a cycle, so
/// the lock is not taken per request.
pub struct ReplayQueue {
    pending: Mutex<Vec<(CellKey, Arc<WindowCell>)>>,
    capacity: usize,
    /// Pending cells that trigger a replay before the next tick.
    batch_size: usize,
    batch_full: Notify,
}

/// A replay cycle's outcome.
#[derive(Debug, Default)]
pub struct Flushed {
    /// Cells sent per successful round trip.
    pub batches: Vec<usize>,
    pub error: Option<OriginError>,
}

impl ReplayQueue {
    pub fn new(capacity: usize, batch_size: usize) -> Self {
        Self {
            pending: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
            batch_size: batch_size.max(1),
            batch_full: Notify::new(),
        }
    }

    /// Queue a cell. `false` when the queue is full: the work stays in the cell (and a later
    /// accept queues it again), the caller counts the overflow.
    pub fn push(&self, key: CellKey, cell: Arc<WindowCell>) -> bool {
        let len = {
            let mut pending = self.lock();
            if pending.len() >= self.capacity {
                return false;
            }
            pending.push((key, cell));
            pending.len()
        };
        if len == self.batch_size {
            self.batch_full.notify_one();
        }
        true
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Resolves when a full batch is waiting.
    pub async fn batch_ready(&self) {
        self.batch_full.notified().await;
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(CellKey, Arc<WindowCell>)>> {
        // A panic while pushing cannot leave the Vec half-written; keep going.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publish everything pending, a batch per round trip, and merge the totals back; each
    /// merged cell is fresh until `fresh_until_ms`.
    ///
    /// The cells of a failed batch are queued again: their cumulative counts go with a later
    /// cycle, and a batch that did land before failing is harmless to send again.
    pub async fn flush(&self, origin: &dyn RegionalOrigin, fresh_until_ms: u64) -> Flushed {
        let drained = std::mem::take(&mut *self.lock());
        let mut flushed = Flushed::default();
        for chunk in drained.chunks(self.batch_size) {
            let batch: Vec<(CellKey, u64)> = chunk
                .iter()
                .map(|(key, cell)| (key.clone(), cell.take_for_replay()))
                .collect();
            let outcome = origin.replay(&batch).await.and_then(|totals| {
                if totals.len() == batch.len() {
                    Ok(totals)
                } else {
                    Err(OriginError::BatchMismatch {
                        expected: batch.len(),
                        got: totals.len(),
                    })
                }
            });
            match outcome {
                Ok(totals) => {
                    for ((_, cell), total) in chunk.iter().zip(totals) {
                        cell.merge_regional(total);
                        cell.mark_fresh_until(fresh_until_ms);
                    }
                    flushed.batches.push(chunk.len());
                }
                Err(error) => {
                    let mut requeue = self.lock();
                    for (key, cell) in chunk {
                        // Re-queued past the cap on purpose: these cells were already in the
                        // queue once, and leaving them out would keep their work local.
                        if cell.requeue() {
                            requeue.push((key.clone(), Arc::clone(cell)));
                        }
                    }
                    flushed.error.get_or_insert(error);
                }
            }
        }
        flushed
    }
}
