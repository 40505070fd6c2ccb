//! The previous window's total remembered in a cell, and when it stops being valid.
//!
//! A decision needs the previous window's total; remembering it in the current cell saves
//! a second table lookup per decision. It is valid while no sealed cell (one whose total a
//! later window remembers) changed: [`SealedChanges`] counts those changes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{ReplayNeed, WindowCell};

/// How many times the count of a sealed cell (one whose total a later window's cell
/// remembers) changed, or a sealed cell left the table: one per engine. A remembered
/// previous total is valid while this has not moved since it was read.
///
/// Why a count for the whole engine and not per cell: the current cell cannot see its
/// previous cell without looking it up, which is the lookup this saves. The previous
/// window's total changes only in a few ways once its window is over: the last replay of
/// this process's work (the origin's total merged back), the global sync's foreign counts,
/// a refund of a reservation made in it, an accept delayed across the boundary, the cell
/// evicted and read again; each of them moves this count, and the next decision of every
/// counter looks its previous cell up again. In the embedded default none of them happens
/// after the rollover's first replay, so decisions keep one lookup. Every method that changes
/// a count takes it, so no path can forget it.
///
/// Memory order: a change is a sequentially consistent read-modify-write of the count
/// followed by a sequentially consistent load of `sealed`; remembering is a sequentially
/// consistent store of `sealed`, then loads of this count and of the counts. Whichever comes
/// first, either the remembered total includes the change or the change sees `sealed` and
/// moves this count after it was read.
///
/// Read by every warm decision and written rarely: aligned to its own cache lines (128
/// bytes) so that no neighbouring allocation written often shares them.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct SealedChanges(AtomicU64);

impl SealedChanges {
    /// A sealed cell changed: every remembered previous total is stale.
    fn note(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// The count as `prior` stores it (its low 32 bits: 2³² changes within one cell's life
    /// would be needed to mistake an old total for a valid one).
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst) & u64::from(u32::MAX)
    }
}

/// `prior` when nothing is remembered (a packed value never equals it: totals are below
/// [`PRIOR_TOTAL_MASK`]).
pub(super) const PRIOR_NONE: u64 = u64::MAX;
/// The low 31 bits of `prior` hold the total; a larger total is not remembered (the decision
/// looks the previous cell up, as without this).
const PRIOR_TOTAL_MASK: u64 = (1 << 31) - 1;
/// Bit 31 of `prior`: another region counts in the previous cell.
const PRIOR_SHARED: u64 = 1 << 31;

impl WindowCell {
    /// After any change of the counts a decision reads: if a later window remembers this
    /// cell's total, it is stale now.
    pub(super) fn after_change(&self, changes: &SealedChanges) {
        if self.sealed.load(Ordering::SeqCst) {
            changes.note();
        }
    }

    /// Withdraws an accept of `cost` just made in this cell (`try_consume` allowed it) if a
    /// later window's decision may have read the cell's total without it: the accept was
    /// decided at a time before the window's end and reached the cell after it. A single
    /// limiter would have decided it in the later window; the caller decides it again there.
    /// Returns `None` when it stands; when withdrawn, whether the caller must queue the cell
    /// for replay (the refund must reach the origin as any refund does).
    ///
    /// Sequentially consistent: the accept's compare-and-swap comes before this load of
    /// `sealed`, and a later window stores `sealed` before it loads the counts, so either
    /// that window read the accept or this load sees `sealed` (see `SealedChanges`).
    pub fn withdraw_if_sealed(&self, cost: u64, changes: &SealedChanges) -> Option<ReplayNeed> {
        if cost == 0 || !self.sealed.load(Ordering::SeqCst) {
            return None;
        }
        // A refund of this process's own accept (within `own`, so within the refund rule):
        // both halves only grow, and the replay publishes the pair as for any refund.
        self.own_refunds.fetch_add(cost, Ordering::AcqRel);
        self.regional.refunds.fetch_add(cost, Ordering::SeqCst);
        self.after_change(changes);
        Some(self.claim_queue_slot())
    }

    /// Whether a later window's cell remembers this cell's total.
    pub fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
    }

    /// The table dropped this cell (evicted): a later window that remembers its total must
    /// look the previous cell up again (a new cell read from the origin may take its place).
    pub fn on_leaving_table(&self, changes: &SealedChanges) {
        if self.is_sealed() {
            changes.note();
        }
    }

    /// Remember `previous`'s total (the previous window of this cell's counter) in this cell,
    /// and return it with whether another region counts in it. Later decisions in this cell's
    /// window read it with [`previous`](Self::previous) instead of looking the previous cell
    /// up, until a sealed cell changes (see `SealedChanges`).
    pub fn remember_previous(&self, previous: &WindowCell, changes: &SealedChanges) -> (u64, bool) {
        if !previous.sealed.load(Ordering::SeqCst) {
            previous.sealed.store(true, Ordering::SeqCst);
        }
        let seen = changes.now();
        let regional = previous.regional.load(Ordering::SeqCst);
        let global = previous.global.load(Ordering::SeqCst);
        let total = regional.value().saturating_add(global.value());
        let shared = global.hits > 0;
        if total < PRIOR_TOTAL_MASK {
            let packed = seen << 32 | if shared { PRIOR_SHARED } else { 0 } | total;
            self.prior.store(packed, Ordering::Release);
        }
        (total, shared)
    }

    /// The previous window's total and whether another region counts in it, as
    /// [`remember_previous`](Self::remember_previous) saw it, if no sealed cell changed
    /// since; `None`: look the previous cell up.
    pub fn previous(&self, changes: &SealedChanges) -> Option<(u64, bool)> {
        let prior = self.prior.load(Ordering::Acquire);
        (prior != PRIOR_NONE && prior >> 32 == changes.now())
            .then_some((prior & PRIOR_TOTAL_MASK, prior & PRIOR_SHARED != 0))
    }
}
