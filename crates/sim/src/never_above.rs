//! "Never above", judged after the run from its log of admissions, by code of its own.
//!
//! A bounded counter promises that the fleet never admits more than one process deciding
//! alone with every request would: every admission, counted with all the fleet's admissions
//! before it, passes the single process's rule (docs/design.md, "The sliding window"):
//!
//! ```text
//! sequence  = at_ms / window_ms        elapsed = at_ms % window_ms
//! effective = admitted before it in sequence + cost
//!           + ⌊admitted in sequence − 1 × (window_ms − elapsed) / window_ms⌋
//! effective ≤ limit
//! ```
//!
//! With a fixed window (no weight for the previous cell) that is at most the limit per
//! window. The oracle reads only the log (which key, when): not the rights, the ledger or
//! the holders that decided.

use std::collections::HashMap;

use serde::Serialize;

/// One admission of cost 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub key: usize,
    pub at_ms: u64,
}

/// An admission the single process would have refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Excess {
    pub key: usize,
    pub at_ms: u64,
    /// Its effective count (> limit).
    pub effective: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Judgement {
    /// Admissions above the single process's rule: must be 0.
    pub excesses: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_excess: Option<Excess>,
    /// The highest effective count of any admission ÷ limit: at most 1.
    pub max_effective: f64,
    /// The most admitted in one fixed window ÷ limit.
    pub max_window: f64,
}

/// Judges `log` (in any order) for a limit of `limit` per `window_ms`.
pub fn judge(limit: u64, window_ms: u64, log: &[Admission]) -> Judgement {
    let window = window_ms.max(1);
    let mut sorted = log.to_vec();
    sorted.sort_by_key(|a| (a.key, a.at_ms));
    let mut per_window: HashMap<(usize, u64), u64> = HashMap::new();
    let mut judgement = Judgement::default();
    let mut worst = 0u64;
    for admission in sorted {
        let sequence = admission.at_ms / window;
        let left = u128::from(window - admission.at_ms % window);
        let before = sequence
            .checked_sub(1)
            .and_then(|s| per_window.get(&(admission.key, s)))
            .copied()
            .unwrap_or(0);
        let current = per_window.entry((admission.key, sequence)).or_default();
        let weighted = u128::from(before) * left / u128::from(window);
        let effective = u64::try_from(u128::from(*current) + 1 + weighted).unwrap_or(u64::MAX);
        *current += 1;
        worst = worst.max(effective);
        if effective > limit {
            judgement.excesses += 1;
            judgement.first_excess.get_or_insert(Excess {
                key: admission.key,
                at_ms: admission.at_ms,
                effective,
            });
        }
    }
    let most = per_window.values().copied().max().unwrap_or(0);
    let limit = limit.max(1) as f64;
    judgement.max_effective = worst as f64 / limit;
    judgement.max_window = most as f64 / limit;
    judgement
}

#[cfg(test)]
mod tests;
