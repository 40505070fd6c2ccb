//! The bounded table of live cells: a cap in bytes and in cells, an eviction order that
//! keeps counters at their limit, and a reaper that never stalls decisions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::sync::{Cache, GuardResult, PlaceholderGuard};
use quick_cache::{Lifecycle, OptionsBuilder, Weighter};

use super::budget::{CellBudget, GHOST_ALLOCATION, GHOST_BYTES, TABLE_SLOT_BYTES};
use super::cell::{SealedChanges, SharedCell, WindowCell};
use crate::cell_key::{CellKey, CellKeyRef, PrehashedKeys};
use crate::regional::RegionalOrigin;

/// Cells visited by a background walk (reaping, overflow recovery) between two yields to the
/// runtime: each visit takes one shard's read lock for one entry, so a decision waits at most
/// one entry's worth, and with one worker the walk hands the only thread back this often.
pub const WALK_SLICE: usize = 256;

/// Each shard must hold at least this many cells of the largest key a request can make:
/// quick_cache refuses an entry heavier than its shard's hot share, and a refused cell would
/// be created anew on every decision (its counts never kept).
const MIN_LARGEST_CELLS_PER_SHARD: u64 = 32;

/// Live cells, capped in bytes (`--max-cell-bytes`) and in cells (`--max-cells`).
///
/// `quick_cache` is sharded (no lock shared by all keys) and enforces a strict weight cap
/// with S3-FIFO eviction: one-off keys leave first and recently used (hot) keys stay, which
/// resists floods of unique identifiers. Each cell weighs the bytes it holds
/// ([`CellBudget::weigh`]), so long descriptors fill the cap in bytes, not in count.
///
/// Eviction order: when quick_cache picks a cell to evict that is at or near its limit, or
/// holds accepted work no replay carries, [`Protection`] takes it out of eviction instead
/// (its weight becomes 0, which quick_cache keeps outside its eviction rings, at no cost to
/// later evictions) and charges its bytes to the protected share of the budget. So a flood
/// of idle or fresh keys never makes the service forget a counter at its limit. When the
/// protected share is full, such cells are evicted like the others: memory stays bounded,
/// and the documented price is that a flood of counters each at its limit, beyond that
/// share, can forget the oldest of them. Protected cells leave at the end of their window,
/// when the reaper drops them.
pub struct CellTable {
    cells: Cache<CellKey, SharedCell, CellWeighter, PrehashedKeys, Protection>,
    protection: Protection,
    budget: CellBudget,
    /// No live cell expires before this time (ms): until then a reap has nothing to drop and
    /// does not walk the table. See [`CellTable::reap_closing`].
    next_expiry_ms: AtomicU64,
    /// The global layer's publish floor (`f64` bits) once one publishes this table's cells,
    /// [`NO_PUBLICATION`] until then: the reaper closes expired cells at the floor before it
    /// drops them (`CellTable::reap_closing`).
    publish_floor: AtomicU64,
    /// See [`CellTable::hold_unpublished`].
    recheck_ms: AtomicU64,
    /// When the last walk started: a cell that expired since is closed by the next walk,
    /// which sees it expired for the first time (`CellTable::reap_closing`).
    last_walk_ms: AtomicU64,
}

/// [`CellTable::publish_floor`] while nothing publishes the cells (NaN bits: never a floor).
const NO_PUBLICATION: u64 = u64::MAX;

/// A cell weighs its bytes (at least the minimum that keeps the cap in cells); a protected
/// cell weighs 0 (it is accounted in [`Protection`] instead).
#[derive(Clone)]
pub struct CellWeighter {
    budget: CellBudget,
}

impl Weighter<CellKey, SharedCell> for CellWeighter {
    fn weight(&self, key: &CellKey, cell: &SharedCell) -> u64 {
        if cell.is_protected() {
            0
        } else {
            self.budget.weigh(key)
        }
    }
}

/// Takes cells that must not be forgotten out of eviction, within the protected share.
///
/// quick_cache lets an entry change its weight only in `before_evict`, and keeps 0-weight
/// entries out of its eviction rings: protecting there costs later evictions nothing.
/// (`Lifecycle::is_pinned` was the other way: pinned entries stay in the rings and every
/// eviction walks past them, and when a shard holds only pinned entries quick_cache inserts
/// past its cap.)
#[derive(Clone)]
pub struct Protection {
    reserved: Arc<AtomicU64>,
    /// Told when a cell a later window remembers leaves the table.
    changes: Arc<SealedChanges>,
    /// An origin that holds no live cells: it keeps each evicted cell's count (module
    /// `local::cell::departure`).
    keeper: Option<Arc<dyn RegionalOrigin>>,
    capacity: u64,
    budget: CellBudget,
}

impl Protection {
    fn try_reserve(&self, bytes: u64) -> bool {
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reserved| {
                let after = reserved.checked_add(bytes)?;
                (after <= self.capacity).then_some(after)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        // Never below zero, even if a caller released twice.
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reserved| {
                Some(reserved.saturating_sub(bytes))
            });
    }
}

impl Lifecycle<CellKey, SharedCell> for Protection {
    type RequestState = ();

    fn before_evict(&self, _: &mut (), key: &CellKey, cell: &mut SharedCell) {
        if !cell.is_protected()
            && cell.deserves_protection()
            && self.try_reserve(self.budget.weigh(key))
        {
            cell.protect();
        }
    }

    /// A later window may remember this cell's total: it must look the cell up again (see
    /// `WindowCell::on_leaving_table`). An origin that holds no live cells keeps its count
    /// from now on.
    fn on_evict(&self, _: &mut (), key: CellKey, cell: SharedCell) {
        cell.on_leaving_table(&self.changes);
        if let Some(keeper) = &self.keeper {
            keeper.keep_evicted(&key, cell.leave_table());
        }
    }
}

type CellGuard<'a> =
    PlaceholderGuard<'a, CellKey, SharedCell, CellWeighter, PrehashedKeys, Protection>;

/// The outcome of looking a cell up.
pub enum Lookup<'a> {
    Warm(SharedCell),
    /// The cell is not in memory; the holder must fill it. Concurrent lookups of the same key
    /// wait for this one (single flight), so a cold cell is read from the origin once.
    Cold(CellGuard<'a>),
}

impl CellTable {
    /// `largest_cell_bytes`: the weight of the largest key a request can make (it sizes the
    /// shards, see [`MIN_LARGEST_CELLS_PER_SHARD`]). `keeper`: an origin that holds no live
    /// cells, told the count of each cell the table evicts.
    pub fn new(
        budget: CellBudget,
        largest_cell_bytes: u64,
        keeper: Option<Arc<dyn RegionalOrigin>>,
    ) -> Self {
        let protection = Protection {
            reserved: Arc::new(AtomicU64::new(0)),
            changes: Arc::new(SealedChanges::default()),
            keeper,
            capacity: budget.protected_bytes,
            budget,
        };
        let capacity = budget.evictable_weight();
        // Each shard's lock is crossbeam's `ShardedLock` (quick_cache's `sharded-lock`): a
        // reader locks the slot of its own thread, so readers on two cores write no common
        // line even in one shard. With parking_lot's `RwLock` a read lock was a locked add on
        // the shard's one lock word: two threads deciding two keys of one shard scaled 1.49×
        // instead of 1.96×, and two threads on one hot key 0.56× instead of 1.12×
        // (BENCHMARKS.md, "Two threads"). The price is on writes, which lock every slot:
        // a cold decision costs ~650 ns more (2.3 → 3.0 µs). Many shards (16 per core) still
        // keep writers (cold cells, eviction, the reaper) apart; a shard costs ~1.3 KB.
        // A `ShardedLock` poisons (parking_lot's did not), and quick_cache unwraps a poisoned
        // lock on every later access: what runs under a shard's write lock (`CellWeighter`,
        // `Protection`, the keys' hashing and comparison, a cell's drop) must never panic,
        // or every decision on that shard would.
        let mut shards = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .saturating_mul(16)
            .next_power_of_two();
        let per_shard_floor = largest_cell_bytes
            .max(budget.min_cell_weight)
            .saturating_mul(MIN_LARGEST_CELLS_PER_SHARD);
        while shards > 1 && capacity / shards as u64 <= per_shard_floor {
            shards /= 2;
        }
        let options = OptionsBuilder::new()
            // quick_cache keeps ghosts for `GHOST_ALLOCATION` of these: the budget reserved
            // their bytes (`CellBudget::ghost_bytes`) and the table counts them when held
            // (`CellTable::ghost_bytes`).
            .estimated_items_capacity(
                usize::try_from(budget.evictable_cells()).unwrap_or(usize::MAX),
            )
            .ghost_allocation(GHOST_ALLOCATION)
            .weight_capacity(capacity)
            .shards(shards)
            .build();
        let cells = match options {
            Ok(options) => Cache::with_options(
                options,
                CellWeighter { budget },
                PrehashedKeys,
                protection.clone(),
            ),
            // Only when a required option is missing; both are set above.
            Err(_) => unreachable!("estimated_items_capacity and weight_capacity are set"),
        };
        Self {
            cells,
            protection,
            budget,
            next_expiry_ms: AtomicU64::new(u64::MAX),
            publish_floor: AtomicU64::new(NO_PUBLICATION),
            recheck_ms: AtomicU64::new(1),
            last_walk_ms: AtomicU64::new(0),
        }
    }

    /// From now on the reaper closes each expired cell whose regional count is at or above
    /// `floor` of its limit before it drops it (`CellTable::reap_closing`). Set by the
    /// global counters, which publish the table's cells.
    ///
    /// `recheck_ms`: how soon after holding a cell a walk looks whether it may go (about
    /// when its closing replay and the next flush are done), so that held cells do not stay
    /// until the next window ends.
    pub fn hold_unpublished(&self, floor: f64, recheck_ms: u64) {
        self.publish_floor.store(floor.to_bits(), Ordering::Release);
        self.recheck_ms.store(recheck_ms.max(1), Ordering::Release);
    }

    fn held_floor(&self) -> Option<f64> {
        let bits = self.publish_floor.load(Ordering::Acquire);
        (bits != NO_PUBLICATION).then(|| f64::from_bits(bits))
    }

    /// Put a cold cell in the table (the holder of its lookup's guard fills it).
    pub fn fill(&self, guard: CellGuard<'_>, key: &CellKey, cell: SharedCell) {
        let _ = guard.insert(cell);
        self.note_inserted(key);
    }

    /// After a cell entered the table (never before: see [`CellTable::reap_closing`]).
    fn note_inserted(&self, key: &CellKey) {
        self.next_expiry_ms
            .fetch_min(expires_at_ms(key), Ordering::AcqRel);
    }

    /// A warm hit takes no allocation: the borrowed key is compared in place.
    pub fn get(&self, key: &CellKeyRef<'_>) -> Option<SharedCell> {
        self.cells.get(key)
    }

    /// Look up, or get the right to create, a cell.
    pub async fn get_or_guard(&self, key: &CellKey) -> Lookup<'_> {
        match self.cells.get_value_or_guard_async(key).await {
            Ok(cell) => Lookup::Warm(cell),
            Err(guard) => Lookup::Cold(guard),
        }
    }

    /// [`CellTable::get_or_insert_empty`] for a task on the runtime: while a decision seeds
    /// the cell from the origin (it holds the cell's placeholder across that read), this
    /// waits for it without blocking the thread.
    pub async fn get_or_insert_empty_async(&self, key: &CellKey) -> (SharedCell, bool) {
        match self.cells.get_value_or_guard_async(key).await {
            Ok(cell) => (cell, false),
            Err(guard) => {
                let cell = self.unread_cell(key);
                self.fill(guard, key, SharedCell::clone(&cell));
                (cell, true)
            }
        }
    }

    /// A cell created without reading the origin: from what an origin that holds no live
    /// cells kept of it (it may have left the table), else empty and marked so that its
    /// replays go to the origin (module `local::cell::departure`).
    fn unread_cell(&self, key: &CellKey) -> SharedCell {
        let kept = self.protection.keeper.as_ref().and_then(|k| k.kept(key));
        match kept {
            Some(read) => SharedCell::new(WindowCell::seeded(read.total, read.own)),
            None => {
                let cell = SharedCell::new(WindowCell::default());
                cell.mark_unseeded();
                cell
            }
        }
    }

    /// The cell of `key`, created without a read when missing (the global sync imports counts
    /// for cells this process has not used yet, or that left the table): see
    /// `unread_cell`. Returns whether it was created.
    ///
    /// Blocks the thread while another caller holds the cell's placeholder: a decision
    /// seeding the cell holds it across an origin read, so a task on the runtime must use
    /// [`CellTable::get_or_insert_empty_async`] (blocked here, a worker could be the one
    /// the decision's task waits to run on).
    pub fn get_or_insert_empty(&self, key: &CellKey) -> (SharedCell, bool) {
        match self.cells.get_value_or_guard(key, None) {
            GuardResult::Value(cell) => (cell, false),
            GuardResult::Guard(guard) => {
                let cell = self.unread_cell(key);
                self.fill(guard, key, SharedCell::clone(&cell));
                (cell, true)
            }
            // Only with a timeout, and none was given; a detached cell is harmless.
            GuardResult::Timeout => (SharedCell::new(WindowCell::default()), false),
        }
    }

    /// Every live cell, for the background walks (global flush, overflow recovery). Each
    /// step takes one shard's read lock for one entry.
    pub fn cells(&self) -> impl Iterator<Item = (CellKey, SharedCell)> + Send + '_ {
        self.cells.iter()
    }

    /// [`CellTable::reap_closing`] with nothing to close.
    #[cfg(test)]
    pub async fn reap(&self, now_ms: u64) -> Reaped {
        self.reap_closing(now_ms, &|_, _| {}).await
    }

    /// Drop cells older than the previous window of their own duration: no decision reads
    /// them any more.
    ///
    /// Incremental: one entry per lock, a yield to the runtime every [`WALK_SLICE`] cells.
    /// (`Cache::retain` held each shard's write lock for the whole shard, and the only
    /// runtime thread for the whole table: 576 ms at 1M cells with one worker.)
    ///
    /// Walks only when a cell may have expired: the table keeps the earliest moment any live
    /// cell expires (`next_expiry_ms`, lowered by every insert, recomputed by each walk), and
    /// before it a reap returns at once. A walk takes a shard lock and clones a key and a cell
    /// per live cell: at 1M cells ~240 ms of CPU (profiled in the service), every five
    /// seconds, in half-second bursts that took one of two workers from the decisions, for
    /// nothing between two window ends: it moved the open-loop p99 with 1M live cells.
    ///
    /// Why no expiry is missed: an insert lowers the mark after the cell is in the table; the
    /// walk raises the mark to "never" before it starts, then lowers it to the earliest expiry
    /// it saw. An insert that lowered the mark before the walk started left a cell the walk
    /// visits (an iteration sees every entry present when it began and not removed since); one
    /// after it lowers the mark itself. A walk that does not finish (its future dropped)
    /// leaves the mark at 0, so the next reap walks.
    ///
    /// Cells the global counters hold a row of are closed first (once
    /// [`CellTable::hold_unpublished`] set their floor). The region's row of a cell is the greatest regional count any of its processes
    /// published, and a process knows the counts of the others only as of its last read of
    /// the regional origin. A process that replayed its last counts and died before its flush
    /// took them (SIGKILL), or a flush still failing when the window ended (a database cut
    /// off, a connection stuck in TCP retransmission after a cut), left those counts out of
    /// the row for good: the others never read the cell again, and the reaper dropped it.
    /// So an expired cell at the floor is not dropped at once: `close` is called once for it
    /// (the engine queues a closing replay, which reads the region's final total back), by
    /// every process that holds it, also one with no count of its own in it (a cell that one
    /// process of the region counts alone, such as an RLQS bucket whose one stream that process
    /// serves, is otherwise read again by nobody once that process is killed), and
    /// it stays while that replay is pending or its count is unpublished, for one window of
    /// its duration at most (the regional origin keeps the cell at least that long), or until
    /// the next walk if the one that closed it came later than that. A cell held that long
    /// still unpublished is dropped and counted in [`Reaped::unpublished`].
    pub async fn reap_closing(
        &self,
        now_ms: u64,
        close: &(dyn Fn(&CellKey, &SharedCell) + Sync),
    ) -> Reaped {
        let mut reaped = Reaped::default();
        if now_ms < self.next_expiry_ms.load(Ordering::Acquire) {
            return reaped;
        }
        let mut mark = ExpiryMark {
            table: &self.next_expiry_ms,
            earliest: 0,
        };
        self.next_expiry_ms.store(u64::MAX, Ordering::Release);
        let mut earliest = u64::MAX;
        let floor = self.held_floor();
        let last_walk_ms = self.last_walk_ms.swap(now_ms, Ordering::AcqRel);
        let recheck_at = now_ms.saturating_add(self.recheck_ms.load(Ordering::Acquire));
        for (key, cell) in self.cells.iter() {
            reaped.visited += 1;
            if reaped.visited % WALK_SLICE == 0 {
                tokio::task::yield_now().await;
            }
            let expires_at = expires_at_ms(&key);
            if now_ms < expires_at {
                earliest = earliest.min(expires_at);
                continue;
            }
            // Closed and held (see above): looked at again after `recheck_ms`, and dropped one
            // window later at the latest.
            let unpublished = floor.is_some_and(|floor| cell.to_publish(floor).is_some());
            let held_until = expires_at.saturating_add(key.duration_ms.max(1));
            if let Some(floor) = floor
                && cell.at_floor(floor)
            {
                // The first walk that sees it expired (a walk cut short may close a cell
                // twice: a resent cumulative count is harmless), however late: walks come
                // every `reap_interval`, which may be longer than the window the cell is held
                // for (a limit per second); closed then, it stays until the next walk. Also a
                // cell with nothing of this process's own: the process that counted it may be
                // the one that died.
                let closing = expires_at > last_walk_ms;
                if closing {
                    close(&key, &cell);
                }
                if closing || (now_ms < held_until && (unpublished || cell.replay_pending())) {
                    earliest = earliest.min(held_until.min(recheck_at));
                    reaped.held += 1;
                    continue;
                }
            }
            // Only the cell seen: a new cell under the same key (impossible for a past
            // sequence, but cheap to rule out) stays.
            match self
                .cells
                .remove_if(&key, |held| SharedCell::ptr_eq(held, &cell))
            {
                Some((key, cell)) => {
                    if cell.is_protected() {
                        self.protection.release(self.budget.weigh(&key));
                    }
                    reaped.removed += 1;
                    if unpublished {
                        reaped.unpublished += 1;
                    }
                }
                // Gone already (evicted), or another cell under the key: if that one is
                // still there, the next reap must walk again for it.
                None => earliest = earliest.min(expires_at),
            }
        }
        mark.earliest = earliest;
        reaped
    }

    /// The shard `key` falls in (see [`Engine::table_shard`](super::Engine::table_shard)).
    pub fn shard_of(&self, key: &CellKeyRef<'_>) -> usize {
        self.cells.shard_index(key)
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// The changes of sealed cells (see [`SealedChanges`]): every path that changes a cell's
    /// count tells it.
    pub fn changes(&self) -> &SealedChanges {
        &self.protection.changes
    }

    /// Bytes held by protected cells (charged to the protected share).
    pub fn protected_bytes(&self) -> u64 {
        self.protection.reserved.load(Ordering::Acquire)
    }

    /// Weight of the evictable cells (at most the table's share of the budget less the
    /// ghosts').
    pub fn evictable_bytes(&self) -> u64 {
        self.cells.weight()
    }

    /// Bytes of the slots the table holds beyond its live cells: the ghosts of evicted cells
    /// (quick_cache keeps each in a whole slot) and the slots freed since (the slab never
    /// shrinks; a new cell takes one first). Resident memory that no cell's weight counts:
    /// under a flood past the budget, up to [`CellBudget::ghost_bytes`], which the budget
    /// keeps for them. Takes each shard's read lock in turn: for a metrics scrape.
    pub fn ghost_bytes(&self) -> u64 {
        let slots = self.cells.memory_used().entries as u64 / TABLE_SLOT_BYTES;
        slots
            .saturating_sub(self.cells.len() as u64)
            .saturating_mul(GHOST_BYTES)
    }
}

/// What one reap did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Cells dropped.
    pub removed: usize,
    /// Cells looked at: 0 when no cell could have expired (no walk).
    pub visited: usize,
    /// Expired cells kept for their closing replay or until the global flush takes their
    /// counts (`CellTable::reap_closing`).
    pub held: usize,
    /// Cells dropped with a count the global flush never took: held for a whole window more
    /// and still unpublished (the database unreachable all along).
    pub unpublished: usize,
}

/// Lowers the table's expiry mark to what a walk saw, when the walk ends or is dropped (then
/// to 0: the next reap walks again).
struct ExpiryMark<'a> {
    table: &'a AtomicU64,
    earliest: u64,
}

impl Drop for ExpiryMark<'_> {
    fn drop(&mut self) {
        self.table.fetch_min(self.earliest, Ordering::AcqRel);
    }
}

/// When a cell becomes older than the previous window of its own duration (no decision reads
/// it any more): the start of the window two after its own.
pub(super) fn expires_at_ms(key: &CellKey) -> u64 {
    key.sequence
        .saturating_add(2)
        .saturating_mul(key.duration_ms.max(1))
}

#[cfg(test)]
mod tests;
