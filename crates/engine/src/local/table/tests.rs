//! The cell table: its caps, its eviction order and the reaper.

use super::*;
use crate::local::budget::cell_bytes;

impl CellTable {
    fn capacity(&self) -> u64 {
        self.cells.capacity()
    }
}

fn key(id: &str, duration_ms: u64, sequence: u64) -> CellKey {
    CellKey {
        scope: crate::cell_key::Scope::new("d", "1:k/"),
        identifier: id.into(),
        duration_ms,
        sequence,
    }
}

/// A table for `max_cells` small cells (the byte cap is not the one that binds).
fn table_of(max_cells: usize) -> CellTable {
    let budget = CellBudget::new(max_cells, max_cells as u64 * 1_024);
    CellTable::new(budget, 1_024, None)
}

/// A table of 1,000 cells filled with 2,000 one-off keys, so that the next cell enters
/// where one-off keys are evicted from.
fn full_table() -> CellTable {
    let table = table_of(1_000);
    for i in 0..2_000 {
        table.get_or_insert_empty(&key(&format!("before-{i}"), 60_000, 1));
    }
    table
}

/// 50,000 fresh one-off keys in window `sequence`.
fn flood(table: &CellTable, sequence: u64) {
    for i in 0..50_000 {
        table.get_or_insert_empty(&key(&i.to_string(), 60_000, sequence));
    }
}

/// Consume `cost` of `limit` in the cell of `key` (created when missing).
fn use_cell(table: &CellTable, key: &CellKey, cost: u64, limit: u64) {
    let (cell, _) = table.get_or_insert_empty(key);
    assert!(
        cell.try_consume(0, 0, 60_000, cost, limit, false, table.changes())
            .0
            .allowed
    );
}

#[tokio::test]
async fn reaping_keeps_the_current_and_previous_cells() {
    let table = table_of(100);
    for seq in [7, 8, 9, 10] {
        table.get_or_insert_empty(&key("a", 1_000, seq));
    }
    // now is in cell 10: cells 9 and 10 stay
    assert_eq!(table.reap(10_500).await.removed, 2);
    assert!(table.get(&key("a", 1_000, 9).borrowed()).is_some());
    assert!(table.get(&key("a", 1_000, 8).borrowed()).is_none());
}

/// Between two window ends a reap does not walk the table; once a cell may have
/// expired it walks, and the walk sets when the next one is due.
#[tokio::test]
async fn reaping_walks_only_once_a_cell_may_have_expired() {
    // A walk that sees both cells and drops the one that expired.
    let one_of_two = Reaped {
        removed: 1,
        visited: 2,
        ..Reaped::default()
    };
    let table = table_of(100);
    table.get_or_insert_empty(&key("a", 1_000, 10));
    table.get_or_insert_empty(&key("b", 1_000, 20));
    // cell 10 expires at 12,000 (when cell 12 starts)
    assert_eq!(table.reap(11_999).await, Reaped::default());
    assert_eq!(table.reap(12_000).await, one_of_two);
    // the walk saw cell 20, which expires at 22,000: nothing to do before
    assert_eq!(table.reap(21_999).await.visited, 0);
    // a cell that expires earlier, made after the walk, brings the next walk forward
    table.get_or_insert_empty(&key("c", 1_000, 15));
    assert_eq!(table.reap(16_999).await.visited, 0);
    assert_eq!(table.reap(17_000).await, one_of_two);
    assert!(table.get(&key("b", 1_000, 20).borrowed()).is_some());
    assert!(table.get(&key("c", 1_000, 15).borrowed()).is_none());
}

/// A walk dropped before it finished has not seen every cell: the next reap walks,
/// whatever the time, rather than trust a mark the walk never set.
#[tokio::test]
async fn a_walk_dropped_midway_leaves_the_next_reap_to_walk() {
    let table = table_of(10_000);
    for i in 0..(WALK_SLICE * 3) {
        table.get_or_insert_empty(&key(&i.to_string(), 1_000, 10));
    }
    {
        let walk = std::pin::pin!(table.reap(12_000));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        // the walk yields after its first slice: dropped there
        assert!(walk.poll(&mut context).is_pending());
    }
    let left = table.len();
    assert!(left > 0 && left < WALK_SLICE * 3, "{left} cells left");
    let reaped = table.reap(12_000).await;
    assert_eq!(reaped.removed, left);
    assert_eq!(table.len(), 0);
}

#[test]
fn the_cap_holds_under_a_flood_of_unique_keys() {
    let table = table_of(1_000);
    for i in 0..20_000 {
        table.get_or_insert_empty(&key(&i.to_string(), 1_000, 1));
    }
    assert!(table.len() <= 1_000, "{} cells", table.len());
    assert!(table.len() > 500);
}

/// A cap in cells alone would let long keys hold any number of bytes.
#[test]
fn the_cap_is_in_bytes_under_a_flood_of_long_keys() {
    let budget = CellBudget::new(1_000_000, 4 << 20);
    let table = CellTable::new(budget, 8 * 1_024, None);
    let long = "x".repeat(4_096);
    for i in 0..5_000 {
        table.get_or_insert_empty(&key(&format!("{i}:{long}"), 60_000, 1));
    }
    let held: u64 = table.cells().map(|(key, _)| cell_bytes(&key)).sum();
    assert!(
        held <= budget.table_bytes,
        "{held} bytes held, cap {}",
        budget.table_bytes
    );
    assert!(table.evictable_bytes() <= table.capacity());
    assert!(
        table.len() < 1_000,
        "{} cells of 4 KiB in a 4 MiB budget",
        table.len()
    );
}

/// A counter at its limit outlives a flood of fresh keys (else the flood gives its client
/// the budget again).
#[test]
fn a_counter_at_its_limit_is_not_evicted_by_a_flood() {
    let table = table_of(1_000);
    // a full table first, so the counter enters where one-off keys are evicted from
    for i in 0..2_000 {
        use_cell(&table, &key(&format!("before-{i}"), 60_000, 1), 1, 5);
    }
    let at_limit = key("at-limit", 60_000, 1);
    use_cell(&table, &at_limit, 5, 5);
    for i in 0..50_000 {
        use_cell(&table, &key(&i.to_string(), 60_000, 1), 1, 5);
    }
    let kept = table.get(&at_limit.borrowed());
    assert_eq!(kept.map(|cell| cell.total()), Some(5), "the count is kept");
    assert!(table.len() <= 1_400, "the flood was evicted instead");
    assert!(table.protected_bytes() > 0);
}

/// When every cell deserves protection, the protected share still caps memory: past it,
/// cells at their limit are evicted like the others.
#[tokio::test]
async fn protection_is_bounded_and_released_by_the_reaper() {
    let budget = CellBudget::new(1_000, 1_000 * 1_024);
    let table = CellTable::new(budget, 1_024, None);
    for i in 0..20_000 {
        use_cell(&table, &key(&i.to_string(), 1_000, 1), 5, 5);
    }
    assert!(table.protected_bytes() <= budget.protected_bytes);
    assert!(table.protected_bytes() > budget.protected_bytes / 2);
    assert!(table.evictable_bytes() <= budget.table_bytes);
    assert!(table.len() <= 1_400, "{} cells", table.len());
    // the window is over: the reaper drops them and gives the share back
    table.reap(10_000).await;
    assert_eq!(table.len(), 0);
    assert_eq!(table.protected_bytes(), 0);
}

/// A cell whose total a later window remembers (see `WindowCell::remember_previous`)
/// leaves the table: the remembered total is stale, so the next decision looks the cell up
/// (and reads it from the origin) instead of trusting it.
#[test]
fn evicting_a_remembered_cell_makes_its_remembered_total_stale() {
    let table = full_table();
    let remembered = key("remembered", 60_000, 1);
    let (previous, _) = table.get_or_insert_empty(&remembered);
    let current = WindowCell::default();
    current.remember_previous(&previous, table.changes());
    assert!(current.previous(table.changes()).is_some());
    drop(previous);
    flood(&table, 2);
    assert!(
        table.get(&remembered.borrowed()).is_none(),
        "evicted by the flood"
    );
    assert_eq!(current.previous(table.changes()), None);
}

/// A cell holding work the replay queue refused is not evicted (its count would be lost).
#[test]
fn an_overflowed_cell_is_not_evicted() {
    let table = full_table();
    let overflowed = key("overflowed", 60_000, 1);
    let (cell, _) = table.get_or_insert_empty(&overflowed);
    assert!(
        cell.try_consume(0, 0, 60_000, 1, 100, false, table.changes())
            .0
            .allowed
    );
    cell.mark_overflowed();
    flood(&table, 1);
    assert!(table.get(&overflowed.borrowed()).is_some());
}

/// `TABLE_SLOT_BYTES` is quick_cache's slot: a table that never evicted holds one slot per
/// cell and no ghost.
#[test]
fn a_slot_of_the_table_is_what_the_budget_says() {
    let table = table_of(10_000);
    for i in 0..1_000 {
        table.get_or_insert_empty(&key(&i.to_string(), 60_000, 1));
    }
    assert_eq!(
        table.cells.memory_used().entries as u64,
        1_000 * TABLE_SLOT_BYTES
    );
    assert_eq!(table.ghost_bytes(), 0);
}

/// Under a flood past the budget quick_cache keeps the hashes of evicted keys, each in a
/// whole slot: the table counts them, within what the budget reserved for them.
#[test]
fn the_ghosts_of_a_flood_are_counted_within_their_reserve() {
    let budget = CellBudget::new(1_000, 1_000 * 1_024);
    let table = CellTable::new(budget, 1_024, None);
    flood(&table, 1);
    let ghosts = table.ghost_bytes();
    let reserve = budget.ghost_bytes();
    assert!(
        ghosts > reserve * 9 / 10,
        "{ghosts} B of ghosts, {reserve} B reserved"
    );
    // quick_cache rounds each shard's share of ghosts up
    let shards = table.cells.num_shards() as u64;
    assert!(
        ghosts <= reserve + shards * GHOST_BYTES,
        "{ghosts} B of ghosts"
    );
    assert!(table.evictable_bytes() + ghosts <= budget.table_bytes + shards * GHOST_BYTES);
}
