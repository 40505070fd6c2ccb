//! Replay: accepted local work travels to the regional origin in batches, off the hot path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::budget::QUEUE_ENTRY_BYTES;
use super::cell::{SealedChanges, SharedCell};
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
/// again, so waiting for its next accept would lose its work).
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
    cells: Vec<(CellKey, SharedCell)>,
    /// Bytes the entries hold (their keys' strings included).
    bytes: u64,
}

impl Pending {
    fn push(&mut self, key: CellKey, cell: SharedCell) {
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
    pub fn push(&self, key: CellKey, cell: SharedCell) -> bool {
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

    /// Bytes the queued entries hold and the most they may hold.
    pub fn bytes(&self) -> (u64, u64) {
        (self.lock().bytes, self.max_bytes)
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
    ///
    /// Cancellation-safe: the drained cells are held by [`InFlight`], which queues again
    /// every cell whose batch had not finished when this future is dropped. A cell drained
    /// but never taken is still `Queued` (no accept would queue it again), and one taken
    /// but not merged is `Idle` with its work unpublished: dropped with the future, either
    /// kept its work out of every later replay.
    pub async fn replay(
        &self,
        origin: &dyn RegionalOrigin,
        fresh_until_ms: u64,
        changes: &SealedChanges,
    ) -> Replayed {
        let mut in_flight = InFlight {
            queue: self,
            cells: std::mem::take(&mut *self.lock()).cells,
            done: 0,
            taken: 0,
        };
        let mut replayed = Replayed::default();
        let batch_size = self.batch_size.min(origin.max_replay_batch()).max(1);
        let departed_only = !origin.holds_live_cells();
        while in_flight.done < in_flight.cells.len() {
            let start = in_flight.done;
            let end = start.saturating_add(batch_size).min(in_flight.cells.len());
            let taken = in_flight.cells.get(start..end).unwrap_or_default();
            let mut chunk = Vec::with_capacity(taken.len());
            let mut batch: Vec<(CellKey, PnCount)> = Vec::with_capacity(taken.len());
            for (key, cell) in taken {
                let count = cell.take_for_replay();
                if departed_only && !cell.needs_origin() {
                    // The cell in the table is the region's whole count: nothing to send,
                    // nothing to merge back (module `local::cell::departure`).
                    cell.mark_fresh_until(fresh_until_ms);
                    continue;
                }
                chunk.push((key, cell));
                batch.push((key.clone(), count));
            }
            in_flight.taken = end;
            if batch.is_empty() {
                in_flight.done = end;
                continue;
            }
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
                        cell.merge_regional(total, changes);
                        cell.mark_fresh_until(fresh_until_ms);
                    }
                    replayed.batches.push(chunk.len());
                }
                Err(error) => {
                    self.requeue_taken(chunk.iter().map(|&(key, cell)| (key, cell)));
                    replayed.error.get_or_insert(error);
                }
            }
            in_flight.done = end;
            if in_flight.done < in_flight.cells.len() {
                // An origin that answers at once (in-process) never yields: between batches
                // the decisions of a one-worker runtime get the thread back (100,000 pending
                // cells held it for the whole replay), and its batches are small
                // (`max_replay_batch`).
                tokio::task::yield_now().await;
            }
        }
        replayed
    }

    /// Queue again cells taken for a replay that did not land.
    fn requeue_taken<'c>(&self, cells: impl IntoIterator<Item = (&'c CellKey, &'c SharedCell)>) {
        let mut requeue = self.lock();
        for (key, cell) in cells {
            // Re-queued past the cap on purpose: these cells were already in the queue once,
            // and leaving them out would keep their work local.
            if cell.requeue() {
                requeue.push(key.clone(), SharedCell::clone(cell));
            }
        }
    }
}

/// The cells one [`ReplayQueue::replay`] drained: `..done` are settled (merged, or queued
/// again after a failure), `done..taken` were taken for the batch in flight, `taken..` still
/// hold their queue entry. Dropping it before the end queues the unsettled ones again.
struct InFlight<'q> {
    queue: &'q ReplayQueue,
    cells: Vec<(CellKey, SharedCell)>,
    done: usize,
    taken: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.done >= self.cells.len() {
            return;
        }
        let taken = self.cells.get(self.done..self.taken).unwrap_or_default();
        self.queue
            .requeue_taken(taken.iter().map(|(key, cell)| (key, cell)));
        let untaken = self
            .cells
            .get(self.taken.max(self.done)..)
            .unwrap_or_default();
        if untaken.is_empty() {
            return;
        }
        let mut pending = self.queue.lock();
        for (key, cell) in untaken {
            // Still `Queued`: this entry is their only one.
            pending.push(key.clone(), SharedCell::clone(cell));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::regional::{CellRead, InProcessOrigin, OriginFuture};

    /// Answers no replay: every call stays pending until it is dropped.
    struct Hangs;

    impl RegionalOrigin for Hangs {
        fn name(&self) -> &'static str {
            "hangs"
        }

        fn read<'a>(&'a self, _key: &'a CellKey) -> OriginFuture<'a, CellRead> {
            Box::pin(std::future::pending())
        }

        fn replay<'a>(
            &'a self,
            _batch: &'a [(CellKey, PnCount)],
        ) -> OriginFuture<'a, Vec<PnCount>> {
            Box::pin(std::future::pending())
        }
    }

    fn key(identifier: &str) -> CellKey {
        CellKey {
            scope: crate::cell_key::Scope::new("d", "1:k/"),
            identifier: identifier.into(),
            duration_ms: 60_000,
            sequence: 1,
        }
    }

    /// A cell with `count` accepted, queued as the engine queues it.
    fn accepted(queue: &ReplayQueue, identifier: &str, count: u64) -> SharedCell {
        let cell = SharedCell::new(super::super::cell::WindowCell::default());
        let (_, need) =
            cell.try_consume(0, 0, 60_000, count, 1_000, false, &SealedChanges::default());
        assert_eq!(need, super::super::cell::ReplayNeed::Enqueue);
        assert!(queue.push(key(identifier), SharedCell::clone(&cell)));
        cell
    }

    /// The in-process origin answers on the replaying thread: its batches stay small whatever
    /// the engine's `replay_batch` says, so the replay yields to decisions every few dozen
    /// cells, and every cell still lands.
    #[tokio::test]
    async fn an_in_process_replay_goes_in_small_batches() {
        let origin = crate::local::tests::shared_origin(1_000);
        let small = origin.max_replay_batch();
        assert!(small < 100, "{small}");
        let queue = ReplayQueue::new(1_000, 1 << 20, 1_000);
        let ids: Vec<String> = (0..2 * small + 1).map(|i| format!("c{i}")).collect();
        for id in &ids {
            accepted(&queue, id, 1);
        }
        let replayed = queue
            .replay(&origin, u64::MAX, &SealedChanges::default())
            .await;
        assert!(replayed.error.is_none(), "{:?}", replayed.error);
        assert_eq!(replayed.batches, vec![small, small, 1]);
        for id in &ids {
            let read = origin.read(&key(id)).await.expect("in-process read");
            assert_eq!(read.own, PnCount::new(1, 0), "cell {id}");
        }
    }

    /// Alone in its region, the in-process origin holds no copy of a live cell: a replay sends
    /// it only the cells that left the table (an accept after the eviction) and those created
    /// without reading it.
    #[tokio::test]
    async fn alone_the_origin_is_sent_only_departed_and_unseeded_cells() {
        let origin = InProcessOrigin::new(100);
        assert!(!origin.holds_live_cells());
        let queue = ReplayQueue::new(100, 1 << 20, 100);
        accepted(&queue, "live", 2);
        let left = accepted(&queue, "left", 3);
        assert_eq!(left.leave_table(), PnCount::hits(3));
        let unseeded = SharedCell::new(super::super::cell::WindowCell::default());
        unseeded.mark_unseeded();
        let (_, need) =
            unseeded.try_consume(0, 0, 60_000, 4, 1_000, false, &SealedChanges::default());
        assert_eq!(need, super::super::cell::ReplayNeed::Enqueue);
        assert!(queue.push(key("unseeded"), SharedCell::clone(&unseeded)));
        let replayed = queue
            .replay(&origin, u64::MAX, &SealedChanges::default())
            .await;
        assert!(replayed.error.is_none(), "{:?}", replayed.error);
        assert_eq!(replayed.batches, vec![2], "one round trip, two cells");
        assert_eq!(queue.len(), 0, "the live cell's replay is settled too");
        let own = |id: &'static str| {
            let origin = &origin;
            async move { origin.read(&key(id)).await.map(|read| read.own).ok() }
        };
        assert_eq!(own("live").await, Some(PnCount::default()));
        assert_eq!(own("left").await, Some(PnCount::hits(3)));
        assert_eq!(own("unseeded").await, Some(PnCount::hits(4)));
    }

    /// A replay dropped mid-batch (a caller's timeout, a `select!`, a shutdown) must leave
    /// every drained cell queued: the one in flight and the ones not yet taken. Before the
    /// fix, the drained cells were gone from the queue while still marked `Queued`, so no
    /// accept queued them again and no later replay ever carried their work.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_replay_leaves_every_drained_cell_queued() {
        let queue = ReplayQueue::new(100, 1 << 20, 2);
        let cells: Vec<_> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|id| accepted(&queue, id, 3))
            .collect();
        let dropped = tokio::time::timeout(
            Duration::from_millis(10),
            queue.replay(&Hangs, u64::MAX, &SealedChanges::default()),
        )
        .await;
        assert!(
            dropped.is_err(),
            "the hanging replay was cut by the timeout"
        );
        assert_eq!(queue.len(), 5, "all five cells are queued again");

        // Accepts meanwhile do not queue them twice.
        for cell in &cells {
            let (_, need) =
                cell.try_consume(0, 0, 60_000, 1, 1_000, false, &SealedChanges::default());
            assert_eq!(need, super::super::cell::ReplayNeed::None);
        }
        assert_eq!(queue.len(), 5);

        // The next replay carries everything accepted, before and after the drop.
        let origin = crate::local::tests::shared_origin(100);
        let replayed = queue
            .replay(&origin, u64::MAX, &SealedChanges::default())
            .await;
        assert!(replayed.error.is_none(), "{:?}", replayed.error);
        assert_eq!(replayed.batches, vec![2, 2, 1]);
        assert_eq!(queue.len(), 0);
        for id in ["a", "b", "c", "d", "e"] {
            let read = origin.read(&key(id)).await.expect("in-process read");
            assert_eq!(
                read.own,
                PnCount::new(4, 0),
                "cell {id}: 3 + 1 accepted, all published"
            );
        }
    }

    /// Dropped after its first batch landed: the landed cells stay settled (not queued
    /// again), the rest are queued.
    #[tokio::test(start_paused = true)]
    async fn a_replay_dropped_after_a_landed_batch_queues_only_the_rest() {
        /// Answers the first call, hangs on the others.
        struct FirstOnly(InProcessOrigin, std::sync::atomic::AtomicUsize);
        impl RegionalOrigin for FirstOnly {
            fn name(&self) -> &'static str {
                "first-only"
            }
            fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
                self.0.read(key)
            }
            fn replay<'a>(
                &'a self,
                batch: &'a [(CellKey, PnCount)],
            ) -> OriginFuture<'a, Vec<PnCount>> {
                if self.1.fetch_add(1, Ordering::SeqCst) == 0 {
                    self.0.replay(batch)
                } else {
                    Box::pin(std::future::pending())
                }
            }
        }
        let queue = ReplayQueue::new(100, 1 << 20, 2);
        for id in ["a", "b", "c"] {
            accepted(&queue, id, 1);
        }
        let origin = FirstOnly(InProcessOrigin::new(100), Default::default());
        let dropped = tokio::time::timeout(
            Duration::from_millis(10),
            queue.replay(&origin, u64::MAX, &SealedChanges::default()),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(queue.len(), 1, "the landed batch of two is settled");
    }
}
