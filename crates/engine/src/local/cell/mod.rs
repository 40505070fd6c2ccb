//! One counter cell: the counts of a fixed window of one limit.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::decision::{Decision, decide};
use crate::pn::PnCount;

/// The counts of one cell, shared by the hot path and the background tasks through atomics.
///
/// Every count is one half of a PN-counter ([`PnCount`]): hits and refunds, each a G-Counter
/// that only grows inside the cell and merges with `max`; the value is `hits − refunds`,
/// never below zero. `regional` holds this region's count: local accepts add to its hits with
/// compare-and-swap, local refunds to its refunds, and totals read back from the regional
/// origin are merged into each half with `max`, so a late merge never subtracts accepted work
/// nor undoes a refund. `global` holds the other regions' sum, merged with `max` per half by
/// the global sync; own and foreign stay separate so a region never counts its own traffic
/// twice.
#[derive(Debug)]
pub struct WindowCell {
    regional: PnAtomic,
    global: PnAtomic,
    /// The previous window's total as a decision in this (current) cell's window last saw it,
    /// with the [`SealedChanges`] count it is valid for ([`WindowCell::remember_previous`]):
    /// while no sealed cell changed since, a decision reads it here instead of looking the
    /// previous cell up (one table lookup per decision instead of two). [`PRIOR_NONE`]: none.
    prior: AtomicU64,
    /// Everything this process accepted in the cell (its component's hits at the origin).
    /// Replay publishes this cumulative value, so a resend is harmless.
    own: AtomicU64,
    /// Everything this process refunded in the cell, never above `own` (the refund rule).
    own_refunds: AtomicU64,
    /// Until when (ms since the epoch) `regional` may be trusted without reading the origin.
    /// 0 = stale. Only a successful read or replay moves it forward.
    fresh_until_ms: AtomicU64,
    /// A synchronous origin read of this cell is in flight (single flight).
    refreshing: AtomicBool,
    /// Where the cell's accepted work stands with the replay queue ([`ReplayState`]): queued
    /// once per cycle, not per request; or overflowed, waiting to be recovered.
    replay: AtomicU8,
    /// Taken out of eviction (see `table::Protection`): at or near its limit, or holding work
    /// the replay queue had no room for. Set once, by the table, and never cleared: the cell
    /// leaves memory only when the reaper drops it at the end of its window.
    protected: AtomicBool,
    /// A later window's cell remembers this cell's total ([`WindowCell::remember_previous`]):
    /// every change of its count from then on is counted in [`SealedChanges`], which makes
    /// every remembered total stale. Set once, never cleared.
    sealed: AtomicBool,
    /// The limit of the most recent decision (limits are `u32`; larger ones saturate): the
    /// global flush publishes a cell only once its count reaches a fraction of it (counts far
    /// below a limit matter to no other region). 32 bits, beside the flags: the cell stays
    /// within one allocator size class more.
    limit: AtomicU32,
    /// `hits + refunds` of the regional count last written to the global counters
    /// successfully. Both halves only grow, so the sum grows whenever either does: one word
    /// tells "changed since" for both.
    published: AtomicU64,
}

/// Both halves of a PN-counter in atomics, merged with `max` per half.
#[derive(Debug, Default)]
struct PnAtomic {
    hits: AtomicU64,
    refunds: AtomicU64,
}

impl PnAtomic {
    fn new(count: PnCount) -> Self {
        Self {
            hits: AtomicU64::new(count.hits),
            refunds: AtomicU64::new(count.refunds),
        }
    }

    fn load(&self, order: Ordering) -> PnCount {
        PnCount::new(self.hits.load(order), self.refunds.load(order))
    }

    /// `max` per half (sequentially consistent: see [`SealedChanges`]); whether either grew.
    fn merge(&self, total: PnCount) -> bool {
        let hits = self.hits.fetch_max(total.hits, Ordering::SeqCst);
        let refunds = self.refunds.fetch_max(total.refunds, Ordering::SeqCst);
        hits < total.hits || refunds < total.refunds
    }
}

/// What `published` remembers of a count: `hits + refunds`, which grows whenever either half
/// does (both only grow), so comparing it tells whether anything changed.
fn published_mark(count: PnCount) -> u64 {
    count.hits.saturating_add(count.refunds)
}

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
const PRIOR_NONE: u64 = u64::MAX;
/// The low 31 bits of `prior` hold the total; a larger total is not remembered (the decision
/// looks the previous cell up, as without this).
const PRIOR_TOTAL_MASK: u64 = (1 << 31) - 1;
/// Bit 31 of `prior`: another region counts in the previous cell.
const PRIOR_SHARED: u64 = 1 << 31;

/// A cell as the table, the replay queue and the global flush share it. `triomphe`'s `Arc`
/// has no weak count: with it the cell's allocation (88 B) stays in the 96 B size class that
/// std's `Arc` (two counts) filled before the cell remembered its previous total.
pub type SharedCell = triomphe::Arc<WindowCell>;

/// A cell's accepted work and the replay queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum ReplayState {
    /// Everything accepted has been handed to a replay (or nothing was accepted).
    Idle = 0,
    /// In the replay queue: later accepts ride along with the queued entry.
    Queued = 1,
    /// Accepted work waits in the cell but the queue was full: the engine recovers such cells
    /// from the table once the queue has room, so one-shot cells reach the origin too.
    Overflowed = 2,
}

/// What an accept asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayNeed {
    /// Nothing consumed, or the cell is already queued.
    None,
    /// Consumed work waits in the cell: put the cell in the replay queue.
    Enqueue,
}

impl Default for WindowCell {
    fn default() -> Self {
        Self {
            regional: PnAtomic::default(),
            global: PnAtomic::default(),
            prior: AtomicU64::new(PRIOR_NONE),
            own: AtomicU64::new(0),
            own_refunds: AtomicU64::new(0),
            fresh_until_ms: AtomicU64::new(0),
            refreshing: AtomicBool::new(false),
            replay: AtomicU8::new(ReplayState::Idle as u8),
            protected: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            limit: AtomicU32::new(0),
            published: AtomicU64::new(0),
        }
    }
}

impl WindowCell {
    /// A cell seeded from the origin: the region's total and this process's component.
    pub fn seeded(regional: PnCount, own: PnCount) -> Self {
        let own = own.capped();
        Self {
            regional: PnAtomic::new(PnCount::new(
                regional.hits.max(own.hits),
                regional.refunds.max(own.refunds),
            )),
            own: AtomicU64::new(own.hits),
            own_refunds: AtomicU64::new(own.refunds),
            ..Self::default()
        }
    }

    /// `regional + global` (each `hits − refunds`): the count a decision sees for this cell.
    pub fn total(&self) -> u64 {
        self.regional_count()
            .value()
            .saturating_add(self.global_count().value())
    }

    /// This region's hits (the hits half of `regional`).
    pub fn regional(&self) -> u64 {
        self.regional.hits.load(Ordering::Acquire)
    }

    /// This region's count, both halves.
    pub fn regional_count(&self) -> PnCount {
        self.regional.load(Ordering::Acquire)
    }

    /// The other regions' hits (the hits half of `global`).
    pub fn global(&self) -> u64 {
        self.global.hits.load(Ordering::Acquire)
    }

    /// The other regions' count, both halves.
    pub fn global_count(&self) -> PnCount {
        self.global.load(Ordering::Acquire)
    }

    /// Decide and, when allowed with a cost, consume `cost` atomically.
    ///
    /// The compare-and-swap makes the check and the increment one step: concurrent requests
    /// on one cell never admit more than the limit. Denials and peeks consume nothing.
    pub fn try_consume(
        &self,
        previous_total: u64,
        elapsed_ms: u64,
        duration_ms: u64,
        cost: u64,
        limit: u64,
        changes: &SealedChanges,
    ) -> (Decision, ReplayNeed) {
        // Written only when it changes, so a hot cell's cache line is not dirtied per request.
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        if self.limit.load(Ordering::Relaxed) != limit32 {
            self.limit.store(limit32, Ordering::Relaxed);
        }
        let global = self.global_count().value();
        let mut regional = self.regional.hits.load(Ordering::Acquire);
        loop {
            // Refunds read inside the loop: one racing with this accept only makes it stricter.
            let refunds = self.regional.refunds.load(Ordering::Acquire);
            let current = regional.saturating_sub(refunds).saturating_add(global);
            let decision = decide(
                current,
                previous_total,
                elapsed_ms,
                duration_ms,
                cost,
                limit,
            );
            if !decision.allowed || cost == 0 {
                return (decision, ReplayNeed::None);
            }
            // Sequentially consistent: see `SealedChanges` (on x86 a locked CAS costs the
            // same either way).
            match self.regional.hits.compare_exchange_weak(
                regional,
                regional.saturating_add(cost),
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.own.fetch_add(cost, Ordering::AcqRel);
                    // An accept delayed across the window's end, into a cell a later window
                    // already remembers.
                    self.after_change(changes);
                    return (decision, self.claim_queue_slot());
                }
                Err(actual) => regional = actual,
            }
        }
    }

    /// Give back up to `amount` of what this process consumed in the cell (the refund rule:
    /// never more than its own hits minus its own refunds so far). Returns what was refunded
    /// and whether the caller must queue the cell for replay.
    ///
    /// Both halves only grow: the refund adds to `own_refunds` and to `regional`'s refunds, so the
    /// replay of a refund is as idempotent as the replay of a hit.
    pub fn refund(&self, amount: u64, changes: &SealedChanges) -> (u64, ReplayNeed) {
        let mut refunded = self.own_refunds.load(Ordering::Acquire);
        let given = loop {
            let headroom = self.own.load(Ordering::Acquire).saturating_sub(refunded);
            let give = amount.min(headroom);
            if give == 0 {
                return (0, ReplayNeed::None);
            }
            match self.own_refunds.compare_exchange_weak(
                refunded,
                refunded + give,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break give,
                Err(actual) => refunded = actual,
            }
        };
        self.regional.refunds.fetch_add(given, Ordering::SeqCst);
        self.after_change(changes);
        (given, self.claim_queue_slot())
    }

    /// Move the cell to `Queued`; `Enqueue` if this call did (the caller pushes it).
    fn claim_queue_slot(&self) -> ReplayNeed {
        // Load first: a hot cell is already queued, and a plain load leaves its cache line
        // shared instead of taking it exclusive on every accept.
        let mut state = self.replay.load(Ordering::Acquire);
        loop {
            if state == ReplayState::Queued as u8 {
                return ReplayNeed::None;
            }
            match self.replay.compare_exchange_weak(
                state,
                ReplayState::Queued as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return ReplayNeed::Enqueue,
                Err(actual) => state = actual,
            }
        }
    }

    /// This process's cumulative count, to publish; the cell leaves the replay queue.
    /// An accept racing with this queues the cell again, so its work goes with the next cycle.
    pub fn take_for_replay(&self) -> PnCount {
        self.replay
            .store(ReplayState::Idle as u8, Ordering::Release);
        // Refunds first: read after the hits they were capped by, the pair could break the
        // refund rule by a racing accept+refund; read before, it never can.
        let refunds = self.own_refunds.load(Ordering::Acquire);
        PnCount::new(self.own.load(Ordering::Acquire), refunds)
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

    /// Whether forgetting this cell would cost more than forgetting an idle one: its count is
    /// at or near its limit (forgetting it would let the same client through again in the
    /// same window), or it holds accepted work no replay carries.
    pub fn deserves_protection(&self) -> bool {
        let limit = u64::from(self.limit.load(Ordering::Relaxed));
        let near = limit.saturating_sub(limit / 4);
        (limit > 0 && self.total() >= near) || self.is_overflowed()
    }

    /// Take the cell out of eviction for the rest of its life (see `table::Protection`).
    pub fn protect(&self) {
        self.protected.store(true, Ordering::Release);
    }

    pub fn is_protected(&self) -> bool {
        self.protected.load(Ordering::Acquire)
    }

    /// Merge a regional total read from the origin: `max` per half, never backwards.
    pub fn merge_regional(&self, total: PnCount, changes: &SealedChanges) {
        if self.regional.merge(total) {
            self.after_change(changes);
        }
    }

    /// Merge this process's component as the origin holds it (after a re-read).
    pub fn merge_own(&self, own: PnCount, changes: &SealedChanges) {
        let own = own.capped();
        self.own.fetch_max(own.hits, Ordering::AcqRel);
        self.own_refunds.fetch_max(own.refunds, Ordering::AcqRel);
        self.merge_regional(own, changes);
    }

    /// This process's hits in the cell.
    pub fn own(&self) -> u64 {
        self.own.load(Ordering::Acquire)
    }

    /// This process's component, both halves.
    pub fn own_count(&self) -> PnCount {
        PnCount::new(self.own(), self.own_refunds.load(Ordering::Acquire))
    }

    /// Merge the other regions' sum: `max` per half, never backwards.
    pub fn merge_global(&self, total: PnCount, changes: &SealedChanges) {
        if self.global.merge(total) {
            self.after_change(changes);
        }
    }

    /// After any change of the counts a decision reads: if a later window remembers this
    /// cell's total, it is stale now.
    fn after_change(&self, changes: &SealedChanges) {
        if self.sealed.load(Ordering::SeqCst) {
            changes.note();
        }
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
    /// up, until a sealed cell changes (see [`SealedChanges`]).
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

    /// The regional count to publish to the global counters, if its hits are at or above
    /// `floor × limit` and either half changed since the last successful publication.
    pub fn to_publish(&self, floor: f64) -> Option<PnCount> {
        let regional = self.regional_count();
        let limit = self.limit.load(Ordering::Relaxed);
        let threshold = (f64::from(limit) * floor).ceil() as u64;
        let changed = published_mark(regional) > self.published.load(Ordering::Acquire);
        (regional.hits > 0 && regional.hits >= threshold && changed).then_some(regional)
    }

    /// Record a successful publication (never moves back).
    pub fn mark_published(&self, count: PnCount) {
        self.published
            .fetch_max(published_mark(count), Ordering::AcqRel);
    }

    pub fn is_stale(&self, now_ms: u64) -> bool {
        now_ms >= self.fresh_until_ms.load(Ordering::Acquire)
    }

    /// Called after a successful read or replay only: a failure never makes a cell fresh.
    pub fn mark_fresh_until(&self, until_ms: u64) {
        self.fresh_until_ms.fetch_max(until_ms, Ordering::AcqRel);
    }

    /// Claim the right to read this cell from the origin; `false` if a read is in flight.
    pub fn begin_refresh(&self) -> bool {
        !self.refreshing.swap(true, Ordering::AcqRel)
    }

    pub fn end_refresh(&self) {
        self.refreshing.store(false, Ordering::Release);
    }

    pub fn is_refreshing(&self) -> bool {
        self.refreshing.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_requests_consume_nothing() {
        let changes = SealedChanges::default();
        let cell = WindowCell::seeded(PnCount::hits(10), PnCount::hits(0));
        let (d, need) = cell.try_consume(0, 0, 1_000, 1, 10, &changes);
        assert!(!d.allowed);
        assert_eq!(need, ReplayNeed::None);
        assert_eq!(cell.regional(), 10);
        assert_eq!(cell.take_for_replay().hits, 0);
    }

    #[test]
    fn merges_never_move_a_count_back() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 3, 10, &changes);
        cell.merge_regional(PnCount::hits(1), &changes);
        assert_eq!(cell.regional(), 3);
        cell.merge_regional(PnCount::hits(7), &changes);
        cell.merge_global(PnCount::hits(4), &changes);
        cell.merge_global(PnCount::hits(2), &changes);
        assert_eq!((cell.regional(), cell.global(), cell.total()), (7, 4, 11));
    }

    /// Accept a hit of cost 1 (limit 10): what the caller must do with the replay queue.
    fn accept_one(cell: &WindowCell, changes: &SealedChanges) -> ReplayNeed {
        cell.try_consume(0, 0, 1_000, 1, 10, changes).1
    }

    #[test]
    fn a_cell_is_queued_once_per_replay_cycle() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
        assert_eq!(
            cell.try_consume(0, 0, 1_000, 2, 10, &changes).1,
            ReplayNeed::None
        );
        assert_eq!(cell.take_for_replay().hits, 3);
        assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
        assert_eq!(cell.take_for_replay().hits, 4, "cumulative, not a delta");
    }

    #[test]
    fn a_failed_replay_queues_the_cell_once() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 2, 10, &changes);
        assert_eq!(cell.take_for_replay().hits, 2);
        assert!(cell.requeue(), "nobody re-queued it");
        assert_eq!(accept_one(&cell, &changes), ReplayNeed::None);
        assert!(!cell.requeue());
        assert_eq!(cell.take_for_replay().hits, 3);
    }

    #[test]
    fn an_overflowed_cell_is_queued_again_once() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
        cell.mark_overflowed();
        assert!(cell.is_overflowed() && cell.deserves_protection());
        // the recovery walk and a later accept race: exactly one of them queues it
        assert!(cell.claim_overflowed());
        assert!(!cell.claim_overflowed());
        assert_eq!(accept_one(&cell, &changes), ReplayNeed::None);
        assert_eq!(cell.take_for_replay().hits, 2);
        assert!(
            !cell.deserves_protection(),
            "replayed and far from its limit"
        );
        cell.try_consume(0, 0, 1_000, 6, 10, &changes);
        assert!(cell.deserves_protection(), "8 of 10 is near the limit");
    }

    #[test]
    fn a_reseeded_cell_resumes_its_own_component() {
        let changes = SealedChanges::default();
        let cell = WindowCell::seeded(PnCount::hits(9), PnCount::hits(4));
        cell.try_consume(0, 0, 1_000, 1, 20, &changes);
        assert_eq!((cell.regional(), cell.own()), (10, 5));
        cell.merge_own(PnCount::hits(3), &changes);
        assert_eq!(cell.own(), 5, "never backwards");
    }

    #[test]
    fn only_success_makes_a_cell_fresh() {
        let cell = WindowCell::default();
        assert!(cell.is_stale(5));
        cell.mark_fresh_until(100);
        assert!(!cell.is_stale(99));
        cell.mark_fresh_until(50);
        assert!(cell.is_stale(100), "freshness never moves back");
        assert!(cell.begin_refresh());
        assert!(!cell.begin_refresh(), "one read at a time");
        cell.end_refresh();
        assert!(cell.begin_refresh());
    }

    #[test]
    fn only_meaningful_changed_counts_are_published() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        for _ in 0..4 {
            cell.try_consume(0, 0, 1_000, 1, 10, &changes);
        }
        assert_eq!(cell.to_publish(0.5), None, "4 is below half of 10");
        cell.try_consume(0, 0, 1_000, 1, 10, &changes);
        assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(5)));
        cell.mark_published(PnCount::hits(5));
        assert_eq!(
            cell.to_publish(0.5),
            None,
            "unchanged since the last publication"
        );
        cell.merge_regional(PnCount::hits(7), &changes);
        assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(7)));
        assert_eq!(cell.to_publish(0.0), Some(PnCount::hits(7)));
    }

    #[test]
    fn a_refund_gives_back_only_what_this_process_consumed() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        assert_eq!(
            cell.refund(5, &changes),
            (0, ReplayNeed::None),
            "nothing consumed here"
        );
        assert_eq!(
            cell.try_consume(0, 0, 1_000, 8, 10, &changes).1,
            ReplayNeed::Enqueue
        );
        assert_eq!(cell.take_for_replay(), PnCount::new(8, 0));
        assert_eq!(
            cell.refund(3, &changes),
            (3, ReplayNeed::Enqueue),
            "a refund is replayed too"
        );
        assert_eq!(cell.total(), 5);
        assert_eq!(cell.refund(100, &changes).0, 5, "capped at own hits");
        assert_eq!(cell.refund(1, &changes).0, 0);
        assert_eq!(cell.total(), 0, "never below zero");
        assert_eq!(cell.take_for_replay(), PnCount::new(8, 8));
        // the refunded budget is there again, and a later hit counts in full
        assert!(cell.try_consume(0, 0, 1_000, 10, 10, &changes).0.allowed);
        assert!(!cell.try_consume(0, 0, 1_000, 1, 10, &changes).0.allowed);
    }

    #[test]
    fn merges_never_move_either_half_back() {
        let changes = SealedChanges::default();
        let cell = WindowCell::seeded(PnCount::new(10, 4), PnCount::new(3, 9));
        assert_eq!(
            cell.own_count(),
            PnCount::new(3, 3),
            "a seeded component is capped"
        );
        assert_eq!(cell.regional_count(), PnCount::new(10, 4));
        cell.merge_regional(PnCount::new(8, 6), &changes);
        assert_eq!(cell.regional_count(), PnCount::new(10, 6));
        cell.merge_regional(PnCount::new(8, 6), &changes);
        assert_eq!(cell.regional_count(), PnCount::new(10, 6), "idempotent");
        cell.merge_global(PnCount::new(5, 1), &changes);
        cell.merge_global(PnCount::new(2, 3), &changes);
        assert_eq!(cell.global_count(), PnCount::new(5, 3));
        assert_eq!(cell.total(), 4 + 2);
        // refunds beyond hits (another origin's view) never make a count negative
        cell.merge_global(PnCount::new(0, 50), &changes);
        assert_eq!(cell.total(), 4);
    }

    #[test]
    fn a_cell_stays_small_with_both_halves() {
        // The budget's CELL_OVERHEAD_BYTES counts on it (with the Arc's count: 88 B, the
        // same allocation size as the 72 B cell with std's Arc and its two counts; 72 B before
        // the remembered previous total, 56 B before refunds).
        assert_eq!(std::mem::size_of::<WindowCell>(), 80);
    }

    #[test]
    fn refunds_are_published_even_when_hits_did_not_change() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 6, 10, &changes);
        let first = cell.to_publish(0.5);
        assert_eq!(first, Some(PnCount::hits(6)));
        cell.mark_published(PnCount::hits(6));
        cell.refund(2, &changes);
        assert_eq!(cell.to_publish(0.5), Some(PnCount::new(6, 2)));
    }

    /// The previous window's total is remembered in the current cell, and any change of the
    /// previous cell after that (a late replay's total, a foreign count, a refund, a delayed
    /// accept) makes the remembered total stale: the next decision reads the cell again.
    #[test]
    fn a_remembered_previous_total_holds_until_the_previous_cell_changes() {
        let changes = SealedChanges::default();
        let previous = WindowCell::default();
        previous.try_consume(0, 0, 1_000, 4, 10, &changes);
        let current = WindowCell::default();
        assert_eq!(current.previous(&changes), None, "nothing remembered yet");
        assert_eq!(current.remember_previous(&previous, &changes), (4, false));
        assert_eq!(current.previous(&changes), Some((4, false)));

        // a merge that changes nothing keeps it
        previous.merge_regional(PnCount::hits(4), &changes);
        previous.merge_global(PnCount::default(), &changes);
        assert_eq!(current.previous(&changes), Some((4, false)));

        let stale_after = |change: &dyn Fn(), expected: (u64, bool)| {
            change();
            assert_eq!(current.previous(&changes), None, "stale after a change");
            assert_eq!(current.remember_previous(&previous, &changes), expected);
            assert_eq!(current.previous(&changes), Some(expected));
        };
        stale_after(
            &|| previous.merge_regional(PnCount::hits(6), &changes),
            (6, false),
        );
        stale_after(
            &|| previous.merge_global(PnCount::hits(3), &changes),
            (9, true),
        );
        stale_after(
            &|| previous.merge_own(PnCount::hits(7), &changes),
            (10, true),
        );
        stale_after(
            &|| {
                previous.refund(2, &changes);
            },
            (8, true),
        );
        stale_after(
            &|| {
                previous.try_consume(0, 0, 1_000, 1, 100, &changes);
            },
            (9, true),
        );
        stale_after(&|| previous.on_leaving_table(&changes), (9, true));
    }

    /// Only sealed cells count: the current cell's own accepts and merges (every decision,
    /// every replay) leave remembered totals valid.
    #[test]
    fn changes_of_unsealed_cells_keep_remembered_totals() {
        let changes = SealedChanges::default();
        let previous = WindowCell::default();
        let current = WindowCell::default();
        current.remember_previous(&previous, &changes);
        assert!(previous.is_sealed() && !current.is_sealed());
        current.try_consume(0, 0, 1_000, 1, 10, &changes);
        current.merge_regional(PnCount::hits(5), &changes);
        current.merge_global(PnCount::hits(1), &changes);
        current.on_leaving_table(&changes);
        assert_eq!(current.previous(&changes), Some((0, false)));
    }

    /// A total too large for the packed word is not remembered: the decision reads the cell.
    #[test]
    fn a_huge_previous_total_is_read_each_time() {
        let changes = SealedChanges::default();
        let previous = WindowCell::seeded(PnCount::hits(1 << 40), PnCount::default());
        let current = WindowCell::default();
        assert_eq!(
            current.remember_previous(&previous, &changes),
            (1 << 40, false)
        );
        assert_eq!(current.previous(&changes), None);
    }

    #[test]
    fn foreign_counts_take_part_in_the_decision() {
        let changes = SealedChanges::default();
        let cell = WindowCell::default();
        cell.merge_global(PnCount::hits(9), &changes);
        assert!(cell.try_consume(0, 0, 1_000, 1, 10, &changes).0.allowed);
        assert!(!cell.try_consume(0, 0, 1_000, 1, 10, &changes).0.allowed);
        assert_eq!(cell.regional(), 1);
    }
}
