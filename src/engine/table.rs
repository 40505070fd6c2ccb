//! The bounded table of live cells.

use std::sync::Arc;

use quick_cache::sync::{Cache, DefaultLifecycle, GuardResult, PlaceholderGuard};
use quick_cache::{DefaultHashBuilder, UnitWeighter};

use super::cell::WindowCell;
use crate::cell_key::{CellKey, CellKeyRef};

/// Live cells, capped at `max_cells`.
///
/// `quick_cache` is sharded (no lock shared by all keys) and enforces a strict cap with
/// S3-FIFO eviction: one-off keys leave first and recently used (hot) keys stay, which is the
/// least-recently-used behaviour the design asks for while resisting floods of unique
/// identifiers (DEPENDENCIES.md measured it keeping every hot key under such a flood).
/// An evicted cell still in its window is re-read from the regional origin when it returns.
pub struct CellTable {
    cells: Cache<CellKey, Arc<WindowCell>>,
}

type CellGuard<'a> = PlaceholderGuard<
    'a,
    CellKey,
    Arc<WindowCell>,
    UnitWeighter,
    DefaultHashBuilder,
    DefaultLifecycle<CellKey, Arc<WindowCell>>,
>;

/// The outcome of looking a cell up.
pub enum Lookup<'a> {
    Warm(Arc<WindowCell>),
    /// The cell is not in memory; the holder must fill it. Concurrent lookups of the same key
    /// wait for this one (single flight), so a cold cell is read from the origin once.
    Cold(CellGuard<'a>),
}

impl CellTable {
    pub fn new(max_cells: usize) -> Self {
        Self {
            cells: Cache::new(max_cells.max(1)),
        }
    }

    /// A warm hit takes no allocation: the borrowed key is compared in place.
    pub fn get(&self, key: &CellKeyRef<'_>) -> Option<Arc<WindowCell>> {
        self.cells.get(key)
    }

    /// Look up, or get the right to create, a cell.
    pub async fn get_or_guard(&self, key: &CellKey) -> Lookup<'_> {
        match self.cells.get_value_or_guard_async(key).await {
            Ok(cell) => Lookup::Warm(cell),
            Err(guard) => Lookup::Cold(guard),
        }
    }

    /// The cell of `key`, created empty when missing (the global sync imports counts for
    /// cells this process has not used yet). Returns whether it was created.
    pub fn get_or_insert_empty(&self, key: &CellKey) -> (Arc<WindowCell>, bool) {
        match self.cells.get_value_or_guard(key, None) {
            GuardResult::Value(cell) => (cell, false),
            GuardResult::Guard(guard) => {
                let cell = Arc::new(WindowCell::default());
                let _ = guard.insert(Arc::clone(&cell));
                (cell, true)
            }
            // Only with a timeout, and none was given; a detached cell is harmless.
            GuardResult::Timeout => (Arc::new(WindowCell::default()), false),
        }
    }

    /// Every live cell, for the background walks (global flush).
    pub fn cells(&self) -> impl Iterator<Item = (CellKey, Arc<WindowCell>)> + '_ {
        self.cells.iter()
    }

    /// Drop cells older than the previous window of their own duration: no decision reads
    /// them any more. Returns how many were removed.
    pub fn reap(&self, now_ms: u64) -> usize {
        let before = self.cells.len();
        self.cells.retain(|key, _| {
            let current = now_ms / key.duration_ms.max(1);
            key.sequence.saturating_add(1) >= current
        });
        before.saturating_sub(self.cells.len())
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl CellTable {
        fn capacity(&self) -> u64 {
            self.cells.capacity()
        }
    }

    fn key(id: &str, duration_ms: u64, sequence: u64) -> CellKey {
        CellKey {
            workspace: "d".into(),
            namespace: "1:k/".into(),
            identifier: id.into(),
            duration_ms,
            sequence,
        }
    }

    #[test]
    fn reaping_keeps_the_current_and_previous_cells() {
        let table = CellTable::new(100);
        for seq in [7, 8, 9, 10] {
            table.get_or_insert_empty(&key("a", 1_000, seq));
        }
        // now is in cell 10: cells 9 and 10 stay
        assert_eq!(table.reap(10_500), 2);
        assert!(table.get(&key("a", 1_000, 9).borrowed()).is_some());
        assert!(table.get(&key("a", 1_000, 8).borrowed()).is_none());
    }

    #[test]
    fn the_cap_holds_under_a_flood_of_unique_keys() {
        let table = CellTable::new(1_000);
        for i in 0..20_000 {
            table.get_or_insert_empty(&key(&i.to_string(), 1_000, 1));
        }
        assert!(table.len() as u64 <= table.capacity());
        assert!(table.len() > 500);
    }
}
