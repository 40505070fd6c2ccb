//! Replay: accepted local work travels to the regional origin in batches, off the hot path.

use std::sync::{Arc, Mutex, PoisonError};

use super::cell::WindowCell;
use crate::cell_key::CellKey;
use crate::regional::{OriginError, RegionalOrigin};

/// Cells with unreplayed work, each listed once per cycle.
///
/// A std mutex, not a tokio one: the critical sections are a push or a swap of a `Vec`, never
/// held across an await, and a cell enters the queue only on its first accept of a cycle, so
/// the lock is not taken per request.
#[derive(Default)]
pub struct ReplayQueue {
    pending: Mutex<Vec<(CellKey, Arc<WindowCell>)>>,
}

impl ReplayQueue {
    pub fn push(&self, key: CellKey, cell: Arc<WindowCell>) {
        self.lock().push((key, cell));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(CellKey, Arc<WindowCell>)>> {
        // A panic while pushing cannot leave the Vec half-written; keep going.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send everything pending, `batch_size` cells per round trip, and merge the totals back.
    ///
    /// Work of a failed batch is given back to its cells and queued again: nothing accepted is
    /// lost, it is sent with a later cycle.
    pub async fn flush(
        &self,
        origin: &dyn RegionalOrigin,
        batch_size: usize,
    ) -> Result<usize, OriginError> {
        let drained = std::mem::take(&mut *self.lock());
        let mut sent = 0;
        let mut first_error = None;
        for chunk in drained.chunks(batch_size.max(1)) {
            let batch: Vec<(CellKey, u64)> = chunk
                .iter()
                .map(|(key, cell)| (key.clone(), cell.take_unreplayed()))
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
                    }
                    sent += chunk.len();
                }
                Err(error) => {
                    for ((key, cell), (_, delta)) in chunk.iter().zip(&batch) {
                        if cell.restore_unreplayed(*delta) {
                            self.push(key.clone(), Arc::clone(cell));
                        }
                    }
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(sent),
        }
    }
}
