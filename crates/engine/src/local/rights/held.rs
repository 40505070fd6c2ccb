//! The rights this process holds, per cell of a `never_above` counter: spent from memory by
//! the decisions, refilled by takes and given back when idle (the parent module).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::cell_key::{CellKey, CellKeyRef};
use crate::local::WindowPosition;
use crate::regional::RightsReturn;

/// Rights held this long without a request go back to the region.
pub const IDLE_MS: u64 = 1_000;

/// Bytes of one holding besides its key's strings: the key, the `Arc`, the holding's
/// allocation (with the `Arc`'s two counts) and quick_cache's bookkeeping.
pub const HOLDING_BYTES: u64 =
    (size_of::<CellKey>() + size_of::<Arc<Holding>>() + size_of::<Holding>() + 16 + 40) as u64;

/// The rights this process holds, per cell of a `never_above` counter. Bounded in bytes
/// (its share of `--max-cell-bytes`): a holding evicted under a flood of counters takes its
/// rights with it, which the region counts as spent until their cell ends (never above,
/// never lost for more than two windows).
pub(in crate::local) struct HeldRights {
    cells: Cache<CellKey, Arc<Holding>, HoldingWeighter>,
    max_bytes: u64,
}

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

    pub(super) fn add(&self, rights: u64) {
        self.rights.fetch_add(rights, Ordering::AcqRel);
    }

    pub(super) fn take_all(&self) -> u64 {
        self.rights.swap(0, Ordering::AcqRel)
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
            max_bytes,
        }
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
    /// leaving: no right of it is spent there) and of idle holdings. Holdings of cells that
    /// have ended are forgotten.
    pub(super) fn returns(&self, now_ms: u64, skew_ms: u64, everything: bool) -> Vec<RightsReturn> {
        let mut returns = Vec::new();
        let mut ended = Vec::new();
        for (cell, holding) in self.cells.iter() {
            let position = WindowPosition::at(now_ms, cell.duration_ms);
            let ending = cell.sequence == position.sequence && position.until_reset_ms() <= skew_ms;
            let over = cell.sequence < position.sequence || ending;
            let idle =
                now_ms.saturating_sub(holding.last_hit_ms.load(Ordering::Relaxed)) >= IDLE_MS;
            if cell.sequence < position.sequence {
                ended.push(cell.clone());
            }
            if everything || over || idle {
                let count = holding.take_all();
                if count > 0 {
                    returns.push(RightsReturn { cell, count });
                }
            }
        }
        for cell in ended {
            self.cells.remove(&cell);
        }
        returns
    }
}
