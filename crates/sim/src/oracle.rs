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
mod tests;
