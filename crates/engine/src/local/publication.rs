//! Publication to the global layer: the cells whose regional counts are due for the global
//! store (the flush walks them a chunk at a time) and the merge of what the global sync read.
//! The engine's side of `GlobalCounters`; the store itself lives in `global`.

use std::collections::HashMap;
use std::sync::Arc;

use super::Engine;
use super::cell::SharedCell;
use super::components::{ForeignComponents, ReadComponents};
use super::table::{self, CellTable};
use crate::cell_key::CellKey;
use crate::pn::PnCount;

/// A held cell as the fast cadence sees it at a tick.
#[derive(Debug, Clone, Copy)]
pub struct CellGrowth {
    /// This region's hits (the regional count's hits half).
    pub regional_hits: u64,
    /// The count a decision sees: this region's and the others'.
    pub total: u64,
    pub limit: u64,
    /// Whether another region counts in the cell.
    pub shared: bool,
}

/// A cell's regional count on its way to the global counters.
pub struct Publishable {
    pub key: CellKey,
    /// The region's hits and refunds of the cell.
    pub count: PnCount,
    cell: SharedCell,
}

impl Publishable {
    /// Call only after the row was written: a failed write leaves the cell to publish again.
    pub fn mark_published(&self) {
        self.cell.mark_published(self.count);
    }
}

/// A walk of the cell table for [`Publishable`] cells, a chunk at a time
/// ([`Publication::publishable_walk`]). Cells created or changed while it runs may or may not be
/// seen; a later walk sees them (a cell stays publishable until it is marked published).
pub struct PublishableWalk<'a> {
    cells: Box<dyn Iterator<Item = (CellKey, SharedCell)> + Send + 'a>,
    floor: f64,
    /// Whether a cell another region counts is published from its first hit
    /// ([`shared_from_first_hit`](Self::shared_from_first_hit)).
    shared_from_first_hit: bool,
    /// Cells visited so far: the walk yields to the runtime every `table::WALK_SLICE`.
    visited: usize,
}

impl PublishableWalk<'_> {
    /// A cell another region counts is published from its first hit, whatever the floor: in a
    /// race near the limit the counts every region keeps below the floor are the excess (ten
    /// regions × 2 % is 0.2× the limit), and a region racing alone against a few light ones
    /// never hears their counts below it. Cells of one region, most of them, keep the floor.
    pub fn shared_from_first_hit(self) -> Self {
        Self {
            shared_from_first_hit: true,
            ..self
        }
    }

    /// The next publishable cells, at most `max` of them; empty once the table is walked.
    pub async fn next_chunk(&mut self, max: usize) -> Vec<Publishable> {
        let mut rows = Vec::with_capacity(max.min(table::WALK_SLICE));
        while rows.len() < max {
            let Some((key, cell)) = self.cells.next() else {
                break;
            };
            self.visited += 1;
            if self.visited.is_multiple_of(table::WALK_SLICE) {
                tokio::task::yield_now().await;
            }
            let floor = if self.shared_from_first_hit && cell.global() > 0 {
                0.0
            } else {
                self.floor
            };
            if let Some(count) = cell.to_publish(floor) {
                rows.push(Publishable { key, count, cell });
            }
        }
        rows
    }
}

/// The cell table as the global counters see it: what to publish, and the merge of what
/// their sync read ([`Engine::publication`]).
#[derive(Clone, Copy)]
pub struct Publication<'e> {
    table: &'e CellTable,
    components: &'e ForeignComponents,
}

impl Engine {
    /// Publishing to the global counters and merging what they sync.
    pub fn publication(&self) -> Publication<'_> {
        Publication {
            table: &self.table,
            components: &self.components,
        }
    }
}

impl<'e> Publication<'e> {
    /// Publication starts: from now on an expired cell at or above `floor` is closed before
    /// the reaper drops it (a closing replay reads the region's final total back, and the
    /// flush takes it), for one window at most (`CellTable::reap_closing`).
    pub fn hold_unpublished(&self, floor: f64, recheck: std::time::Duration) {
        let recheck_ms = u64::try_from(recheck.as_millis()).unwrap_or(u64::MAX);
        self.table.hold_unpublished(floor, recheck_ms);
    }

    /// Cells whose regional count is worth publishing to the global counters: at or above
    /// `floor × limit` (skipped first, the cheap test) and changed since the last successful
    /// publication.
    ///
    /// A walk of the whole table, so it yields to the runtime every `table::WALK_SLICE`
    /// cells, as the reaper does: with one worker it must not hold the only thread. It
    /// gathers every row at once; the global flush takes them a chunk at a time instead
    /// ([`publishable_walk`](Self::publishable_walk)).
    pub async fn publishable(&self, floor: f64) -> Vec<Publishable> {
        let mut walk = self.publishable_walk(floor);
        let mut rows = Vec::new();
        loop {
            let chunk = walk.next_chunk(usize::MAX).await;
            if chunk.is_empty() {
                return rows;
            }
            rows.extend(chunk);
        }
    }

    /// The walk of [`publishable`](Self::publishable), a chunk of rows at a time: the global
    /// flush publishes and drops each chunk before it walks on. Gathering 500,000 rows first
    /// held a one-worker runtime's only thread for 18 ms when they were dropped (a free
    /// and three reference counts each) and again to clone their keys.
    pub fn publishable_walk(&self, floor: f64) -> PublishableWalk<'e> {
        PublishableWalk {
            cells: Box::new(self.table.cells()),
            floor,
            shared_from_first_hit: false,
            visited: 0,
        }
    }

    /// The cells of `keys` that are publishable (see [`publishable`](Self::publishable)):
    /// lookups of a few cells, no walk of the table.
    pub fn publishable_of<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k CellKey>,
        floor: f64,
    ) -> Vec<Publishable> {
        keys.into_iter()
            .filter_map(|key| {
                let cell = self.table.get(&key.borrowed())?;
                let count = cell.to_publish(floor)?;
                Some(Publishable {
                    key: key.clone(),
                    count,
                    cell,
                })
            })
            .collect()
    }

    /// A contended cell's denials since the last call and this process's hits in it, and
    /// the next contended decision on it may queue it again (see `WindowCell::hold`).
    /// `None`: the cell left the table.
    pub fn sample_contended(&self, key: &CellKey) -> Option<(u64, u64)> {
        let cell = self.table.get(&key.borrowed())?;
        cell.release_hold();
        Some((cell.take_denied(), cell.own()))
    }

    /// What the fast cadence watches of a held cell; `None`: the cell left the table.
    pub fn growth_of(&self, key: &CellKey) -> Option<CellGrowth> {
        let cell = self.table.get(&key.borrowed())?;
        Some(CellGrowth {
            regional_hits: cell.regional_count().hits,
            total: cell.total(),
            limit: cell.limit(),
            shared: cell.global() > 0,
        })
    }

    /// Whether the counter's previous window's cell is in the table with this region's
    /// count and no other region's: a counter of this region alone, as far as this process
    /// knows.
    pub fn counted_alone_before(&self, key: &CellKey) -> bool {
        self.previous(key)
            .is_some_and(|cell| cell.regional() > 0 && cell.global() == 0)
    }

    /// Whether another region counts in the cell, or did in the counter's previous window
    /// (early in a window, before a sync brought the others' counts, the previous cell's tell
    /// that the limit is shared, as they do for a decision).
    pub fn shared_now_or_before(&self, key: &CellKey) -> bool {
        let shared = |cell: SharedCell| cell.global() > 0;
        self.table.get(&key.borrowed()).is_some_and(shared)
            || self.previous(key).is_some_and(shared)
    }

    /// The counter's previous window's cell, when the table holds it.
    fn previous(&self, key: &CellKey) -> Option<SharedCell> {
        let sequence = key.sequence.checked_sub(1)?;
        self.table.get(&key.borrowed().with_sequence(sequence))
    }

    /// Merge what the global sync read for one cell: the other regions' sum into `global`,
    /// and this region's own row as a lower bound of `regional` (it never makes the cell
    /// fresh: only the regional origin does). Creates the cell when missing; returns whether
    /// it did.
    ///
    /// Blocks the thread while a decision seeds the cell from the origin: on the runtime,
    /// [`merge_synced_all`](Self::merge_synced_all) waits for it instead.
    pub fn merge_synced(&self, key: &CellKey, foreign: PnCount, own: PnCount) -> bool {
        let (cell, created) = self.table.get_or_insert_empty(key);
        self.merge_into(&cell, foreign, own);
        created
    }

    fn merge_into(&self, cell: &SharedCell, foreign: PnCount, own: PnCount) {
        cell.merge_global(foreign, self.table.changes());
        cell.merge_regional(own, self.table.changes());
    }

    /// Merge the rows one sync read (`row` gives each one's cell, region and component):
    /// each cell's foreign rows into the other regions' components this process holds
    /// (`local::components`), whose sum merges into `global`, and the row of `region` (this
    /// one) as a lower bound of `regional`, as [`merge_synced_all`](Self::merge_synced_all)
    /// does. Returns the cells the rows belong to and the cells created.
    pub async fn merge_synced_rows<S: Send + Sync + 'static>(
        &self,
        rows: Vec<S>,
        region: &str,
        row: for<'s> fn(&'s S) -> (&'s CellKey, &'s Arc<str>, PnCount),
    ) -> (usize, u64) {
        // Per cell: its foreign rows of this read, and this region's own row.
        let mut cells: HashMap<CellKey, (ReadComponents, PnCount)> = HashMap::new();
        for (grouped, read) in rows.iter().enumerate() {
            if grouped % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let (key, row_region, count) = row(read);
            if !cells.contains_key(key) {
                cells.insert(key.clone(), Default::default());
            }
            let Some((foreign, own)) = cells.get_mut(key) else {
                continue;
            };
            if &**row_region == region {
                *own = own.merge(count);
            } else {
                foreign.push((Arc::clone(row_region), count));
            }
        }
        let bytes = crate::aside::buffer_bytes(&rows);
        crate::aside::drop_aside(rows, bytes);
        let mut summed = Vec::with_capacity(cells.len());
        for (merged, (key, (foreign, own))) in cells.into_iter().enumerate() {
            if merged % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let foreign = self.components.merge(&key, &foreign);
            summed.push((key, foreign, own));
        }
        let cells = summed.len();
        let created = self
            .merge_synced_all(summed, |(key, foreign, own)| (key, *foreign, *own))
            .await;
        (cells, created)
    }

    /// Forget the other regions' components of cells whose window has passed (see
    /// [`merge_synced_rows`](Self::merge_synced_rows)): after each full sync.
    pub fn forget_expired_components(&self, now_ms: u64) {
        self.components.forget_expired(now_ms);
    }

    /// [`merge_synced`](Self::merge_synced) for every cell one sync read, yielding to the
    /// runtime every `table::WALK_SLICE` cells as the table walks do: a sync of a million
    /// cells must not hold a one-worker runtime's only thread. Returns the cells created.
    /// `counts` gives each cell's key, the other regions' sum and this region's own row (a
    /// function pointer, not a closure: the future stays `Send` for any caller).
    ///
    /// It takes the cells and drops each one once merged, so their keys are freed a slice at
    /// a time too: dropping a million read cells at once held the only thread for tens of
    /// milliseconds. The emptied buffer (104 MB at a million cells) is freed on
    /// the blocking pool ([`crate::aside`]): giving its pages back to the kernel in the last
    /// slice was that slice's 7 to 16 ms of CPU (`munmap`, by profile).
    pub async fn merge_synced_all<S: Send + Sync + 'static>(
        &self,
        cells: Vec<S>,
        counts: for<'s> fn(&'s S) -> (&'s CellKey, PnCount, PnCount),
    ) -> u64 {
        let bytes = crate::aside::buffer_bytes(&cells);
        let mut cells = cells.into_iter();
        let mut created = 0;
        for (merged, cell) in cells.by_ref().enumerate() {
            if merged % table::WALK_SLICE == table::WALK_SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let (key, foreign, own) = counts(&cell);
            // Awaited, not blocking: a decision seeding this cell from the origin holds its
            // placeholder, and a worker blocked here could be the one its task needs (a
            // restarted process's first sync, under load, hung its runtime that way).
            let (merged, new) = self.table.get_or_insert_empty_async(key).await;
            self.merge_into(&merged, foreign, own);
            if new {
                created += 1;
            }
        }
        crate::aside::drop_aside(cells, bytes);
        created
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::*;
    use crate::cell_key::CounterKeyRef;
    use crate::local::{EngineSettings, Hit, ManualClock};
    use crate::recorder::NoRecorder;
    use crate::regional::{CellRead, InProcessOrigin, OriginFuture, RegionalOrigin};

    /// An origin whose reads wait for a permit: a decision seeding a cold cell holds the
    /// cell's placeholder until one is given.
    struct Gated {
        inner: InProcessOrigin,
        reads: Arc<Semaphore>,
    }

    impl RegionalOrigin for Gated {
        fn name(&self) -> &'static str {
            "gated"
        }

        fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
            Box::pin(async move {
                let _permit = self.reads.acquire().await;
                self.inner.read(key).await
            })
        }

        fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
            self.inner.replay(batch)
        }
    }

    /// A sync merging a cell that a decision is seeding from the origin: the merge waits for
    /// the seed without blocking the thread. It used to block it in the table's placeholder
    /// wait, and on a runtime whose workers were all blocked so the decision's task never ran
    /// again (a restarted process's first sync under load hung it for good).
    #[test]
    fn a_sync_waits_for_a_cell_a_decision_is_seeding_without_blocking_the_thread() {
        let (done, finished) = std::sync::mpsc::channel();
        // A thread of its own: blocked, it cannot fail the test by a timeout of the runtime.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build();
            let Ok(runtime) = runtime else {
                return;
            };
            let merged = runtime.block_on(async {
                let reads = Arc::new(Semaphore::new(0));
                let origin = Gated {
                    inner: InProcessOrigin::new(100),
                    reads: Arc::clone(&reads),
                };
                let engine = Arc::new(Engine::new(
                    EngineSettings::default(),
                    Arc::new(origin),
                    Arc::new(ManualClock::new(3_600_000 * 100 + 1_000)),
                    Arc::new(NoRecorder),
                ));
                let deciding = Arc::clone(&engine);
                let decision = tokio::spawn(async move {
                    let scope = crate::cell_key::Scope::new("d", "4:user/");
                    let hit = Hit {
                        counter: CounterKeyRef::new(&scope, "1:u", 3_600_000),
                        limit: 100,
                        cost: 1,
                        exact: false,
                    };
                    deciding.check(hit).await.allowed
                });
                // The decision now waits for its first origin read, placeholder held; the
                // permits come once the merge below is waiting.
                tokio::task::yield_now().await;
                let open = Arc::clone(&reads);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    open.add_permits(10);
                });
                let synced = vec![(
                    CellKey::new("d", "4:user/", "1:u", 3_600_000, 99),
                    PnCount::hits(7),
                )];
                engine
                    .publication()
                    .merge_synced_all(synced, |(key, foreign)| (key, *foreign, PnCount::default()))
                    .await;
                let allowed = decision.await.unwrap_or(false);
                let previous = engine
                    .publication()
                    .table
                    .get(&CellKey::new("d", "4:user/", "1:u", 3_600_000, 99).borrowed());
                (allowed, previous.map(|cell| cell.global()))
            });
            let _ = done.send(merged);
        });
        let merged = finished.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            merged,
            Ok((true, Some(7))),
            "the merge and the decision both finish, the merge on the seeded cell"
        );
    }
}
