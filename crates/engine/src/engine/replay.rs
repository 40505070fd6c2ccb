//! Replay: accepted local work travels to the regional origin in batches, off the hot path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::budget::QUEUE_ENTRY_BYTES;
use super::cell::WindowCell;
use crate::cell_key::CellKey;
use crate::pn::PnCount;
use crate::regional::{OriginError, RegionalOrigin};

/// Cells with unreplayed work, each listed once per cycle, at most `capacity` of them and
/// `max_bytes` of keys.
///
/// A std mutex, not a tokio one: the critical sections are a push or a swap of a `Vec`, never
/// held across an await, and a cell enters the queue only on its first accept of a cycle, so
/// the lock is not taken per request.
///
/// A full queue refuses the cell, which keeps its work marked `Overflowed`; the queue
/// remembers that it refused one ([`ReplayQueue::take_overflow`]) so the engine can walk the
/// table and queue such cells again once there is room (a one-shot cell is never accepted
/// again, so waiting for its next accept lost its work: issue 15, break 9).
pub struct ReplayQueue {
    pending: Mutex<Pending>,
    capacity: usize,
    max_bytes: u64,
    /// A push was refused since the last recovery walk began.
    overflowed: AtomicBool,
    /// Pending cells that trigger a replay before the next tick.
    batch_size: usize,
    batch_full: Notify,
}

/// A replay cycle's outcome.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Cells sent per successful round trip.
    pub batches: Vec<usize>,
    pub error: Option<OriginError>,
}

#[derive(Default)]
struct Pending {
    cells: Vec<(CellKey, Arc<WindowCell>)>,
    /// Bytes the entries hold (their keys' strings included).
    bytes: u64,
}

impl Pending {
    fn push(&mut self, key: CellKey, cell: Arc<WindowCell>) {
        self.bytes = self.bytes.saturating_add(entry_bytes(&key));
        self.cells.push((key, cell));
    }
}

fn entry_bytes(key: &CellKey) -> u64 {
    QUEUE_ENTRY_BYTES + key.heap_bytes() as u64
}

impl ReplayQueue {
    pub fn new(capacity: usize, max_bytes: u64, batch_size: usize) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(QUEUE_ENTRY_BYTES),
            overflowed: AtomicBool::new(false),
            batch_size: batch_size.max(1),
            batch_full: Notify::new(),
        }
    }

    /// Queue a cell. `false` when the queue is full (in entries or bytes): the caller marks
    /// the cell overflowed and counts it; a later accept or the recovery walk queues it.
    pub fn push(&self, key: CellKey, cell: Arc<WindowCell>) -> bool {
        let len = {
            let mut pending = self.lock();
            if pending.cells.len() >= self.capacity
                || pending.bytes.saturating_add(entry_bytes(&key)) > self.max_bytes
            {
                self.overflowed.store(true, Ordering::Release);
                return false;
            }
            pending.push(key, cell);
            pending.cells.len()
        };
        if len == self.batch_size {
            self.batch_full.notify_one();
        }
        true
    }

    pub fn len(&self) -> usize {
        self.lock().cells.len()
    }

    /// Whether a push was refused since the last call; the caller then walks the table for
    /// overflowed cells (and calls [`ReplayQueue::note_overflow`] if it must stop early).
    pub fn take_overflow(&self) -> bool {
        self.overflowed.swap(false, Ordering::AcqRel)
    }

    /// Overflowed cells are still waiting (a recovery walk stopped at a full queue).
    pub fn note_overflow(&self) {
        self.overflowed.store(true, Ordering::Release);
    }

    /// Whether the queue has room for a recovery walk: below half its caps, so recovered
    /// cells do not crowd out the next cycle's accepts.
    pub fn has_room(&self) -> bool {
        let pending = self.lock();
        pending.cells.len() <= self.capacity / 2 && pending.bytes <= self.max_bytes / 2
    }

    /// Resolves when a full batch is waiting.
    pub async fn batch_ready(&self) {
        self.batch_full.notified().await;
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while pushing cannot leave the Vec half-written; keep going.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publish everything pending, a batch per round trip, and merge the totals back; each
    /// merged cell is fresh until `fresh_until_ms`.
    ///
    /// The cells of a failed batch are queued again: their cumulative counts go with a later
    /// cycle, and a batch that did land before failing is harmless to send again.
    pub async fn replay(&self, origin: &dyn RegionalOrigin, fresh_until_ms: u64) -> Replayed {
        let drained = std::mem::take(&mut *self.lock()).cells;
        let mut replayed = Replayed::default();
        for chunk in drained.chunks(self.batch_size) {
            let batch: Vec<(CellKey, PnCount)> = chunk
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
                    replayed.batches.push(chunk.len());
                }
                Err(error) => {
                    let mut requeue = self.lock();
                    for (key, cell) in chunk {
                        // Re-queued past the cap on purpose: these cells were already in the
                        // queue once, and leaving them out would keep their work local.
                        if cell.requeue() {
                            requeue.push(key.clone(), Arc::clone(cell));
                        }
                    }
                    replayed.error.get_or_insert(error);
                }
            }
        }
        replayed
    }
}
