//! How far over their limits this process's shared counters are offered, measured over the
//! last interval, and how much faster that makes flush and sync run.
//!
//! The delay term of the bound (README, "How far over the limit regions can go") is what
//! every region admits of the capacity the sliding window frees while the others' counts are
//! on their way: it grows with the overload `ρ − 1` (how many times the freed capacity the
//! regions together would take) and with the delay `d`. Dividing `d` by the overload keeps
//! the product about constant, and spends statements only on limits offered several times
//! over: at the design's load model (keys at most 2× over their limit) no process speeds up,
//! where a speedup on any denial tripled the statements (ACCURACY.md, "Overload cadence").

use std::sync::{Mutex, PoisonError};

use crate::local::SharedDecisions;

/// Denials per admission on shared cells over the last interval: `ρ − 1` for a counter offered
/// `ρ` times its limit (each region admits about `1 ÷ ρ` of what it is offered).
#[derive(Default)]
pub(super) struct Overload {
    /// The older snapshot (from half a span to a span ago) and the newer one.
    snapshots: Mutex<[Snapshot; 2]>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Snapshot {
    at_ms: u64,
    decisions: SharedDecisions,
}

impl Overload {
    /// Denied ÷ admitted on shared cells from the older snapshot to `now` (a span of
    /// `span_ms ÷ 2` to `span_ms`, or since start): infinite when all were denied, 0 when
    /// none were. Call it at least every `span_ms ÷ 2` (the global loop does, at every tick).
    pub fn ratio(&self, now_ms: u64, totals: SharedDecisions, span_ms: u64) -> f64 {
        let mut snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let [older, newer] = &mut *snapshots;
        if now_ms.saturating_sub(newer.at_ms) >= span_ms / 2 {
            *older = *newer;
            *newer = Snapshot {
                at_ms: now_ms,
                decisions: totals,
            };
        }
        let denied = totals.denied.saturating_sub(older.decisions.denied);
        let admitted = totals.admitted.saturating_sub(older.decisions.admitted);
        match (denied, admitted) {
            (0, _) => 0.0,
            (_, 0) => f64::INFINITY,
            (denied, admitted) => denied as f64 / admitted as f64,
        }
    }
}

/// How many times as often flush and sync run at an overload `ratio` (see [`Overload`]):
/// 1 below `threshold`, else the ratio itself rounded down, up to `max` (never below 1).
/// Whole steps, so the interval changes only when the overload does by a whole step.
pub(super) fn speedup(ratio: f64, threshold: f64, max: u32) -> f64 {
    let max = f64::from(max.max(1));
    if ratio < threshold || ratio.is_nan() {
        return 1.0;
    }
    ratio.floor().clamp(1.0, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(admitted: u64, denied: u64) -> SharedDecisions {
        SharedDecisions { admitted, denied }
    }

    #[test]
    fn the_ratio_covers_half_a_span_to_a_span() {
        let overload = Overload::default();
        assert_eq!(overload.ratio(0, totals(0, 0), 1_000), 0.0);
        // since start: 10 admitted, 40 denied
        assert_eq!(overload.ratio(400, totals(10, 40), 1_000), 4.0);
        // 500 ms on: the window moves to start at 0 (the snapshot taken then)
        assert_eq!(overload.ratio(500, totals(10, 40), 1_000), 4.0);
        // later traffic is admitted: the old denials leave the window a span later
        assert_eq!(overload.ratio(900, totals(30, 40), 1_000), 40.0 / 30.0);
        assert_eq!(overload.ratio(1_000, totals(40, 40), 1_000), 0.0);
        assert_eq!(overload.ratio(1_200, totals(40, 50), 1_000), 10.0 / 30.0);
        assert_eq!(overload.ratio(1_500, totals(40, 60), 1_000), f64::INFINITY);
    }

    #[test]
    fn the_speedup_follows_the_overload_above_the_threshold() {
        assert_eq!(speedup(0.0, 2.0, 4), 1.0);
        assert_eq!(speedup(1.9, 2.0, 4), 1.0, "2.9× the limit: normal cadence");
        assert_eq!(speedup(2.0, 2.0, 4), 2.0);
        assert_eq!(speedup(3.5, 2.0, 4), 3.0);
        assert_eq!(speedup(9.0, 2.0, 4), 4.0);
        assert_eq!(speedup(f64::INFINITY, 2.0, 4), 4.0);
        assert_eq!(speedup(9.0, 2.0, 1), 1.0, "speedup 1: never faster");
        assert_eq!(speedup(0.5, 0.0, 4), 1.0);
    }
}
