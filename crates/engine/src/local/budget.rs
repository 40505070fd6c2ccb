//! The byte budget of everything the engine keys by [`CellKey`]: how `--max-cell-bytes` is
//! shared out, and what one cell weighs.
//!
//! A cap in cells alone let a client who sends long descriptors hold gigabytes in a few
//! thousand cells. Each structure that holds a `CellKey` (the cell
//! table, its protected cells, the replay queue, strict mode) therefore gets a fixed share
//! of one byte budget, and weighs each entry by the bytes it really holds.

use crate::cell_key::CellKey;

/// What a cell holds besides its key's strings: the key itself, the `SharedCell` and its
/// allocation, and quick_cache's slot, links and hash-table entry (its ghosts are counted
/// apart: [`GHOST_BYTES`]). Sizes on x86-64: `CellKey` 48 B (72 B before its domain and
/// namespace went behind one [`Scope`](crate::cell_key::Scope) pointer), the `SharedCell`
/// 8 B, the cell's allocation 88 B (its counters, both halves of each PN-counter, the
/// remembered previous total, with the `triomphe::Arc`'s count) in the allocator's 96 B
/// class, quick_cache ~32 B per resident entry beside the key and the `SharedCell`.
pub const CELL_OVERHEAD_BYTES: u64 = 184;

/// The share of the cells it holds whose evicted keys the table remembers (quick_cache's
/// default, set explicitly so that [`CellBudget::ghost_bytes`] reserves what it keeps).
///
/// quick_cache's S3-FIFO keeps the hash of each evicted key (a ghost) and admits a key that
/// returns while its ghost remains as hot. Without ghosts a new key turns hot only if it is
/// hit again while in the small cold ring (3 % of the table once the hot ring is full), so
/// a working set larger than the budget, skewed as clients are, would lose its frequent
/// keys to one-off ones. The ghosts are kept, and their memory is counted instead.
pub const GHOST_ALLOCATION: f64 = 0.5;

/// One slot of the cell table's slab on x86-64: the key, the `SharedCell`, quick_cache's
/// state, hit count and list links, whatever the slot holds (a cell, a ghost, or nothing
/// since its cell left: the slab never shrinks). Checked against quick_cache's own count
/// by the table's tests.
pub const TABLE_SLOT_BYTES: u64 = 80;

/// What one ghost holds: a whole slot of the slab (a ghost is a 64-bit hash in a slot sized
/// for a cell) and its share of the hash table (a 4-byte index and a control byte at a load
/// of 7/16 to 7/8).
pub const GHOST_BYTES: u64 = TABLE_SLOT_BYTES + 8;

/// The ghosts' bytes per evictable cell at their fullest.
const GHOST_SHARE_BYTES: u64 = (GHOST_BYTES as f64 * GHOST_ALLOCATION) as u64;

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
/// evictable cells 5/8 (with the ghosts of evicted ones), protected cells 5/32, the replay
/// queue 1/16, the other regions' components sync read 1/16, strict mode 1/32, the penalty
/// box 1/32, the rights of `never_above` counters 1/32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellBudget {
    /// Bytes of the evictable cells of the table and of the ghosts of evicted ones: the
    /// cells' weight capacity is what the ghosts at their fullest leave
    /// ([`CellBudget::evictable_weight`]).
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
    /// Bytes of the rights this process holds of `never_above` counters (`local::rights`).
    pub rights_bytes: u64,
    /// The cap in cells (`--max-cells`).
    pub max_cells: u64,
    /// The least a cell weighs: the evictable weight / `max_cells`, so `--max-cells` caps
    /// the evictable cells too. Protected cells come on top, at most `protected_bytes / min
    /// weight` of them (0.3 × `max_cells` × `table_bytes / evictable_weight`, about 0.36 ×
    /// `max_cells` with a derived `--max-cells`).
    pub min_cell_weight: u64,
    /// What the regional origin holds in this process per live cell
    /// ([`RegionalOrigin::bytes_per_cell`](crate::regional::RegionalOrigin::bytes_per_cell)),
    /// when it holds live cells (in-process siblings): part of each cell's weight. 0 with a
    /// remote origin.
    pub origin_cell_bytes: u64,
    /// What the regional origin may keep per evictable cell once the cell leaves the table,
    /// when it holds no live cells (the embedded default: module `local::cell::departure`):
    /// reserved out of the evictable share at its most, as the ghosts are, and counted by
    /// the memory metric as held.
    pub origin_kept_bytes: u64,
}

impl CellBudget {
    pub fn new(max_cells: usize, max_bytes: u64) -> Self {
        let max_cells = (max_cells as u64).max(1);
        let max_bytes = max_bytes.max(16);
        let table_bytes = max_bytes / 8 * 5;
        Self {
            table_bytes,
            protected_bytes: max_bytes / 32 * 5,
            replay_bytes: max_bytes / 16,
            components_bytes: max_bytes / 16,
            strict_bytes: max_bytes / 32,
            penalty_bytes: max_bytes / 32,
            rights_bytes: max_bytes / 32,
            max_cells,
            min_cell_weight: 1,
            origin_cell_bytes: 0,
            origin_kept_bytes: 0,
        }
        .with_min_cell_weight()
    }

    /// Computed once: a cell is weighed on every insert and eviction.
    fn with_min_cell_weight(self) -> Self {
        Self {
            min_cell_weight: self.evictable_weight().div_ceil(self.max_cells).max(1),
            ..self
        }
    }

    /// What the smallest cell weighs: its fixed overhead and the origin's part.
    pub fn smallest_cell_bytes(&self) -> u64 {
        CELL_OVERHEAD_BYTES.saturating_add(self.origin_cell_bytes)
    }

    /// The most evictable cells the table holds: `max_cells`, or as many of the smallest
    /// cell, each with its share of ghosts, as the evictable share holds. The ghosts follow
    /// it, not `max_cells` alone: a `--max-cells` far above what the bytes hold would let
    /// quick_cache keep ghosts for cells that never fit.
    pub fn evictable_cells(&self) -> u64 {
        let per_cell = self
            .smallest_cell_bytes()
            .saturating_add(GHOST_SHARE_BYTES)
            .saturating_add(self.origin_kept_bytes);
        let fit = self.table_bytes / per_cell;
        self.max_cells.min(fit).max(1)
    }

    /// Ghosts the table keeps at most (quick_cache keeps up to one more per shard, from
    /// rounding each shard's share up).
    pub fn ghost_slots(&self) -> u64 {
        (self.evictable_cells() as f64 * GHOST_ALLOCATION) as u64
    }

    /// The ghosts' bytes at their fullest, reserved out of the evictable share.
    pub fn ghost_bytes(&self) -> u64 {
        self.ghost_slots().saturating_mul(GHOST_BYTES)
    }

    /// The origin's counts of cells that left the table at their most (one per evictable
    /// cell), reserved out of the evictable share.
    pub fn kept_bytes(&self) -> u64 {
        self.evictable_cells()
            .saturating_mul(self.origin_kept_bytes)
    }

    /// Weight capacity of the evictable cells: the evictable share less the ghosts' and the
    /// origin's kept counts'.
    pub fn evictable_weight(&self) -> u64 {
        self.table_bytes
            .saturating_sub(self.ghost_bytes())
            .saturating_sub(self.kept_bytes())
            .max(1)
    }

    /// This budget with the regional origin's part of each cell: `bytes` more per cell's
    /// weight when the origin holds live cells, else `bytes` per evictable cell reserved for
    /// what it keeps of the cells that left the table.
    pub fn with_origin(self, bytes: u64, holds_live_cells: bool) -> Self {
        if holds_live_cells {
            self.with_origin_cell_bytes(bytes)
        } else {
            Self {
                origin_kept_bytes: bytes,
                ..self
            }
            .with_min_cell_weight()
        }
    }

    /// This budget, each cell weighing `bytes` more for the regional origin's part of it.
    pub fn with_origin_cell_bytes(self, bytes: u64) -> Self {
        Self {
            origin_cell_bytes: bytes,
            ..self
        }
        .with_min_cell_weight()
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
            + budget.penalty_bytes
            + budget.rights_bytes;
        assert!(sum <= 1 << 20);
        let evictable = budget.evictable_weight() / budget.min_cell_weight;
        assert!(evictable <= 1_000, "{evictable} evictable cells fit");
        assert_eq!(
            budget.evictable_weight() + budget.ghost_bytes(),
            budget.table_bytes
        );
        let protected = budget.protected_bytes / budget.min_cell_weight;
        assert!(protected <= 400, "{protected} protected cells fit");
    }

    /// The ghosts' reserve follows the cells the bytes hold: a cap in cells far above them
    /// (quick_cache sized its ghosts by it) would keep gigabytes of ghosts in a 64 MiB
    /// budget.
    #[test]
    fn the_ghosts_are_reserved_for_the_cells_that_fit() {
        let budget = CellBudget::new(100_000_000, 64 << 20);
        let fit = budget.table_bytes / (CELL_OVERHEAD_BYTES + GHOST_SHARE_BYTES);
        assert_eq!(budget.evictable_cells(), fit);
        assert!(budget.ghost_bytes() < budget.table_bytes / 4);
        assert_eq!(
            budget.evictable_weight() + budget.ghost_bytes(),
            budget.table_bytes
        );
    }

    /// With `--max-cells` derived from the bytes, the smallest cell weighs what it holds, not
    /// its share of the ghosts too: a budget that charged every cell for ghosts counted ~20 %
    /// more than the process holds while no cell is evicted.
    #[test]
    fn the_smallest_cell_weighs_what_it_holds() {
        let derived = CellBudget::new(usize::MAX, 1 << 30).with_origin_cell_bytes(64);
        let cells = derived.evictable_cells();
        let budget = CellBudget::new(cells as usize, 1 << 30).with_origin_cell_bytes(64);
        assert!(
            budget.min_cell_weight <= budget.smallest_cell_bytes() + 1,
            "{} B for a cell of {} B",
            budget.min_cell_weight,
            budget.smallest_cell_bytes()
        );
        // and the table holds them beside their ghosts (but for the minimum's rounding up)
        assert!(budget.evictable_weight() / budget.min_cell_weight >= cells - cells / 200);
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
    fn what_an_origin_keeps_of_departed_cells_is_reserved_not_weighed() {
        let key = CellKey::new("d", "1:k/", "1:a", 1_000, 1);
        let budget = CellBudget::new(usize::MAX, 1 << 30);
        let weighed = budget.with_origin(64, true);
        let reserved = budget.with_origin(64, false);
        assert_eq!(reserved.weigh(&key), cell_bytes(&key));
        // as many evictable cells either way: each still has its 64 bytes, in the weight or
        // in the reserve
        assert_eq!(reserved.evictable_cells(), weighed.evictable_cells());
        assert_eq!(reserved.kept_bytes(), reserved.evictable_cells() * 64);
        assert_eq!(
            reserved.evictable_weight() + reserved.kept_bytes() + reserved.ghost_bytes(),
            reserved.table_bytes
        );
    }

    #[test]
    fn a_long_identifier_weighs_its_bytes() {
        let key = |identifier: &str| CellKey {
            scope: crate::cell_key::Scope::new("d", "1:k/"),
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
