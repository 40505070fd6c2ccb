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
#[derive(Debug, Default)]
pub struct WindowCell {
    regional: AtomicU64,
    regional_refunds: AtomicU64,
    global: AtomicU64,
    global_refunds: AtomicU64,
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

/// What `published` remembers of a count: `hits + refunds`, which grows whenever either half
/// does (both only grow), so comparing it tells whether anything changed.
fn published_mark(count: PnCount) -> u64 {
    count.hits.saturating_add(count.refunds)
}

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

impl WindowCell {
    /// A cell seeded from the origin: the region's total and this process's component.
    pub fn seeded(regional: PnCount, own: PnCount) -> Self {
        let own = own.capped();
        Self {
            regional: AtomicU64::new(regional.hits.max(own.hits)),
            regional_refunds: AtomicU64::new(regional.refunds.max(own.refunds)),
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
        self.regional.load(Ordering::Acquire)
    }

    /// This region's count, both halves.
    pub fn regional_count(&self) -> PnCount {
        PnCount::new(
            self.regional.load(Ordering::Acquire),
            self.regional_refunds.load(Ordering::Acquire),
        )
    }

    /// The other regions' hits (the hits half of `global`).
    pub fn global(&self) -> u64 {
        self.global.load(Ordering::Acquire)
    }

    /// The other regions' count, both halves.
    pub fn global_count(&self) -> PnCount {
        PnCount::new(
            self.global.load(Ordering::Acquire),
            self.global_refunds.load(Ordering::Acquire),
        )
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
    ) -> (Decision, ReplayNeed) {
        // Written only when it changes, so a hot cell's cache line is not dirtied per request.
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        if self.limit.load(Ordering::Relaxed) != limit32 {
            self.limit.store(limit32, Ordering::Relaxed);
        }
        let global = self.global_count().value();
        let mut regional = self.regional.load(Ordering::Acquire);
        loop {
            // Refunds read inside the loop: one racing with this accept only makes it stricter.
            let refunds = self.regional_refunds.load(Ordering::Acquire);
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
            match self.regional.compare_exchange_weak(
                regional,
                regional.saturating_add(cost),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.own.fetch_add(cost, Ordering::AcqRel);
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
    /// Both halves only grow: the refund adds to `own_refunds` and `regional_refunds`, so the
    /// replay of a refund is as idempotent as the replay of a hit.
    pub fn refund(&self, amount: u64) -> (u64, ReplayNeed) {
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
        self.regional_refunds.fetch_add(given, Ordering::AcqRel);
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
    pub fn merge_regional(&self, total: PnCount) {
        self.regional.fetch_max(total.hits, Ordering::AcqRel);
        self.regional_refunds
            .fetch_max(total.refunds, Ordering::AcqRel);
    }

    /// Merge this process's component as the origin holds it (after a re-read).
    pub fn merge_own(&self, own: PnCount) {
        let own = own.capped();
        self.own.fetch_max(own.hits, Ordering::AcqRel);
        self.own_refunds.fetch_max(own.refunds, Ordering::AcqRel);
        self.merge_regional(own);
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
    pub fn merge_global(&self, total: PnCount) {
        self.global.fetch_max(total.hits, Ordering::AcqRel);
        self.global_refunds
            .fetch_max(total.refunds, Ordering::AcqRel);
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
        let cell = WindowCell::seeded(PnCount::hits(10), PnCount::hits(0));
        let (d, need) = cell.try_consume(0, 0, 1_000, 1, 10);
        assert!(!d.allowed);
        assert_eq!(need, ReplayNeed::None);
        assert_eq!(cell.regional(), 10);
        assert_eq!(cell.take_for_replay().hits, 0);
    }

    #[test]
    fn merges_never_move_a_count_back() {
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 3, 10);
        cell.merge_regional(PnCount::hits(1));
        assert_eq!(cell.regional(), 3);
        cell.merge_regional(PnCount::hits(7));
        cell.merge_global(PnCount::hits(4));
        cell.merge_global(PnCount::hits(2));
        assert_eq!((cell.regional(), cell.global(), cell.total()), (7, 4, 11));
    }

    #[test]
    fn a_cell_is_queued_once_per_replay_cycle() {
        let cell = WindowCell::default();
        assert_eq!(cell.try_consume(0, 0, 1_000, 1, 10).1, ReplayNeed::Enqueue);
        assert_eq!(cell.try_consume(0, 0, 1_000, 2, 10).1, ReplayNeed::None);
        assert_eq!(cell.take_for_replay().hits, 3);
        assert_eq!(cell.try_consume(0, 0, 1_000, 1, 10).1, ReplayNeed::Enqueue);
        assert_eq!(cell.take_for_replay().hits, 4, "cumulative, not a delta");
    }

    #[test]
    fn a_failed_replay_queues_the_cell_once() {
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 2, 10);
        assert_eq!(cell.take_for_replay().hits, 2);
        assert!(cell.requeue(), "nobody re-queued it");
        assert_eq!(cell.try_consume(0, 0, 1_000, 1, 10).1, ReplayNeed::None);
        assert!(!cell.requeue());
        assert_eq!(cell.take_for_replay().hits, 3);
    }

    #[test]
    fn an_overflowed_cell_is_queued_again_once() {
        let cell = WindowCell::default();
        assert_eq!(cell.try_consume(0, 0, 1_000, 1, 10).1, ReplayNeed::Enqueue);
        cell.mark_overflowed();
        assert!(cell.is_overflowed() && cell.deserves_protection());
        // the recovery walk and a later accept race: exactly one of them queues it
        assert!(cell.claim_overflowed());
        assert!(!cell.claim_overflowed());
        assert_eq!(cell.try_consume(0, 0, 1_000, 1, 10).1, ReplayNeed::None);
        assert_eq!(cell.take_for_replay().hits, 2);
        assert!(
            !cell.deserves_protection(),
            "replayed and far from its limit"
        );
        cell.try_consume(0, 0, 1_000, 6, 10);
        assert!(cell.deserves_protection(), "8 of 10 is near the limit");
    }

    #[test]
    fn a_reseeded_cell_resumes_its_own_component() {
        let cell = WindowCell::seeded(PnCount::hits(9), PnCount::hits(4));
        cell.try_consume(0, 0, 1_000, 1, 20);
        assert_eq!((cell.regional(), cell.own()), (10, 5));
        cell.merge_own(PnCount::hits(3));
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
        let cell = WindowCell::default();
        for _ in 0..4 {
            cell.try_consume(0, 0, 1_000, 1, 10);
        }
        assert_eq!(cell.to_publish(0.5), None, "4 is below half of 10");
        cell.try_consume(0, 0, 1_000, 1, 10);
        assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(5)));
        cell.mark_published(PnCount::hits(5));
        assert_eq!(
            cell.to_publish(0.5),
            None,
            "unchanged since the last publication"
        );
        cell.merge_regional(PnCount::hits(7));
        assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(7)));
        assert_eq!(cell.to_publish(0.0), Some(PnCount::hits(7)));
    }

    #[test]
    fn a_refund_gives_back_only_what_this_process_consumed() {
        let cell = WindowCell::default();
        assert_eq!(
            cell.refund(5),
            (0, ReplayNeed::None),
            "nothing consumed here"
        );
        assert_eq!(cell.try_consume(0, 0, 1_000, 8, 10).1, ReplayNeed::Enqueue);
        assert_eq!(cell.take_for_replay(), PnCount::new(8, 0));
        assert_eq!(
            cell.refund(3),
            (3, ReplayNeed::Enqueue),
            "a refund is replayed too"
        );
        assert_eq!(cell.total(), 5);
        assert_eq!(cell.refund(100).0, 5, "capped at own hits");
        assert_eq!(cell.refund(1).0, 0);
        assert_eq!(cell.total(), 0, "never below zero");
        assert_eq!(cell.take_for_replay(), PnCount::new(8, 8));
        // the refunded budget is there again, and a later hit counts in full
        assert!(cell.try_consume(0, 0, 1_000, 10, 10).0.allowed);
        assert!(!cell.try_consume(0, 0, 1_000, 1, 10).0.allowed);
    }

    #[test]
    fn merges_never_move_either_half_back() {
        let cell = WindowCell::seeded(PnCount::new(10, 4), PnCount::new(3, 9));
        assert_eq!(
            cell.own_count(),
            PnCount::new(3, 3),
            "a seeded component is capped"
        );
        assert_eq!(cell.regional_count(), PnCount::new(10, 4));
        cell.merge_regional(PnCount::new(8, 6));
        assert_eq!(cell.regional_count(), PnCount::new(10, 6));
        cell.merge_regional(PnCount::new(8, 6));
        assert_eq!(cell.regional_count(), PnCount::new(10, 6), "idempotent");
        cell.merge_global(PnCount::new(5, 1));
        cell.merge_global(PnCount::new(2, 3));
        assert_eq!(cell.global_count(), PnCount::new(5, 3));
        assert_eq!(cell.total(), 4 + 2);
        // refunds beyond hits (another origin's view) never make a count negative
        cell.merge_global(PnCount::new(0, 50));
        assert_eq!(cell.total(), 4);
    }

    #[test]
    fn a_cell_stays_small_with_both_halves() {
        // The budget's CELL_OVERHEAD_BYTES counts on it (with the Arc's counts: 88 B; 72 B
        // before refunds).
        assert_eq!(std::mem::size_of::<WindowCell>(), 72);
    }

    #[test]
    fn refunds_are_published_even_when_hits_did_not_change() {
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 6, 10);
        let first = cell.to_publish(0.5);
        assert_eq!(first, Some(PnCount::hits(6)));
        cell.mark_published(PnCount::hits(6));
        cell.refund(2);
        assert_eq!(cell.to_publish(0.5), Some(PnCount::new(6, 2)));
    }

    #[test]
    fn foreign_counts_take_part_in_the_decision() {
        let cell = WindowCell::default();
        cell.merge_global(PnCount::hits(9));
        assert!(cell.try_consume(0, 0, 1_000, 1, 10).0.allowed);
        assert!(!cell.try_consume(0, 0, 1_000, 1, 10).0.allowed);
        assert_eq!(cell.regional(), 1);
    }
}
