//! Where a cell's accepted work stands with the replay queue: queued once per replay cycle,
//! not per request, or overflowed (the queue was full) and waiting to be recovered.

use std::sync::atomic::Ordering;

use super::{ReplayNeed, WindowCell};
use crate::pn::PnCount;

/// A cell's accepted work and the replay queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum ReplayState {
    /// Everything accepted has been handed to a replay (or nothing was accepted).
    Idle = 0,
    /// In the replay queue: later accepts ride along with the queued entry.
    Queued = 1,
    /// Accepted work waits in the cell but the queue was full: the engine recovers such cells
    /// from the table once the queue has room, so one-shot cells reach the origin too.
    Overflowed = 2,
}

impl WindowCell {
    /// Move the cell to `Queued`; `Enqueue` if this call did (the caller pushes it).
    pub(super) fn claim_queue_slot(&self) -> ReplayNeed {
        // Load first: a hot cell is already queued, and a plain load leaves its cache line
        // shared instead of taking it exclusive on every accept. Sequentially consistent (a
        // plain load on x86): see `take_for_replay`.
        let mut state = self.replay.load(Ordering::SeqCst);
        loop {
            if state == ReplayState::Queued as u8 {
                return ReplayNeed::None;
            }
            match self.replay.compare_exchange_weak(
                state,
                ReplayState::Queued as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return ReplayNeed::Enqueue,
                Err(actual) => state = actual,
            }
        }
    }

    /// This process's cumulative count, to publish; the cell leaves the replay queue.
    /// An accept racing with this queues the cell again, so its work goes with the next cycle.
    ///
    /// Sequentially consistent, as the accept's add and its look at the queue state: either
    /// the accept finds the cell `Idle` and queues it again, or this reads its count. With a
    /// release store the loads below could pass it (x86 reorders a store with a later load),
    /// and an accept that found the cell still `Queued` would be read by no replay.
    pub fn take_for_replay(&self) -> PnCount {
        self.replay.store(ReplayState::Idle as u8, Ordering::SeqCst);
        // Refunds first: read after the hits they were capped by, the pair could break the
        // refund rule by a racing accept+refund; read before, it never can.
        let refunds = self.own_refunds.load(Ordering::SeqCst);
        PnCount::new(self.own.load(Ordering::SeqCst), refunds)
    }

    /// A replay failed: returns true if the caller must queue the cell again (nobody else
    /// has since). Nothing to give back: the next replay publishes the cumulative value.
    pub fn requeue(&self) -> bool {
        self.claim_queue_slot() == ReplayNeed::Enqueue
    }

    /// The replay queue was full: the work stays in the cell, marked, until an accept or the
    /// engine's recovery walk queues it again.
    pub fn mark_overflowed(&self) {
        self.replay
            .store(ReplayState::Overflowed as u8, Ordering::Release);
    }

    /// Accepted work waits here with no queue entry to carry it.
    pub fn is_overflowed(&self) -> bool {
        self.replay.load(Ordering::Acquire) == ReplayState::Overflowed as u8
    }

    /// The recovery walk found room for this overflowed cell: `true` if it now owns the
    /// queue entry (an accept may have queued it meanwhile).
    pub fn claim_overflowed(&self) -> bool {
        self.replay
            .compare_exchange(
                ReplayState::Overflowed as u8,
                ReplayState::Queued as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Work waits for a replay (queued, or overflowed and waiting for room).
    pub fn replay_pending(&self) -> bool {
        self.replay.load(Ordering::Acquire) != ReplayState::Idle as u8
    }
}
