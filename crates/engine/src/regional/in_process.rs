//! The regional origin of a region made of one process: a bounded map in memory.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use quick_cache::sync::{Cache, EntryAction, EntryResult};

use super::{
    CellRead, OriginFuture, RegionalOrigin, RightsAsk, RightsReturn, RightsRow, counter_id,
};
use crate::cell_key::{CellKey, CounterKey};
use crate::pn::PnCount;

/// A 128-bit hash of a cell's or a counter's key, as two words: a `u128` is 16-byte aligned on
/// x86-64, which padded each component's entry from 40 to 48 bytes and its slot in the map
/// from 48 to 64 (the slot count is the in-process origin's footprint per live cell).
type Hash128 = [u64; 2];

/// One PN-counter component: a cell (by the 128-bit hash of its key) and a process.
type ComponentKey = (Hash128, u16);

/// The G-Counter cells of a region, bounded like the engine's cell table so memory stays
/// capped. In the embedded default the region is this one process; tests make several
/// "processes" share one store with [`InProcessOrigin::sibling`].
///
/// Alone (the embedded default) it keeps the count of each cell the engine's table evicts,
/// so a cell read again inside its sliding window resumes it; the table's live cells are the
/// region's counts and it holds no copy of them (module `local::cell::departure`). Shared by
/// siblings it holds every process's component of every cell, as a remote origin does. It
/// holds at most as many components as the engine holds evictable cells (the serve wiring
/// gives it that count, whose bytes the cell budget reserves); a counter at or near its
/// limit never depends on it, because the engine does not evict such a cell while its
/// protected share has room (were both maps to evict the counter under a flood, its client
/// would get its budget again).
///
/// Each component is 16 + 2 bytes of key and 8 of count, with no allocation: in the embedded
/// default this map sits beside the engine's cell table, and storing whole `CellKey`s and a
/// per-cell component list here once cost more than the table itself. Cells are told apart
/// by a 128-bit hash; two live cells colliding is about as likely as a hardware fault
/// (n² / 2¹²⁹: ~10⁻²⁷ for a million cells).
pub struct InProcessOrigin {
    /// Each component's hits.
    components: Arc<Cache<ComponentKey, u64>>,
    /// Each component's refunds, for the components that have any: a cell nobody refunds
    /// costs nothing more than it did before refunds existed. Bounded like `components`.
    refunds: Arc<Cache<ComponentKey, u64>>,
    /// The region's penalty box: counter (by the 128-bit hash of its key) → until when (ms).
    /// Bounded to a sixteenth of the components: penalized counters are a few hot clients.
    penalties: Arc<Cache<Hash128, u64>>,
    /// The rights of `never_above` counters its processes took (module `rights`), for
    /// several processes sharing one store ([`InProcessOrigin::sibling`]): one process alone
    /// decides exactly without them.
    rights: Arc<Mutex<RightsBook>>,
    processes: Arc<Processes>,
    process: u16,
}

/// What one component costs in the map: its slot (56 B on x86-64: the key, the count,
/// quick_cache's state and list links) and its share of the hash table (a 4-byte index and a
/// control byte at a load of 7/16 to 7/8). In the embedded default each evicted cell may
/// leave one (this process's), so the cell budget reserves it per evictable cell
/// ([`RegionalOrigin::bytes_per_cell`]).
pub const COMPONENT_BYTES: u64 = 64;

/// A map of at most `items` entries that keeps no ghosts. quick_cache remembers the hashes of
/// evicted keys (half as many as it holds, by default) to admit a returning key as hot: each
/// ghost takes a whole slot. Under a flood of unique keys this map evicts as the cell table
/// does, and its ghosts were ~35 B of resident memory per live cell that no budget counted;
/// a store of counts gains nothing from them (a cell's component is published once per
/// replay, not looked up again and again).
fn bounded<K: Eq + std::hash::Hash + Clone, V: Clone>(items: usize) -> Cache<K, V> {
    let items = items.max(1);
    let options = quick_cache::OptionsBuilder::new()
        .estimated_items_capacity(items)
        .weight_capacity(items as u64)
        .ghost_allocation(0.0)
        .build();
    match options {
        Ok(options) => Cache::with_options(
            options,
            quick_cache::UnitWeighter,
            quick_cache::DefaultHashBuilder::default(),
            quick_cache::sync::DefaultLifecycle::default(),
        ),
        // Only when a required option is missing; both are set above.
        Err(_) => Cache::new(items),
    }
}

/// The rights of `never_above` counters, by counter id: the row every store keeps
/// ([`RightsRow`]). Bounded like the components: past `max_entries` counters a new one gets no
/// rights (a forgotten row could grant its room twice); the bound is far above what tests of
/// several in-process processes use.
struct RightsBook {
    rows: std::collections::HashMap<[u8; 16], RightsRow>,
    max_entries: usize,
}

impl RightsBook {
    fn take(&mut self, ask: &RightsAsk) -> u64 {
        let id = counter_id(&ask.cell);
        let current = self.rows.get(&id).copied();
        if current.is_none() && self.rows.len() >= self.max_entries {
            return 0;
        }
        let (granted, next) = RightsRow::take(current, ask);
        if let Some(next) = next {
            self.rows.insert(id, next);
        }
        granted
    }

    fn give_back(&mut self, returned: &RightsReturn) {
        let id = counter_id(&returned.cell);
        let next = self
            .rows
            .get(&id)
            .and_then(|row| row.give_back(returned.cell.sequence, returned.count));
        if let Some(next) = next {
            self.rows.insert(id, next);
        }
    }
}

/// The component index of a cell's carried-over count ([`RegionalOrigin::seed`]): above every
/// process's (at most 65,535 processes, indices 0 to 65,534).
const CARRIED: u16 = u16::MAX;

/// The processes sharing the store, by component index.
struct Processes {
    /// A std mutex: taken only to add a sibling (test set-up), never across an await.
    names: Mutex<Vec<Arc<str>>>,
    /// `names.len()`, read by every cold read without taking the lock.
    count: AtomicU16,
}

impl InProcessOrigin {
    pub fn new(max_cells: usize) -> Self {
        Self {
            components: Arc::new(bounded(max_cells)),
            refunds: Arc::new(bounded(max_cells)),
            penalties: Arc::new(bounded(max_cells / 16)),
            rights: Arc::new(Mutex::new(RightsBook {
                rows: std::collections::HashMap::new(),
                max_entries: max_cells.max(1),
            })),
            processes: Arc::new(Processes {
                names: Mutex::new(vec!["local".into()]),
                count: AtomicU16::new(1),
            }),
            process: 0,
        }
    }

    /// Another process of the same region: same cells, its own components (a name already
    /// seen gets that process's components back). `None` past 65,535 processes, the most a
    /// component index holds.
    pub fn sibling(&self, process: &str) -> Option<Self> {
        let mut names = self
            .processes
            .names
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = match names.iter().position(|p| &**p == process) {
            Some(index) => index,
            None => {
                let count = u16::try_from(names.len() + 1).ok()?;
                names.push(process.into());
                self.processes.count.store(count, Ordering::Release);
                names.len() - 1
            }
        };
        Some(Self {
            components: Arc::clone(&self.components),
            refunds: Arc::clone(&self.refunds),
            penalties: Arc::clone(&self.penalties),
            rights: Arc::clone(&self.rights),
            processes: Arc::clone(&self.processes),
            process: u16::try_from(index).ok()?,
        })
    }

    fn read_now(&self, cell: Hash128) -> CellRead {
        let mut read = CellRead::default();
        if let Some(carried) = self.components.get(&(cell, CARRIED)) {
            read.total = read.total.plus(PnCount::new(carried, 0));
        }
        for process in 0..self.processes.count.load(Ordering::Acquire) {
            let count = self.component(cell, process);
            read.total = read.total.plus(count);
            if process == self.process {
                read.own = count;
            }
        }
        read
    }

    /// One process's component of a cell, refunds capped at its hits (a refunds entry may
    /// outlive an evicted hits entry).
    fn component(&self, cell: Hash128, process: u16) -> PnCount {
        let hits = self.components.get(&(cell, process)).unwrap_or(0);
        if hits == 0 {
            return PnCount::default();
        }
        let refunds = self.refunds.get(&(cell, process)).unwrap_or(0);
        PnCount::new(hits, refunds).capped()
    }

    /// Keep the larger of the stored and published cumulative counts, per half (refunds
    /// capped at hits), and read the cell's total.
    fn publish(&self, cell: Hash128, cumulative: PnCount) -> PnCount {
        self.store(cell, cumulative);
        self.read_now(cell).total
    }

    /// The larger of the stored and published cumulative counts, per half. The table's
    /// eviction (on a decision thread) and the replay task may store the same cell at once,
    /// so each half is raised under its map's shard lock, never read and then written.
    fn store(&self, cell: Hash128, cumulative: PnCount) {
        let key = (cell, self.process);
        let cumulative = cumulative.capped();
        if cumulative.hits > 0 {
            raise(&self.components, key, cumulative.hits);
        }
        if cumulative.refunds > 0 {
            raise(&self.refunds, key, cumulative.refunds);
        }
    }
}

/// Sets `key` to `value` unless it holds a larger one, atomically: a map of G-Counter
/// components (or of penalty moments) only grows.
fn raise<K: Eq + std::hash::Hash + Clone>(map: &Cache<K, u64>, key: K, value: u64) {
    let raised = map.entry(&key, None, |_, held| {
        *held = (*held).max(value);
        EntryAction::Retain(())
    });
    match raised {
        // Absent: insert it. (`Replaced` is never asked for by the closure above.) The insert
        // is refused only when the map's bound leaves no room for the value.
        EntryResult::Vacant(slot) | EntryResult::Replaced(slot, _) => {
            let _ = slot.insert(value);
        }
        // Raised in place. (`Removed` is never asked for; `Timeout` needs a timeout.)
        EntryResult::Retained(()) | EntryResult::Removed(..) | EntryResult::Timeout => {}
    }
}

fn cell_hash(key: &CellKey) -> Hash128 {
    let strings = [&**key.workspace(), &**key.namespace(), &*key.identifier];
    key_hash(strings, key.duration_ms, &key.sequence.to_le_bytes())
}

fn counter_hash(key: &CounterKey) -> Hash128 {
    let strings = [&**key.workspace(), &**key.namespace(), &*key.identifier];
    // A different field count than a cell's hash: a counter never collides with a cell.
    key_hash(strings, key.duration_ms, b"penalty")
}

/// A counter's strings and window, then `tail`: what a cell (its sequence) or a penalty adds
/// to the counter's identity.
fn key_hash(strings: [&str; 3], duration_ms: u64, tail: &[u8]) -> Hash128 {
    let hash = super::rights::identity_hash(strings, duration_ms, tail);
    [hash as u64, (hash >> 64) as u64]
}

/// The most cells the in-process origin applies between two yields of the replay.
const IN_PROCESS_REPLAY_BATCH: usize = 64;

impl RegionalOrigin for InProcessOrigin {
    fn name(&self) -> &'static str {
        "in-process"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(std::future::ready(Ok(self.read_now(cell_hash(key)))))
    }

    fn seed<'a>(&'a self, key: &'a CellKey, carried: u64) -> OriginFuture<'a, CellRead> {
        let cell = cell_hash(key);
        // Set-if-absent: the first seed of a cell is the one kept.
        let _ = self.components.get_or_insert_with(&(cell, CARRIED), || {
            Ok::<u64, std::convert::Infallible>(carried)
        });
        Box::pin(std::future::ready(Ok(self.read_now(cell))))
    }

    /// Applied on the replaying thread (~0.7 µs a cell: a cycle of 100,000 cells took 69 ms,
    /// BENCHMARKS.md, "Background work at 1M live cells"), so a batch of
    /// `EngineSettings::replay_batch` (1,000) held a runtime thread ~0.7 ms every cycle, in the
    /// way of the decisions queued behind it (the open-loop p99 at 10,000/s with 1M live
    /// cells); 64 cells hold it ~50 µs.
    fn max_replay_batch(&self) -> usize {
        IN_PROCESS_REPLAY_BATCH
    }

    /// This process's component of a cell: of each live cell when siblings share the store,
    /// else of each cell the table evicted. (Refunds and carried-over counts, kept only for
    /// the cells that have some, are not reserved: they are a few cells' worth.)
    fn bytes_per_cell(&self) -> u64 {
        COMPONENT_BYTES
    }

    /// Only once a sibling shares the store: a process alone is the whole region, and its
    /// table's cells are the region's counts (module `local::cell::departure`). Siblings are
    /// made before any of them decides (test set-up): the cells a process counted alone are
    /// not in the store.
    fn holds_live_cells(&self) -> bool {
        self.processes.count.load(Ordering::Acquire) > 1
    }

    /// A cell with nothing of this process's own leaves nothing to keep (a previous window's
    /// cell read for a decision and never counted in).
    fn keep_evicted(&self, key: &CellKey, own: PnCount) {
        if own.hits > 0 {
            self.store(cell_hash(key), own);
        }
    }

    /// Alone only: shared with siblings, a cell's count is the store's to read.
    fn kept(&self, key: &CellKey) -> Option<CellRead> {
        (!self.holds_live_cells()).then(|| self.read_now(cell_hash(key)))
    }

    fn kept_bytes(&self) -> u64 {
        if self.holds_live_cells() {
            return 0;
        }
        let entries = self.components.len().saturating_add(self.refunds.len());
        (entries as u64).saturating_mul(COMPONENT_BYTES)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        let totals = batch
            .iter()
            .map(|(key, cumulative)| self.publish(cell_hash(key), *cumulative))
            .collect();
        Box::pin(std::future::ready(Ok(totals)))
    }

    /// Entries are not dropped at their moment (readers compare it with their clock); the
    /// map's bound keeps them from piling up.
    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        for (counter, until_ms) in penalties {
            raise(&self.penalties, counter_hash(counter), *until_ms);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        let until = self.penalties.get(&counter_hash(counter)).unwrap_or(0);
        Box::pin(std::future::ready(Ok(until)))
    }

    /// Only once a sibling shares the store: a process alone is the whole region, and its
    /// own exact decision is the rule.
    fn shares_rights(&self) -> bool {
        self.processes.count.load(Ordering::Acquire) > 1
    }

    fn take_rights<'a>(&'a self, ask: &'a RightsAsk) -> OriginFuture<'a, u64> {
        let granted = self
            .rights
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(ask);
        Box::pin(std::future::ready(Ok(granted)))
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [RightsReturn]) -> OriginFuture<'a, ()> {
        let mut book = self.rights.lock().unwrap_or_else(PoisonError::into_inner);
        for returned in returns {
            book.give_back(returned);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_takes_no_alignment_padding() {
        // A `u128` key is 16-byte aligned: the entry would be 48 bytes, its slot 80.
        assert_eq!(std::mem::size_of::<(ComponentKey, u64)>(), 32);
    }

    #[tokio::test]
    async fn siblings_share_the_penalty_box_and_keep_the_later_moment() {
        let a = InProcessOrigin::new(100);
        let Some(b) = a.sibling("b") else {
            panic!("a second process fits")
        };
        let counter = key("x").counter().to_owned_key();
        assert_eq!(b.penalty_until(&counter).await.ok(), Some(0));
        assert!(a.penalize(&[(counter.clone(), 9_000)]).await.is_ok());
        assert!(b.penalize(&[(counter.clone(), 5_000)]).await.is_ok());
        assert_eq!(b.penalty_until(&counter).await.ok(), Some(9_000));
        let other = key("y").counter().to_owned_key();
        assert_eq!(a.penalty_until(&other).await.ok(), Some(0));
    }

    fn key(id: &str) -> CellKey {
        CellKey {
            scope: crate::cell_key::Scope::new("d", "1:k/"),
            identifier: id.into(),
            duration_ms: 1_000,
            sequence: 1,
        }
    }

    #[tokio::test]
    async fn components_merge_with_max_and_sum_into_the_total() {
        let a = InProcessOrigin::new(100);
        let Some(b) = a.sibling("b") else {
            panic!("a second process fits")
        };
        assert_eq!(a.read(&key("x")).await.ok(), Some(CellRead::default()));
        let h = PnCount::hits;
        assert_eq!(
            a.replay(&[(key("x"), h(2)), (key("y"), h(1))]).await.ok(),
            Some(vec![h(2), h(1)])
        );
        assert_eq!(b.replay(&[(key("x"), h(5))]).await.ok(), Some(vec![h(7)]));
        // publishing the same or an older cumulative value changes nothing
        assert_eq!(
            a.replay(&[(key("x"), h(2)), (key("x"), h(1))]).await.ok(),
            Some(vec![h(7), h(7)])
        );
        assert_eq!(
            b.read(&key("x")).await.ok(),
            Some(CellRead {
                total: h(7),
                own: h(5)
            })
        );
    }

    #[tokio::test]
    async fn refunds_merge_per_half_and_never_exceed_a_components_hits() {
        let a = InProcessOrigin::new(100);
        let Some(b) = a.sibling("b") else {
            panic!("a second process fits")
        };
        let pn = PnCount::new;
        assert_eq!(
            a.replay(&[(key("x"), pn(5, 2))]).await.ok(),
            Some(vec![pn(5, 2)])
        );
        // an older refund (or hit) changes nothing; a resend is harmless
        assert_eq!(
            a.replay(&[(key("x"), pn(5, 1)), (key("x"), pn(5, 2))])
                .await
                .ok(),
            Some(vec![pn(5, 2); 2])
        );
        // refunds above the component's own hits are capped: b cannot refund a's hits
        assert_eq!(
            b.replay(&[(key("x"), pn(1, 4))]).await.ok(),
            Some(vec![pn(6, 3)])
        );
        let read = a.read(&key("x")).await.ok();
        assert_eq!(read.map(|r| (r.total.value(), r.own)), Some((3, pn(5, 2))));
    }

    /// An eviction (on a decision thread) and a replay of the same cell may store its
    /// component at once: a store never lowers what another wrote, whichever lands last.
    #[test]
    fn racing_stores_never_lower_a_component() {
        const STORES: u64 = 200_000;
        let origin = Arc::new(InProcessOrigin::new(16));
        let cell: Hash128 = [7, 7];
        let start = Arc::new(std::sync::Barrier::new(2));
        let writers: Vec<_> = [0u64, 1]
            .into_iter()
            .map(|parity| {
                let (origin, start) = (Arc::clone(&origin), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    let mut lowered = 0;
                    for step in 1..=STORES {
                        let hits = 2 * step + parity;
                        origin.store(cell, PnCount::hits(hits));
                        // Only ever larger counts are stored: below this one means a
                        // store of a smaller count landed after it.
                        if origin.component(cell, 0).hits < hits {
                            lowered += 1;
                        }
                    }
                    lowered
                })
            })
            .collect();
        let lowered: u64 = writers.into_iter().filter_map(|w| w.join().ok()).sum();
        assert_eq!(lowered, 0, "stores that a smaller, later store lowered");
        assert_eq!(origin.component(cell, 0).hits, 2 * STORES + 1);
    }
}
