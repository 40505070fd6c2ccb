//! Strict mode: after a denial, the counter's next decisions read the origin first.
//!
//! A denial means the region is at its limit, where a few stale counts matter most; so until
//! `now + duration` every decision on that counter refreshes its current cell from the
//! regional origin. Keyed per counter (no sequence), it survives the window rollover.

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::budget::STRICT_ENTRY_BYTES;
use crate::cell_key::{CellKey, CellKeyRef};

/// Bounded in bytes (its share of `--max-cell-bytes`): each entry weighs its key's strings.
/// An evicted deadline only means the counter's next decisions trust the local count until
/// the cell goes stale, as before the denial.
pub struct StrictMode {
    /// Counter (its key with `sequence` 0) → deadline in ms since the epoch.
    deadlines: Cache<CellKey, u64, EntryWeighter>,
}

#[derive(Clone)]
struct EntryWeighter;

impl Weighter<CellKey, u64> for EntryWeighter {
    fn weight(&self, key: &CellKey, _: &u64) -> u64 {
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

    fn counter<'a>(cell: &CellKeyRef<'a>) -> CellKeyRef<'a> {
        cell.with_sequence(0)
    }

    pub fn is_strict(&self, cell: &CellKeyRef<'_>, now_ms: u64) -> bool {
        self.deadlines
            .get(&Self::counter(cell))
            .is_some_and(|deadline| now_ms < deadline)
    }

    pub fn enter(&self, cell: &CellKeyRef<'_>, until_ms: u64) {
        self.deadlines
            .insert(Self::counter(cell).to_owned_key(), until_ms);
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
        let cell = |sequence| CellKeyRef::new(&ws, &ns, "1:a", 1_000, sequence);
        assert!(!strict.is_strict(&cell(5), 5_500));
        strict.enter(&cell(5), 6_500);
        assert!(strict.is_strict(&cell(6), 6_000), "the next window too");
        assert!(!strict.is_strict(&cell(6), 6_500));
    }
}
