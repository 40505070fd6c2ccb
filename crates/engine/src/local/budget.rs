//! The byte budget of everything the engine keys by [`CellKey`]: how `--max-cell-bytes` is
//! shared out, and what one cell weighs.
//!
//! A cap in cells alone let a client who sends long descriptors hold gigabytes in a few
//! thousand cells. Each structure that holds a `CellKey` (the cell
//! table, its protected cells, the replay queue, strict mode) therefore gets a fixed share
//! of one byte budget, and weighs each entry by the bytes it really holds.

use crate::cell_key::CellKey;

/// What a cell holds besides its key's strings: the key itself, the `SharedCell` and its
/// allocation, and quick_cache's slot, links, hash-table entry and ghost record.
/// Sizes on x86-64: `CellKey` 72 B, the `SharedCell` 8 B, the cell's allocation 88 B (its
/// counters, both halves of each PN-counter, the remembered previous total, with the
/// `triomphe::Arc`'s count; before the remembered total: 72 B with std's `Arc` and its two
/// counts, 88 B too), quick_cache ~40 B per resident entry with its share of ghosts. The memory
/// bench measured 241 B per live cell with the in-process origin's ~50 B component included,
/// before refunds added 16 B to the cell (the in-process origin keeps refunds in a map of
/// their own, filled only by components that have some).
pub const CELL_OVERHEAD_BYTES: u64 = 208;

/// Bytes of one replay-queue entry besides its key's strings.
pub const QUEUE_ENTRY_BYTES: u64 =
    (size_of::<CellKey>() + size_of::<super::cell::SharedCell>()) as u64;

/// Bytes of one entry of [`super::components::ForeignComponents`] besides its key's strings
/// and its components (the key, the components' allocation and quick_cache's bookkeeping).
pub const COMPONENTS_ENTRY_BYTES: u64 = size_of::<CellKey>() as u64 + 16 + 40;

/// Bytes of one region's component in a [`super::components::ForeignComponents`] entry (the
/// region's name is shared by every entry, and weighed there by its length).
pub const COMPONENT_BYTES: u64 =
    (size_of::<std::sync::Arc<str>>() + size_of::<crate::pn::PnCount>()) as u64;

/// Bytes of one entry of [`super::deadlines::CounterDeadlines`] (strict mode, the penalty
/// box) besides its key's strings (the key, the moment and quick_cache's bookkeeping).
pub const DEADLINE_ENTRY_BYTES: u64 = size_of::<CellKey>() as u64 + 8 + 40;

/// The weight of a cell with this key: what it holds in the table.
pub fn cell_bytes(key: &CellKey) -> u64 {
    CELL_OVERHEAD_BYTES + key.heap_bytes() as u64
}

/// `--max-cell-bytes` shared out. The shares are fixed so the sum never exceeds the budget:
/// evictable cells 5/8, protected cells 3/16, the replay queue 1/16, the other regions'
/// components sync read 1/16, strict mode 1/32, the penalty box 1/32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellBudget {
    /// Weight capacity of the evictable cells of the table.
    pub table_bytes: u64,
    /// Bytes of cells taken out of eviction (at or near their limit, or holding unreplayed
    /// work); past it such cells are evicted like any other.
    pub protected_bytes: u64,
    /// Bytes of replay-queue entries (beside its cap in entries).
    pub replay_bytes: u64,
    /// Bytes of the other regions' components of the cells sync read
    /// (`local::components`).
    pub components_bytes: u64,
    /// Bytes of strict-mode entries.
    pub strict_bytes: u64,
    /// Bytes of penalty-box entries.
    pub penalty_bytes: u64,
    /// The least a cell weighs: the evictable share / `max_cells`, so `--max-cells` caps the
    /// evictable cells too. Protected cells come on top, at most `protected_bytes / min
    /// weight` of them (0.3 × `max_cells`).
    pub min_cell_weight: u64,
    /// What the regional origin holds in this process per cell
    /// ([`RegionalOrigin::bytes_per_cell`](crate::regional::RegionalOrigin::bytes_per_cell)):
    /// the in-process origin's component, 0 with a remote origin. Part of each cell's weight,
    /// so the budget counts the embedded default's whole cost of a live cell.
    pub origin_cell_bytes: u64,
}

impl CellBudget {
    pub fn new(max_cells: usize, max_bytes: u64) -> Self {
        let max_cells = (max_cells as u64).max(1);
        let max_bytes = max_bytes.max(16);
        let table_bytes = max_bytes / 8 * 5;
        Self {
            table_bytes,
            protected_bytes: max_bytes / 16 * 3,
            replay_bytes: max_bytes / 16,
            components_bytes: max_bytes / 16,
            strict_bytes: max_bytes / 32,
            penalty_bytes: max_bytes / 32,
            min_cell_weight: table_bytes.div_ceil(max_cells).max(1),
            origin_cell_bytes: 0,
        }
    }

    /// This budget, each cell weighing `bytes` more for the regional origin's part of it.
    pub fn with_origin_cell_bytes(self, bytes: u64) -> Self {
        Self {
            origin_cell_bytes: bytes,
            ..self
        }
    }

    /// A cell's weight against the budget: its bytes and the origin's, at least the minimum.
    pub fn weigh(&self, key: &CellKey) -> u64 {
        cell_bytes(key)
            .saturating_add(self.origin_cell_bytes)
            .max(self.min_cell_weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_never_exceed_the_budget_and_both_caps_hold() {
        let budget = CellBudget::new(1_000, 1 << 20);
        let sum = budget.table_bytes
            + budget.protected_bytes
            + budget.replay_bytes
            + budget.components_bytes
            + budget.strict_bytes
            + budget.penalty_bytes;
        assert!(sum <= 1 << 20);
        let evictable = budget.table_bytes / budget.min_cell_weight;
        assert!(evictable <= 1_000, "{evictable} evictable cells fit");
        let protected = budget.protected_bytes / budget.min_cell_weight;
        assert!(protected <= 300, "{protected} protected cells fit");
    }

    #[test]
    fn a_cell_weighs_the_origins_part_of_it_too() {
        let key = CellKey::new("d", "1:k/", "1:a", 1_000, 1);
        let budget = CellBudget::new(1_000_000_000, 1 << 30);
        assert_eq!(budget.weigh(&key), cell_bytes(&key));
        let embedded = budget.with_origin_cell_bytes(64);
        assert_eq!(embedded.weigh(&key), cell_bytes(&key) + 64);
    }

    #[test]
    fn a_long_identifier_weighs_its_bytes() {
        let key = |identifier: &str| CellKey {
            workspace: "d".into(),
            namespace: "1:k/".into(),
            identifier: identifier.into(),
            duration_ms: 1_000,
            sequence: 1,
        };
        let short = cell_bytes(&key("1:a"));
        let long = cell_bytes(&key(&"x".repeat(4_096)));
        assert_eq!(short, CELL_OVERHEAD_BYTES + 5);
        assert!(long >= short + 4_096);
    }
}
