//! One counter cell: the counts of a fixed window of one limit.

use std::sync::atomic::{AtomicU64, Ordering};

use super::decision::{Decision, decide};

/// The counts of one cell, shared by the hot path and the background tasks through atomics.
///
/// `regional` holds this region's count: local accepts are added to it with compare-and-swap,
/// and totals read back from the regional origin are merged into it with `max`, so a late
/// merge never subtracts accepted work. `global` holds the other regions' sum, merged with
/// `max` by the global sync; own and foreign stay separate so a region never counts its own
/// traffic twice.
#[derive(Debug, Default)]
pub struct WindowCell {
    regional: AtomicU64,
    global: AtomicU64,
    /// Local accepts not yet replayed to the regional origin.
    unreplayed: AtomicU64,
}

impl WindowCell {
    pub fn with_regional(regional: u64) -> Self {
        Self {
            regional: AtomicU64::new(regional),
            ..Self::default()
        }
    }

    /// `regional + global`: the count a decision sees for this cell.
    pub fn total(&self) -> u64 {
        self.regional
            .load(Ordering::Acquire)
            .saturating_add(self.global.load(Ordering::Acquire))
    }

    pub fn regional(&self) -> u64 {
        self.regional.load(Ordering::Acquire)
    }

    pub fn global(&self) -> u64 {
        self.global.load(Ordering::Acquire)
    }

    /// Decide and, when allowed with a cost, consume `cost` atomically.
    ///
    /// The compare-and-swap makes the check and the increment one step: concurrent requests
    /// on one cell never admit more than the limit. Denials and peeks consume nothing.
    /// Returns the decision and whether this accept is the first unreplayed work of the cell
    /// (the caller then queues the cell for replay, once per replay cycle rather than per request).
    pub fn try_consume(
        &self,
        previous_total: u64,
        elapsed_ms: u64,
        duration_ms: u64,
        cost: u64,
        limit: u64,
    ) -> (Decision, bool) {
        let global = self.global.load(Ordering::Acquire);
        let mut regional = self.regional.load(Ordering::Acquire);
        loop {
            let current = regional.saturating_add(global);
            let decision = decide(
                current,
                previous_total,
                elapsed_ms,
                duration_ms,
                cost,
                limit,
            );
            if !decision.allowed || cost == 0 {
                return (decision, false);
            }
            match self.regional.compare_exchange_weak(
                regional,
                regional.saturating_add(cost),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let first = self.unreplayed.fetch_add(cost, Ordering::AcqRel) == 0;
                    return (decision, first);
                }
                Err(actual) => regional = actual,
            }
        }
    }

    /// Take the local work accumulated since the last replay.
    pub fn take_unreplayed(&self) -> u64 {
        self.unreplayed.swap(0, Ordering::AcqRel)
    }

    /// Give back work whose replay failed, so it is sent with the next batch.
    /// Returns true if the cell had no other unreplayed work (it must be queued again).
    pub fn restore_unreplayed(&self, amount: u64) -> bool {
        amount > 0 && self.unreplayed.fetch_add(amount, Ordering::AcqRel) == 0
    }

    /// Merge a regional total read from the origin: `max`, never backwards.
    pub fn merge_regional(&self, total: u64) {
        self.regional.fetch_max(total, Ordering::AcqRel);
    }

    /// Merge the other regions' sum: `max`, never backwards.
    pub fn merge_global(&self, total: u64) {
        self.global.fetch_max(total, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_requests_consume_nothing() {
        let cell = WindowCell::with_regional(10);
        let (d, _) = cell.try_consume(0, 0, 1_000, 1, 10);
        assert!(!d.allowed);
        assert_eq!(cell.regional(), 10);
        assert_eq!(cell.take_unreplayed(), 0);
    }

    #[test]
    fn merges_never_move_a_count_back() {
        let cell = WindowCell::default();
        cell.try_consume(0, 0, 1_000, 3, 10);
        cell.merge_regional(1);
        assert_eq!(cell.regional(), 3);
        cell.merge_regional(7);
        cell.merge_global(4);
        cell.merge_global(2);
        assert_eq!((cell.regional(), cell.global(), cell.total()), (7, 4, 11));
    }

    #[test]
    fn only_the_first_unreplayed_accept_asks_for_a_replay() {
        let cell = WindowCell::default();
        assert!(cell.try_consume(0, 0, 1_000, 1, 10).1);
        assert!(!cell.try_consume(0, 0, 1_000, 2, 10).1);
        assert_eq!(cell.take_unreplayed(), 3);
        assert!(cell.try_consume(0, 0, 1_000, 1, 10).1);
    }

    #[test]
    fn foreign_counts_take_part_in_the_decision() {
        let cell = WindowCell::default();
        cell.merge_global(9);
        assert!(cell.try_consume(0, 0, 1_000, 1, 10).0.allowed);
        assert!(!cell.try_consume(0, 0, 1_000, 1, 10).0.allowed);
        assert_eq!(cell.regional(), 1);
    }
}
