//! Strict mode: after a denial, the counter's next decisions read the origin first.
//!
//! A denial means the region is at its limit, where a few stale counts matter most; so until
//! `now + duration` every decision on that counter refreshes its current cell from the
//! regional origin. Keyed by the counter (`CounterKey`, no sequence), it survives the window
//! rollover.

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::budget::STRICT_ENTRY_BYTES;
use crate::cell_key::{CounterKey, CounterKeyRef};

/// Bounded in bytes (its share of `--max-cell-bytes`): each entry weighs its key's strings.
/// An evicted deadline only means the counter's next decisions trust the local count until
/// the cell goes stale, as before the denial.
pub struct StrictMode {
    /// Counter → deadline in ms since the epoch.
    deadlines: Cache<CounterKey, u64, EntryWeighter>,
}

#[derive(Clone)]
struct EntryWeighter;

impl Weighter<CounterKey, u64> for EntryWeighter {
    fn weight(&self, key: &CounterKey, _: &u64) -> u64 {
        STRICT_ENTRY_BYTES + key.heap_bytes() as u64
    }
}

impl StrictMode {
    pub fn new(max_bytes: u64) -> Self {
        let max_bytes = max_bytes.max(STRICT_ENTRY_BYTES);
        Self {
            deadlines: Cache::with_weighter(
                (max_bytes / STRICT_ENTRY_BYTES) as usize,
                max_bytes,
                EntryWeighter,
            ),
        }
    }

    pub fn is_strict(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> bool {
        self.deadlines
            .get(counter)
            .is_some_and(|deadline| now_ms < deadline)
    }

    pub fn enter(&self, counter: &CounterKeyRef<'_>, until_ms: u64) {
        self.deadlines.insert(counter.to_owned_key(), until_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn strict_mode_lasts_a_duration_across_rollover() {
        let strict = StrictMode::new(10 * STRICT_ENTRY_BYTES);
        let (ws, ns): (Arc<str>, Arc<str>) = ("d".into(), "1:k/".into());
        let counter = CounterKeyRef::new(&ws, &ns, "1:a", 1_000);
        assert!(!strict.is_strict(&counter, 5_500));
        strict.enter(&counter, 6_500);
        assert!(strict.is_strict(&counter, 6_000), "the next window too");
        assert!(!strict.is_strict(&counter, 6_500));
    }
}
