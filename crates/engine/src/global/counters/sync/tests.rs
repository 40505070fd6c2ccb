//! Incremental syncs through a `MemoryStore` whose clock the tests move: what a read takes in,
//! what it may miss, and the full reads that catch it.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::cell_key::{CellKey, CounterKeyRef};
use crate::global::counters::tests::counters;
use crate::global::{GlobalSettings, GlobalStore, MemoryStore};
use crate::local::ManualClock;

/// An hour into an hourly window.
const START_MS: u64 = 3_600_000 * 100 + 1_000;
const HOUR_MS: u64 = 3_600_000;
const OVERLAP: Duration = Duration::from_secs(2);

fn region(name: &str, store: &Arc<MemoryStore>, clock: &Arc<ManualClock>) -> GlobalCounters {
    counters(name, store, clock, GlobalSettings::default())
}

fn cell(identifier: &str) -> CellKey {
    CellKey {
        scope: crate::cell_key::Scope::new("d", "4:user/"),
        identifier: identifier.into(),
        duration_ms: HOUR_MS,
        sequence: START_MS / HOUR_MS,
    }
}

/// What `counters` counts of the cell `identifier` (its own and the others').
fn seen(counters: &GlobalCounters, identifier: &str) -> u64 {
    let scope = crate::cell_key::Scope::new("d", "4:user/");
    let counter = CounterKeyRef::new(&scope, identifier, HOUR_MS);
    let state = counters.engine.inspection().inspect(&counter);
    state.current.map_or(0, |c| c.total())
}

async fn publish(store: &MemoryStore, region: &str, identifier: &str, hits: u64) {
    let rows = [(cell(identifier), crate::pn::PnCount::hits(hits))];
    let report = store.publish(region, &rows, START_MS).await;
    assert_eq!(report.map(|r| r.published()).ok(), Some(1));
}

/// Store and processes on their own clocks: the store's at 10 s.
fn setup() -> (Arc<MemoryStore>, Arc<ManualClock>) {
    let store = Arc::new(MemoryStore::new().with_overlap(OVERLAP));
    store.set_clock(10_000);
    (store, Arc::new(ManualClock::new(START_MS)))
}

/// [`setup`], with process `b` of region "b" and cell "one" at 10 published by region "a".
async fn setup_with_one() -> (Arc<MemoryStore>, Arc<ManualClock>, GlobalCounters) {
    let (store, clock) = setup();
    let b = region("b", &store, &clock);
    publish(&store, "a", "one", 10).await;
    (store, clock, b)
}

/// [`setup_with_one`], `b` having read it at 20 s and then found nothing new.
async fn setup_up_to_date() -> (Arc<MemoryStore>, Arc<ManualClock>, GlobalCounters) {
    let (store, clock, b) = setup_with_one().await;
    store.set_clock(20_000);
    assert_eq!(b.sync().await, Some(1));
    assert_eq!(b.sync().await, Some(0));
    (store, clock, b)
}

/// Region "a" commits cell "two" at 40 stamped at `stamp_ms`, earlier than the store's clock:
/// a transaction that commits after it took its stamp.
fn commit_two_stamped_at(store: &MemoryStore, stamp_ms: u64) {
    let rows = [(cell("two"), crate::pn::PnCount::hits(40))];
    assert!(store.commit_stamped("a", &rows, START_MS, stamp_ms).is_ok());
}

#[tokio::test]
async fn an_incremental_sync_reads_only_the_cells_changed_since_the_last_one() {
    let (store, _, b) = setup_with_one().await;
    publish(&store, "a", "two", 20).await;
    store.set_clock(20_000);
    assert_eq!(b.sync().await, Some(2), "the first sync reads everything");
    publish(&store, "a", "two", 25).await;
    assert_eq!(b.sync().await, Some(1), "only what changed since 18 s");
    assert_eq!((seen(&b, "one"), seen(&b, "two")), (10, 25));
    assert_eq!(b.sync().await, Some(1), "read again within the overlap");
    store.set_clock(30_000);
    assert_eq!(b.sync().await, Some(1), "the previous read marked 18 s");
    assert_eq!(b.sync().await, Some(0), "nothing changed since 28 s");
    // Its own rows never make a cell changed for it.
    publish(&store, "b", "one", 5).await;
    assert_eq!(b.sync().await, Some(0));
}

#[tokio::test]
async fn a_read_of_one_changed_row_counts_the_rows_read_before() {
    let (store, _, b) = setup_with_one().await;
    publish(&store, "c", "one", 7).await;
    store.set_clock(20_000);
    assert_eq!(b.sync().await, Some(1));
    assert_eq!(seen(&b, "one"), 17);
    store.set_clock(30_000);
    publish(&store, "a", "one", 12).await;
    // A read from the previous one's mark (18 s) returns a's row alone: c's was stamped at
    // 10 s. c's 7 still counts.
    let read = store
        .sync(SyncQuery::since("b", START_MS, Some(ChangeMark(18_000))))
        .await;
    let regions: Vec<String> = read
        .map(|read| read.rows.iter().map(|row| row.region.to_string()).collect())
        .unwrap_or_default();
    assert_eq!(regions, ["a"]);
    assert_eq!(b.sync().await, Some(1));
    assert_eq!(seen(&b, "one"), 19);
}

#[tokio::test]
async fn a_row_committed_late_with_an_old_stamp_is_still_read() {
    let (store, _, b) = setup_with_one().await;
    assert_eq!(b.sync().await, Some(1), "read at 10 s");
    store.set_clock(11_000);
    // A transaction stamped at 9 s, committed after that read: within the overlap.
    commit_two_stamped_at(&store, 9_000);
    assert_eq!(b.sync().await, Some(2), "with the cell changed at 10 s");
    assert_eq!(seen(&b, "two"), 40);
}

#[tokio::test]
async fn a_row_an_incremental_sync_missed_is_read_by_the_next_full_one() {
    let (store, clock, b) = setup_with_one().await;
    assert_eq!(b.sync().await, Some(1), "read at 10 s");
    store.set_clock(11_000);
    store.set_clock(20_000);
    assert_eq!(
        b.sync().await,
        Some(1),
        "changed at 10 s, after the mark at 8 s"
    );
    // Stamped 5 s before it commits: slower than the overlap.
    commit_two_stamped_at(&store, 15_000);
    assert_eq!(b.sync().await, Some(0), "missed");
    assert_eq!(seen(&b, "two"), 0);
    clock.advance(GlobalSettings::default().full_sync_interval.as_millis() as u64);
    assert_eq!(b.sync().await, Some(2), "the full sync reads it");
    assert_eq!(seen(&b, "two"), 40);
}

#[tokio::test]
async fn a_process_clock_that_steps_back_brings_a_full_sync() {
    let (_, clock, b) = setup_up_to_date().await;
    clock.set(START_MS - 1);
    assert_eq!(b.sync().await, Some(1));
}

#[tokio::test]
async fn a_restarted_process_reads_everything_first() {
    let (store, clock, _b) = setup_up_to_date().await;
    let restarted = region("b", &store, &clock);
    assert_eq!(restarted.sync().await, Some(1));
    assert_eq!(seen(&restarted, "one"), 10);
}

#[test]
fn a_full_read_is_due_first_then_every_interval() {
    let position = SyncPosition::default();
    let every = Duration::from_secs(60);
    assert_eq!(position.since(1_000, every), None);
    position.read(1_000, true, Some(ChangeMark(7)));
    assert_eq!(position.since(60_999, every), Some(ChangeMark(7)));
    assert_eq!(position.since(61_000, every), None);
    // A store without marks: every read is full.
    position.read(2_000, false, None);
    assert_eq!(position.since(2_000, every), None);
}
