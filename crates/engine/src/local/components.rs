//! The other regions' components of the cells sync read, one per region, bounded in bytes:
//! what lets an incremental sync read only the rows that changed.
//!
//! A cell's foreign count is the sum of the other regions' components. A sync that read whole
//! sums read every region's row of a cell whenever one of them changed: at one hot key, all
//! of them on nearly every sync. Reading only the changed rows needs the others kept here, so
//! the sum can be made again. Each component is merged with `max`, so the sum is a lower bound
//! of the cell's foreign count, as a whole sum read was.
//!
//! An entry evicted past the share (the least recently read first) or never held (heavier
//! than the share) is summed from the rows of the read alone: still a lower bound, merged
//! into the cell with `max` like every foreign count, and whole again after the next full
//! read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::budget::{COMPONENT_BYTES, COMPONENTS_ENTRY_BYTES};
use super::table::expires_at_ms;
use crate::cell_key::CellKey;
use crate::pn::PnCount;

/// One cell's components, a region each.
type Components = Arc<[(Arc<str>, PnCount)]>;

/// The components of one cell that one read returned, a region each.
pub type ReadComponents = Vec<(Arc<str>, PnCount)>;

/// Cell → the other regions' components sync read, within its share of `--max-cell-bytes`.
pub struct ForeignComponents {
    cells: Cache<CellKey, Components, EntryWeighter>,
    /// Held through each merge's read and write of an entry: two syncs at once (a fast tick's
    /// and the normal cadence's) must not drop each other's components.
    merging: Mutex<()>,
}

#[derive(Clone)]
struct EntryWeighter;

impl Weighter<CellKey, Components> for EntryWeighter {
    fn weight(&self, key: &CellKey, components: &Components) -> u64 {
        let regions: usize = components.iter().map(|(region, _)| region.len()).sum();
        COMPONENTS_ENTRY_BYTES
            + key.heap_bytes() as u64
            + components.len() as u64 * COMPONENT_BYTES
            + regions as u64
    }
}

impl ForeignComponents {
    pub fn new(max_bytes: u64) -> Self {
        let max_bytes = max_bytes.max(COMPONENTS_ENTRY_BYTES);
        Self {
            cells: Cache::with_weighter(
                (max_bytes / COMPONENTS_ENTRY_BYTES) as usize,
                max_bytes,
                EntryWeighter,
            ),
            merging: Mutex::new(()),
        }
    }

    /// Merge one read's foreign rows of `key` into what is held; returns the cell's foreign
    /// count: the sum of every component held, or of `read`'s alone when the cell cannot be
    /// held.
    pub fn merge(&self, key: &CellKey, read: &[(Arc<str>, PnCount)]) -> PnCount {
        let _merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        // Keyed by region: a read of many rows of one cell (whatever the table holds) costs
        // n log n, not n².
        let mut components: BTreeMap<Arc<str>, PnCount> = self
            .cells
            .get(key)
            .map(|held| held.iter().cloned().collect())
            .unwrap_or_default();
        for (region, count) in read {
            components
                .entry(Arc::clone(region))
                .and_modify(|held| *held = held.merge(*count))
                .or_insert(*count);
        }
        let sum = components
            .iter()
            .fold(PnCount::default(), |sum, (_, count)| sum.plus(*count));
        if !components.is_empty() {
            self.cells
                .insert(key.clone(), components.into_iter().collect());
        }
        sum
    }

    /// Drop the cells whose window no longer counts at `now_ms` (the store's rows of them have
    /// expired too), so that the share holds live cells rather than waiting for eviction.
    pub fn forget_expired(&self, now_ms: u64) {
        self.cells.retain(|key, _| expires_at_ms(key) > now_ms);
    }

    /// Bytes the entries weigh (their keys' strings included).
    pub fn bytes(&self) -> u64 {
        self.cells.weight()
    }

    /// The most the entries may weigh.
    pub fn max_bytes(&self) -> u64 {
        self.cells.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(identifier: &str) -> CellKey {
        CellKey::new("w", "1:k/", identifier, 60_000, 1)
    }

    fn rows(of: &[(&str, u64)]) -> Vec<(Arc<str>, PnCount)> {
        of.iter()
            .map(|(region, hits)| (Arc::from(*region), PnCount::hits(*hits)))
            .collect()
    }

    #[test]
    fn a_read_of_some_components_sums_with_those_held() {
        let held = ForeignComponents::new(1 << 20);
        let cell = key("a");
        assert_eq!(held.merge(&cell, &rows(&[("b", 3), ("c", 4)])).hits, 7);
        assert_eq!(held.merge(&cell, &rows(&[("c", 6)])).hits, 9);
        // An older value of a component never moves it back.
        assert_eq!(held.merge(&cell, &rows(&[("b", 1)])).hits, 9);
        assert_eq!(held.merge(&key("other"), &rows(&[("b", 2)])).hits, 2);
    }

    #[test]
    fn an_expired_cell_is_forgotten() {
        let held = ForeignComponents::new(1 << 20);
        let cell = key("a");
        held.merge(&cell, &rows(&[("b", 3)]));
        // Window 1 of a minute counts until the end of window 2.
        held.forget_expired(180_000 - 1);
        assert_eq!(held.merge(&cell, &[]).hits, 3);
        held.forget_expired(180_000);
        assert_eq!(held.merge(&cell, &[]).hits, 0);
        assert_eq!(held.bytes(), 0);
    }

    #[test]
    fn past_its_share_a_cell_sums_the_read_alone() {
        let held = ForeignComponents::new(COMPONENTS_ENTRY_BYTES);
        let long = key(&"x".repeat(4_096));
        assert_eq!(held.merge(&long, &rows(&[("b", 3)])).hits, 3);
        assert_eq!(
            held.merge(&long, &rows(&[("c", 4)])).hits,
            4,
            "b was not held"
        );
        assert!(held.bytes() <= held.max_bytes());
    }
}
