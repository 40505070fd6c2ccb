//! "Never below", judged from the run's own ground truth, not by the engine.
//!
//! The design's promise (docs/design.md, "Never below"): every count a process holds of
//! another process or region is one that was really admitted, so no process's view of a
//! counter is ever above the fleet's true counts, and a request the true counts have room
//! for is admitted. The oracle holds those true counts (every admission of every process,
//! no lag, as the simulator saw it) and applies the design's window arithmetic to them,
//! written here from the design and not taken from the engine:
//!
//! ```text
//! sequence  = at_ms / window_ms           elapsed = at_ms % window_ms
//! effective = admitted(sequence)
//!           + ⌊admitted(sequence − 1) × (window_ms − elapsed) / window_ms⌋ + cost
//! a request is within the limit when effective ≤ limit
//! ```
//!
//! A denial of a request within the limit is a false denial. An admission of a request
//! over it is an over-admission (what the lags allow; the accuracy figures measure it).
//!
//! The plainest case: a counter whose requests sent in the current and previous window,
//! this one included, total at most the limit is within it (what was admitted is at most
//! what was sent), so none of them may be denied.

use std::collections::HashMap;

use serde::Serialize;

/// A request the oracle says had to be admitted, and was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FalseDenial {
    /// The request's number in the run (0 for the first).
    pub request: u64,
    pub key: usize,
    pub at_ms: u64,
}

/// The fleet's true admitted counts per (key, fixed window), and the verdicts they judge.
pub struct NeverBelow {
    limit: u64,
    window_ms: u64,
    admitted: HashMap<(usize, u64), u64>,
    false_denials: Vec<FalseDenial>,
    over_admissions: u64,
}

impl NeverBelow {
    pub fn new(limit: u64, window_ms: u64) -> Self {
        Self {
            limit,
            window_ms: window_ms.max(1),
            admitted: HashMap::new(),
            false_denials: Vec::new(),
            over_admissions: 0,
        }
    }

    fn admitted(&self, key: usize, sequence: Option<u64>) -> u128 {
        sequence
            .and_then(|s| self.admitted.get(&(key, s)))
            .map_or(0, |&n| u128::from(n))
    }

    /// Whether the true counts have room for `cost` on `key` at `at_ms`.
    pub fn within_limit(&self, key: usize, at_ms: u64, cost: u64) -> bool {
        let sequence = at_ms / self.window_ms;
        let left_of_previous = u128::from(self.window_ms - at_ms % self.window_ms);
        let current = self.admitted(key, Some(sequence));
        let previous = self.admitted(key, sequence.checked_sub(1));
        let weighted = previous * left_of_previous / u128::from(self.window_ms);
        current + weighted + u128::from(cost) <= u128::from(self.limit)
    }

    /// Judge request number `request` (cost `cost` on `key` at `at_ms`) that got `allowed`,
    /// then count it if it was admitted.
    pub fn record(&mut self, request: u64, key: usize, at_ms: u64, cost: u64, allowed: bool) {
        let within = self.within_limit(key, at_ms, cost);
        if allowed {
            *self
                .admitted
                .entry((key, at_ms / self.window_ms))
                .or_default() += cost;
            if !within {
                self.over_admissions += 1;
            }
        } else if within {
            self.false_denials.push(FalseDenial {
                request,
                key,
                at_ms,
            });
        }
    }

    pub fn false_denials(&self) -> &[FalseDenial] {
        &self.false_denials
    }

    pub fn over_admissions(&self) -> u64 {
        self.over_admissions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u64 = 10;
    const W: u64 = 1_000;

    /// `count` admissions of cost 1 on key 0 at `at_ms`.
    fn admit(oracle: &mut NeverBelow, at_ms: u64, count: u64) {
        for _ in 0..count {
            oracle.record(0, 0, at_ms, 1, true);
        }
    }

    #[test]
    fn a_denial_with_room_left_is_a_false_denial() {
        let mut oracle = NeverBelow::new(LIMIT, W);
        admit(&mut oracle, 100, 9);
        oracle.record(7, 0, 200, 1, false); // 9 + 1 = 10 ≤ 10: had to pass
        assert_eq!(
            oracle.false_denials(),
            &[FalseDenial {
                request: 7,
                key: 0,
                at_ms: 200
            }]
        );
    }

    #[test]
    fn reaching_the_limit_exactly_is_within_it() {
        let mut oracle = NeverBelow::new(LIMIT, W);
        admit(&mut oracle, 100, 9);
        assert!(oracle.within_limit(0, 300, 1));
        assert!(!oracle.within_limit(0, 300, 2));
        admit(&mut oracle, 300, 1);
        oracle.record(1, 0, 400, 1, false); // 11 > 10: a fair denial
        assert!(oracle.false_denials().is_empty());
        assert_eq!(oracle.over_admissions(), 0);
    }

    #[test]
    fn the_previous_window_weighs_by_what_is_left_of_it() {
        let mut oracle = NeverBelow::new(LIMIT, W);
        admit(&mut oracle, 900, 10);
        // At 1250, 75 % of the previous window is still inside: ⌊10 × 750 / 1000⌋ = 7.
        assert!(oracle.within_limit(0, 1_250, 3));
        assert!(!oracle.within_limit(0, 1_250, 4));
        // At 1251, ⌊10 × 749 / 1000⌋ = 7 (rounded down): still 3 left.
        assert!(oracle.within_limit(0, 1_251, 3));
        // At 1300, ⌊10 × 700 / 1000⌋ = 7; at 1301, 6: one more.
        assert!(oracle.within_limit(0, 1_301, 4));
        // Exactly at the boundary the whole previous window counts: nothing left.
        assert!(!oracle.within_limit(0, 1_000, 1));
        // Two windows later it no longer counts.
        assert!(oracle.within_limit(0, 2_000, 10));
    }

    #[test]
    fn keys_are_counted_apart() {
        let mut oracle = NeverBelow::new(LIMIT, W);
        admit(&mut oracle, 0, 10);
        assert!(!oracle.within_limit(0, 10, 1));
        assert!(oracle.within_limit(1, 10, 10));
    }

    #[test]
    fn an_admission_over_the_limit_is_an_over_admission_and_is_counted() {
        let mut oracle = NeverBelow::new(LIMIT, W);
        admit(&mut oracle, 0, 11);
        assert_eq!(oracle.over_admissions(), 1);
        // the 11th is part of the truth: the next window starts with ⌊11 × 1⌋ behind it
        assert!(!oracle.within_limit(0, 1_000, 1));
        assert!(oracle.false_denials().is_empty());
    }
}
