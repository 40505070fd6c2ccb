//! The rights this process holds, per cell of a `never_above` counter: spent from memory by
//! the decisions, refilled by takes and given back when idle (the parent module).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::cell_key::{CellKey, CellKeyRef};
use crate::local::WindowPosition;
use crate::regional::RightsReturn;

/// Rights held this long without a request go back to the region.
pub const IDLE_MS: u64 = 1_000;

/// Bytes of one holding besides its key's strings: the key, the `Arc`, the holding's
/// allocation (with the `Arc`'s two counts), quick_cache's bookkeeping, and its entry on the
/// list of holdings with rights (counted for every holding: any may hold rights).
pub const HOLDING_BYTES: u64 = (size_of::<CellKey>()
    + size_of::<Arc<Holding>>()
    + size_of::<Holding>()
    + 16
    + 40
    + size_of::<Listed>()) as u64;

/// The rights this process holds, per cell of a `never_above` counter. Bounded in bytes
/// (its share of `--max-cell-bytes`); a holding that holds rights is also on the `listed`
/// list until they are given back, so a holding evicted under a flood of counters still
/// gives its rights back.
///
/// Why a list beside the map: every counter decided from rights has a holding, and most hold
/// nothing at a given moment (a lone request spends what its take brought). The give-back
/// runs on every replay tick; walking the whole map there cost ~9 ms a tick per 100,000
/// holdings. It walks the list instead (the holdings that got rights since the last tick),
/// and the whole map at most once per [`SWEEP_MS`], only to forget the holdings of ended
/// cells.
pub(in crate::local) struct HeldRights {
    cells: Cache<CellKey, Arc<Holding>, HoldingWeighter>,
    /// Every holding whose rights are above zero, at most once each (`Holding::listed`).
    listed: Mutex<Vec<Listed>>,
    /// Held through a give-back's walk: the walk takes the list out and puts back what
    /// stays, so a second walk at once (a shutdown's) would find it empty.
    walking: Mutex<()>,
    /// When the map was last walked for ended cells (ms).
    swept_ms: AtomicU64,
    max_bytes: u64,
}

/// A holding with rights, with its cell.
type Listed = (CellKey, Arc<Holding>);

/// How often the holdings of ended cells are forgotten: their rights went back with the
/// list; this only frees their memory (the map's bound holds meanwhile).
pub const SWEEP_MS: u64 = 1_000;

#[derive(Clone)]
struct HoldingWeighter;

impl Weighter<CellKey, Arc<Holding>> for HoldingWeighter {
    fn weight(&self, key: &CellKey, _: &Arc<Holding>) -> u64 {
        HOLDING_BYTES + key.heap_bytes() as u64
    }
}

/// One cell's rights in this process.
#[derive(Debug, Default)]
pub(super) struct Holding {
    /// Taken and not spent.
    rights: AtomicU64,
    /// On [`HeldRights`]'s list. Invariant: `rights > 0` implies listed (rights only grow
    /// through [`HeldRights::add`], which lists; the list drops a holding only after it saw
    /// its rights at zero with this flag cleared).
    listed: AtomicBool,
    /// Cost offered since the last take: the demand the next take is sized by.
    offered: AtomicU64,
    /// When the last take was asked (ms; 0: never).
    since_ms: AtomicU64,
    /// When a hit last came (ms): idle holdings give their rights back.
    pub(super) last_hit_ms: AtomicU64,
    /// Held while a take is on its way: concurrent decisions that found no right wait for it
    /// and spend what it brought, instead of each asking the origin for one.
    pub(super) taking: tokio::sync::Mutex<()>,
    /// Until when (ms) no take is asked: after a failed one ([`IDLE_MS`]), and after one
    /// that found the room spent (a quarter of the take horizon). The decisions that waited
    /// behind it, and those until then, are denied without asking: over the limit, every
    /// refused request would otherwise be a round trip to the store.
    pub(super) quiet_until_ms: AtomicU64,
}

impl Holding {
    pub(super) fn offer(&self, cost: u64, now_ms: u64) {
        self.offered.fetch_add(cost, Ordering::Relaxed);
        self.last_hit_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Spends `cost` rights if it holds as many.
    pub(super) fn spend(&self, cost: u64) -> bool {
        self.rights
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_sub(cost)
            })
            .is_ok()
    }

    fn take_all(&self) -> u64 {
        self.rights.swap(0, Ordering::AcqRel)
    }

    /// Whether the holding must stay on the list: called by the list's walk, which owns the
    /// holding's entry. Sequentially consistent with [`HeldRights::add`]: either this load
    /// sees the rights added, or the add sees the flag cleared and lists the holding again
    /// (both may; the flag's swap keeps one entry).
    fn stays_listed(&self) -> bool {
        self.listed.store(false, Ordering::SeqCst);
        self.rights.load(Ordering::SeqCst) > 0 && !self.listed.swap(true, Ordering::SeqCst)
    }

    /// How many rights to ask for: twice the demand measured since the last take over
    /// `horizon_ms` (a replay interval), at least `cost`, at most `limit`. The first take of
    /// a cell asks for `cost`; under steady demand the asks double until they cover it.
    pub(super) fn want(&self, cost: u64, now_ms: u64, horizon_ms: u64, limit: u64) -> u64 {
        let offered = self.offered.swap(0, Ordering::Relaxed);
        let since = self.since_ms.swap(now_ms, Ordering::Relaxed);
        let span = now_ms.saturating_sub(since).max(horizon_ms).max(1);
        let demand = u128::from(offered) * 2 * u128::from(horizon_ms) / u128::from(span);
        u64::try_from(demand)
            .unwrap_or(u64::MAX)
            .min(limit)
            .max(cost)
    }
}

impl HeldRights {
    pub(in crate::local) fn new(max_bytes: u64) -> Self {
        let max_bytes = max_bytes.max(HOLDING_BYTES);
        Self {
            cells: Cache::with_weighter(
                usize::try_from(max_bytes / HOLDING_BYTES).unwrap_or(usize::MAX),
                max_bytes,
                HoldingWeighter,
            ),
            listed: Mutex::new(Vec::new()),
            walking: Mutex::new(()),
            swept_ms: AtomicU64::new(0),
            max_bytes,
        }
    }

    /// Adds `rights` to `holding` (of `key`), listing it for the give-back if it is not.
    /// The only way rights grow: a holding with rights is always on the list.
    pub(super) fn add(&self, key: &CellKeyRef<'_>, holding: &Arc<Holding>, rights: u64) {
        if rights == 0 {
            return;
        }
        holding.rights.fetch_add(rights, Ordering::SeqCst);
        if !holding.listed.swap(true, Ordering::SeqCst) {
            let entry = (key.to_owned_key(), Arc::clone(holding));
            self.list().push(entry);
        }
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Listed>> {
        self.listed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The holding of `key` if this process has one: a warm decision looks it up without
    /// building an owned key.
    pub(super) fn held(&self, key: &CellKeyRef<'_>) -> Option<Arc<Holding>> {
        self.cells.get(key)
    }

    pub(super) fn holding(&self, key: &CellKey) -> Arc<Holding> {
        match self
            .cells
            .get_or_insert_with(key, || Ok::<_, std::convert::Infallible>(Arc::default()))
        {
            Ok(holding) => holding,
            Err(never) => match never {},
        }
    }

    /// Bytes held, against the share of the budget.
    pub(in crate::local) fn bytes(&self) -> (u64, u64) {
        (self.cells.weight(), self.max_bytes)
    }

    /// Takes out of the holdings the rights this process will not spend: all of them when
    /// `everything`, else those of cells its clock has left (or is within `skew_ms` of
    /// leaving: no right of it is spent there) and of idle holdings. Walks only the holdings
    /// with rights; those of ended cells are forgotten (the others' at most every
    /// [`SWEEP_MS`]).
    pub(super) fn returns(&self, now_ms: u64, skew_ms: u64, everything: bool) -> Vec<RightsReturn> {
        let _walk = self.walking.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = std::mem::take(&mut *self.list());
        let mut returns = Vec::new();
        let mut kept = Vec::new();
        for (cell, holding) in listed {
            let position = WindowPosition::at(now_ms, cell.duration_ms);
            let ended = cell.sequence < position.sequence;
            let ending = cell.sequence == position.sequence && position.until_reset_ms() <= skew_ms;
            let idle =
                now_ms.saturating_sub(holding.last_hit_ms.load(Ordering::Relaxed)) >= IDLE_MS;
            if everything || ended || ending || idle {
                let count = holding.take_all();
                if count > 0 {
                    returns.push(RightsReturn {
                        cell: cell.clone(),
                        count,
                    });
                }
            }
            if ended {
                self.cells.remove(&cell);
            }
            if holding.stays_listed() {
                kept.push((cell, holding));
            }
        }
        self.list().append(&mut kept);
        if now_ms.saturating_sub(self.swept_ms.load(Ordering::Relaxed)) >= SWEEP_MS {
            self.swept_ms.store(now_ms, Ordering::Relaxed);
            self.forget_ended(now_ms);
        }
        returns
    }

    /// Forgets the holdings of cells that have ended. Their rights, if any, went back with
    /// the list (or go with its next walk: the list keeps its own reference).
    fn forget_ended(&self, now_ms: u64) {
        let ended: Vec<CellKey> = self
            .cells
            .iter()
            .filter(|(cell, _)| {
                cell.sequence < WindowPosition::at(now_ms, cell.duration_ms).sequence
            })
            .map(|(cell, _)| cell)
            .collect();
        for cell in ended {
            self.cells.remove(&cell);
        }
    }

    /// Holdings on the list (for tests: what a give-back walks).
    #[cfg(test)]
    pub(super) fn listed_count(&self) -> usize {
        self.list().len()
    }
}

#[cfg(test)]
mod tests;
