//! Planted defects for the chaos checker (`scripts/chaos.py --plant`) and the tests of the
//! RLQS bursts: a checker that never goes red proves nothing, so each invariant it checks has
//! a defect that must turn it red.
//!
//! A defect is planted by naming it in `GCOUNTER_PLANT` (comma-separated). Only debug builds
//! read the variable: in a release build [`planted`] is a constant `false` and the planted
//! branches compile away, so no shipped binary can carry one.

/// A defect the service can carry for the chaos checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// Each replay publishes every cell one hit short of what this process accepted.
    ReplayShort,
    /// Each global flush publishes every row one count short of the region's count.
    FlushShort,
    /// Every third RLQS usage report is read and then ignored: its counts never reach a
    /// counter.
    RlqsReportIgnored,
    /// An RLQS bucket alone on its counter is lent no more than one that shares it.
    RlqsLoneCapped,
    /// A lone RLQS burst is never taken back when another bucket joins its counter.
    RlqsNoTakeBack,
    /// What an RLQS bucket is lent is not charged against its counter's room.
    RlqsLendUncharged,
    /// A `never_above` RLQS bucket's token bucket is taken without its refill: only its
    /// tokens.
    RlqsTakeShort,
    /// A `never_above` limit on a shared origin is decided from this process's counts alone,
    /// without rights.
    NeverAboveUnshared,
    /// A `never_above` take weighs the previous cell's rights in full all through the next
    /// cell: never above the limit, but every other window starves.
    NeverAbovePreviousFull,
}

impl Plant {
    /// The name `GCOUNTER_PLANT` and `scripts/chaos.py --plant` use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ReplayShort => "replay-short",
            Self::FlushShort => "flush-short",
            Self::RlqsReportIgnored => "rlqs-report-ignored",
            Self::RlqsLoneCapped => "rlqs-lone-capped",
            Self::RlqsNoTakeBack => "rlqs-no-take-back",
            Self::RlqsLendUncharged => "rlqs-lend-uncharged",
            Self::RlqsTakeShort => "rlqs-take-short",
            Self::NeverAboveUnshared => "never-above-unshared",
            Self::NeverAbovePreviousFull => "never-above-previous-full",
        }
    }
}

/// Whether `plant` is planted in this process. Always `false` in a release build.
#[cfg(debug_assertions)]
pub fn planted(plant: Plant) -> bool {
    static PLANTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PLANTED
        .get_or_init(|| std::env::var("GCOUNTER_PLANT").unwrap_or_default())
        .split(',')
        .any(|name| name.trim() == plant.name())
}

/// Whether `plant` is planted in this process. Always `false` in a release build.
#[cfg(not(debug_assertions))]
pub const fn planted(_plant: Plant) -> bool {
    false
}

/// `count`, or one fewer where `plant` is planted: a count lost on its way out.
pub fn short(plant: Plant, count: u64) -> u64 {
    if planted(plant) {
        return count.saturating_sub(1);
    }
    count
}

/// Whether to drop this one of a stream of events where `plant` is planted: every third
/// call, counted across the process, answers `true`.
pub fn drop_one_in_three(plant: Plant) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    planted(plant) && CALLS.fetch_add(1, Ordering::Relaxed) % 3 == 2
}

/// The planted defects, for the one warning a process logs at start when it carries any.
pub fn planted_names() -> Vec<&'static str> {
    [
        Plant::ReplayShort,
        Plant::FlushShort,
        Plant::RlqsReportIgnored,
        Plant::RlqsLoneCapped,
        Plant::RlqsNoTakeBack,
        Plant::RlqsLendUncharged,
        Plant::RlqsTakeShort,
        Plant::NeverAboveUnshared,
        Plant::NeverAbovePreviousFull,
    ]
    .into_iter()
    .filter(|plant| planted(*plant))
    .map(Plant::name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_planted_without_the_variable() {
        // The test runner does not set GCOUNTER_PLANT: every count passes unchanged.
        assert!(std::env::var("GCOUNTER_PLANT").is_err());
        assert!(planted_names().is_empty());
        assert_eq!(short(Plant::ReplayShort, 7), 7);
        assert!((0..6).all(|_| !drop_one_in_three(Plant::RlqsReportIgnored)));
    }
}
