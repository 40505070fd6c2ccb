//! Regions converging through a `MemoryStore`, with a manual clock.

use super::*;
use crate::cell_key::{CellKey, CounterKeyRef};
use crate::global::{MemoryStore, REGION_MAX_BYTES};
use crate::local::{Clock, EngineSettings, Hit, ManualClock, Reaped, Verdict};
use crate::pn::PnCount;
use crate::recorder::{FlushRecord, NoRecorder};
use crate::regional::InProcessOrigin;

/// The clock's start: an hour into the window of the tests' hourly cell.
const START_MS: u64 = 3_600_000 * 100 + 1_000;

/// One region's process: its engine and the global counters syncing it through the store.
/// Every test hits the same counter ([`Names::hit`]), limit 100.
struct Region {
    engine: Arc<Engine>,
    counters: GlobalCounters,
    names: Names,
}

impl Region {
    /// A hit of `cost` on the shared counter (0 only looks).
    async fn check(&self, cost: u64) -> Verdict {
        self.engine.check(self.names.hit(cost)).await
    }

    /// Admits `cost` and flushes, the cell then at least at the floor: its one row written.
    async fn admit_and_publish(&self, cost: u64) {
        assert!(self.check(cost).await.allowed, "{cost} fits");
        assert_eq!(self.counters.flush().await.published, 1, "{cost} published");
    }

    /// What the region sees left of the limit once it synced.
    async fn synced_remaining(&self) -> u64 {
        self.counters.sync().await;
        self.remaining().await
    }

    /// What the region sees left of the limit.
    async fn remaining(&self) -> u64 {
        self.check(0).await.remaining
    }
}

/// An engine on an in-process regional origin, as `serve` builds one per process.
fn engine(clock: Arc<ManualClock>, recorder: Arc<dyn Recorder>) -> Arc<Engine> {
    engine_on(Arc::new(InProcessOrigin::new(1_000)), clock, recorder)
}

fn engine_on(
    origin: Arc<InProcessOrigin>,
    clock: Arc<ManualClock>,
    recorder: Arc<dyn Recorder>,
) -> Arc<Engine> {
    Arc::new(Engine::new(
        EngineSettings::default(),
        origin,
        clock,
        recorder,
    ))
}

/// The global counters of region `name`, on an engine of their own, with `settings`: the
/// process of the tests of the syncs and onsets, which look at the counters only.
pub(super) fn counters(
    name: &str,
    store: &Arc<MemoryStore>,
    clock: &Arc<ManualClock>,
    settings: GlobalSettings,
) -> GlobalCounters {
    let metrics: Arc<dyn Recorder> = Arc::new(NoRecorder);
    let engine = engine(clock.clone(), metrics.clone());
    GlobalCounters::new(store.clone(), engine, name.into(), settings, metrics)
}

/// An empty store and a clock at `START_MS`.
fn store_and_clock() -> (Arc<MemoryStore>, Arc<ManualClock>) {
    (
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(START_MS)),
    )
}

fn region(name: &str, store: &Arc<MemoryStore>, clock: &Arc<ManualClock>) -> Region {
    process(name, Arc::new(InProcessOrigin::new(1_000)), store, clock)
}

/// One process of region `name` on `origin` (shared with the region's other processes
/// through [`InProcessOrigin::sibling`]).
fn process(
    name: &str,
    origin: Arc<InProcessOrigin>,
    store: &Arc<MemoryStore>,
    clock: &Arc<ManualClock>,
) -> Region {
    let metrics: Arc<dyn Recorder> = Arc::new(NoRecorder);
    let engine = engine_on(origin, clock.clone(), metrics.clone());
    let counters = GlobalCounters::new(
        store.clone(),
        engine.clone(),
        name.into(),
        // The floor these tests reason with: half the limit (50 of 100).
        GlobalSettings {
            publish_floor: 0.5,
            ..GlobalSettings::default()
        },
        metrics,
    );
    Region {
        engine,
        counters,
        names: names(),
    }
}

struct Names {
    scope: Arc<crate::cell_key::Scope>,
}

impl Names {
    fn hit(&self, cost: u64) -> Hit<'_> {
        self.hit_on("1:u", cost)
    }

    /// A hit on another counter of the same rule (limit 100 an hour).
    fn hit_on<'a>(&'a self, identifier: &'a str, cost: u64) -> Hit<'a> {
        Hit {
            counter: CounterKeyRef::new(&self.scope, identifier, 3_600_000),
            limit: 100,
            cost,
            exact: false,
        }
    }
}

fn names() -> Names {
    Names {
        scope: crate::cell_key::Scope::new("d", "4:user/"),
    }
}

/// Regions `a` and `b` on one store and one clock.
fn setup() -> (Arc<MemoryStore>, Region, Region) {
    let (store, clock) = store_and_clock();
    let a = region("a", &store, &clock);
    let b = region("b", &store, &clock);
    (store, a, b)
}

#[tokio::test]
async fn a_region_admits_only_what_another_left() {
    let (_, a, b) = setup();
    a.admit_and_publish(60).await;
    assert_eq!(b.counters.sync().await, Some(1));
    assert!(!b.check(41).await.allowed, "41 does not fit");
    assert!(b.check(40).await.allowed, "40 does");
    // A's own row is never imported as foreign: A still sees exactly its 60
    assert_eq!(a.synced_remaining().await, 40);
    // B's 40 is below the publish floor (half of 100), but A counts the cell: with the fast
    // cadence on (the default) it is published from its first hit, and A sees the limit full
    let published = Flushed {
        published: 1,
        ..Flushed::default()
    };
    assert_eq!(b.counters.flush().await, published);
    assert_eq!(a.synced_remaining().await, 0);
}

#[tokio::test]
async fn a_restarted_process_reads_its_regions_own_rows_back_once() {
    let (store, a, _) = setup();
    a.admit_and_publish(70).await;
    // No other region wrote the cell: sync leaves it out.
    assert_eq!(a.counters.sync().await, Some(0));
    // The process restarts (its in-process origin and cells are gone); same store and clock.
    let restarted = region("a", &store, &Arc::new(ManualClock::new(START_MS)));
    assert_eq!(restarted.remaining().await, 100);
    assert_eq!(restarted.counters.sync().await, Some(0));
    assert_eq!(
        restarted.remaining().await,
        30,
        "the region's 70 are back from its own row"
    );
    // Read once: a later sync does not read the own rows again (a higher own row written
    // meanwhile by a sibling stays with the regional origin).
    store
        .publish("a", &[(store.rows()[0].key.clone(), PnCount::hits(90))], 2)
        .await
        .map(|report| assert_eq!(report.published(), 1))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(restarted.synced_remaining().await, 30);
}

#[tokio::test]
async fn below_the_floor_stays_local_and_unchanged_cells_are_not_rewritten() {
    let (store, a, _) = setup();
    a.check(49).await;
    assert_eq!(a.counters.flush().await, Flushed::default());
    a.admit_and_publish(1).await;
    assert_eq!(a.counters.flush().await, Flushed::default(), "unchanged");
    assert_eq!(store.rows().len(), 1);
    assert_eq!(store.rows()[0].count, 50);
}

#[tokio::test]
async fn a_failed_flush_keeps_rows_pending_until_the_store_returns() {
    let (store, a, b) = setup();
    a.check(70).await;
    store.set_failing(true);
    assert_eq!(a.counters.flush().await.failed, 1);
    assert_eq!(b.counters.sync().await, None, "sync fails too");
    store.set_failing(false);
    assert_eq!(a.counters.flush().await.published, 1, "still pending");
    b.counters.sync().await;
    assert!(!b.check(31).await.allowed);
}

/// The start of the window after next of the tests' hourly cell: the moment the reaper may
/// drop it.
const EXPIRY_MS: u64 = 3_600_000 * 102;

/// A window's last counts that reach the cell while the store is down, the cell expiring
/// before the store is back: the region's row must still end at the regional total. The
/// reaper used to drop the expired cell with its unpublished count, and the row stayed below
/// the total for good (the chaos run's database gap).
#[tokio::test]
async fn a_count_unpublished_when_its_cell_expires_still_reaches_the_store() {
    let (store, clock) = store_and_clock();
    let a = region("a", &store, &clock);
    a.admit_and_publish(60).await;
    assert!(a.check(1).await.allowed);
    store.set_failing(true);
    assert_eq!(a.counters.flush().await.failed, 1);
    clock.set(EXPIRY_MS);
    assert_eq!(
        a.engine.reap_counted().await.held,
        1,
        "held: its count is unpublished"
    );
    store.set_failing(false);
    publishes_the_regions_total(&a, &store, 61).await;
    a.engine.convergence().replay_now().await;
    dropped_two_flush_intervals_after_expiry(&a, &clock).await;
}

/// The region's row of the tests' cell ends at `total`, written by this flush.
async fn publishes_the_regions_total(process: &Region, store: &MemoryStore, total: u64) {
    assert_eq!(process.counters.flush().await.published, 1);
    assert_eq!(
        stored_counts(store).get("1:u"),
        Some(&total),
        "the region's total"
    );
}

/// The reaper's walk at `at_ms`.
async fn reap_at(process: &Region, clock: &ManualClock, at_ms: u64) -> Reaped {
    clock.set(at_ms);
    process.engine.reap_counted().await
}

/// Closed and published: the walk two flush intervals after the cell's expiry drops it, with
/// nothing unpublished.
async fn dropped_two_flush_intervals_after_expiry(process: &Region, clock: &ManualClock) {
    let reaped = reap_at(process, clock, EXPIRY_MS + 20_000).await;
    assert_eq!((reaped.removed, reaped.unpublished), (1, 0));
}

/// Two processes of region `a` on one in-process origin.
fn two_processes_of_a(store: &Arc<MemoryStore>, clock: &Arc<ManualClock>) -> (Region, Region) {
    let origin = InProcessOrigin::new(1_000);
    let Some(sibling) = origin.sibling("p2") else {
        panic!("a second process on the region's origin");
    };
    let p1 = process("a", Arc::new(origin), store, clock);
    let p2 = process("a", Arc::new(sibling), store, clock);
    (p1, p2)
}

/// Region `a`'s p2 counted 50 and flushed them; then p1 counted 10, replayed them to the
/// region's origin and was killed before any flush took them. Returns p2.
async fn p2_after_p1_killed_unflushed(
    store: &Arc<MemoryStore>,
    clock: &Arc<ManualClock>,
) -> Region {
    let (p1, p2) = two_processes_of_a(store, clock);
    assert!(p2.check(50).await.allowed);
    p2.engine.convergence().replay_now().await;
    assert_eq!(p2.counters.flush().await.published, 1);
    assert!(p1.check(10).await.allowed);
    p1.engine.convergence().replay_now().await;
    drop(p1);
    p2
}

/// A process that replayed its last counts and died before its flush took them: the
/// region's other process accepted nothing in the cell since, so it never read them and its
/// flushes left them out of the row. The closing replay at the cell's expiry reads the
/// region's final total back, and the row ends at it. Before, the reaper dropped the cell and
/// the row stayed short by the dead process's last counts.
#[tokio::test]
async fn counts_of_a_process_killed_before_its_flush_reach_the_store() {
    let (store, clock) = store_and_clock();
    let p2 = p2_after_p1_killed_unflushed(&store, &clock).await;
    assert_eq!(
        p2.counters.flush().await,
        Flushed::default(),
        "p2 knows nothing new"
    );
    assert_eq!(stored_counts(&store).get("1:u"), Some(&50));

    clock.set(EXPIRY_MS);
    assert_eq!(
        p2.engine.reap_counted().await.held,
        1,
        "closing, not dropped"
    );
    p2.engine.convergence().replay_now().await;
    publishes_the_regions_total(&p2, &store, 60).await;
    dropped_two_flush_intervals_after_expiry(&p2, &clock).await;
}

/// A cell only one process of its region counts (an RLQS bucket, whose one stream a single
/// process serves): that process replayed its last counts and died before its flush took
/// them. Its sibling holds the cell only through the sync (another region counts it too),
/// with nothing of its own in it; the closing replay at the cell's expiry still reads the
/// region's final total back, and the row ends at it. Before, only a process with counts of
/// its own in the cell closed it, and the row stayed short by the dead process's last counts.
#[tokio::test]
async fn counts_of_the_only_process_counting_a_cell_reach_the_store_after_its_kill() {
    let (store, clock) = store_and_clock();
    let (p1, p2) = two_processes_of_a(&store, &clock);
    let b = region("b", &store, &clock);
    assert!(p1.check(50).await.allowed);
    p1.engine.convergence().replay_now().await;
    assert_eq!(p1.counters.flush().await.published, 1);
    // Region b counts the cell too (published from its first hit: it is shared).
    b.counters.sync().await;
    b.admit_and_publish(1).await;
    // p2 learns of the cell from the store only: b's row, and its region's own row.
    p2.counters.sync().await;
    assert_eq!(
        p2.remaining().await,
        49,
        "p2 holds the cell, none of it its own"
    );
    assert!(p1.check(10).await.allowed);
    p1.engine.convergence().replay_now().await;
    drop(p1);
    assert_eq!(stored_counts_of(&store, "a").get("1:u"), Some(&50));

    clock.set(EXPIRY_MS);
    assert_eq!(
        p2.engine.reap_counted().await.held,
        1,
        "closing, not dropped"
    );
    p2.engine.convergence().replay_now().await;
    p2.counters.flush().await;
    assert_eq!(
        stored_counts_of(&store, "a").get("1:u"),
        Some(&60),
        "region a's row ends at its total"
    );
    dropped_two_flush_intervals_after_expiry(&p2, &clock).await;
}

/// The reaper's first walk after a cell's expiry may come more than a window after it: it walks
/// every `reap_interval` (5 s), longer than a short window (a limit per second). That walk
/// still closes the cell, and keeps it until the next walk, so that the closing replay and a
/// flush bring the region's final total to its row. Before, a walk past the window the cell
/// is held for dropped it unclosed, and the row stayed short by a killed process's last
/// counts.
#[tokio::test]
async fn a_cell_first_seen_expired_a_window_late_is_still_closed() {
    let (store, clock) = store_and_clock();
    let p2 = p2_after_p1_killed_unflushed(&store, &clock).await;

    let late = EXPIRY_MS + 3_600_000 + 1;
    assert_eq!(
        reap_at(&p2, &clock, late).await.held,
        1,
        "closing, not dropped"
    );
    p2.engine.convergence().replay_now().await;
    publishes_the_regions_total(&p2, &store, 60).await;
    let reaped = reap_at(&p2, &clock, late + 5_000).await;
    assert_eq!((reaped.removed, reaped.unpublished), (1, 0));
}

/// Held for one window at most: a store down that long does not keep cells for ever.
#[tokio::test]
async fn an_unpublished_cell_is_held_for_one_window_at_most() {
    let (store, clock) = store_and_clock();
    let a = region("a", &store, &clock);
    assert!(a.check(60).await.allowed);
    store.set_failing(true);
    clock.set(EXPIRY_MS + 3_600_000 - 1);
    assert_eq!(a.engine.reap_counted().await.held, 1);
    let reaped = reap_at(&a, &clock, EXPIRY_MS + 3_600_000).await;
    assert_eq!((reaped.removed, reaped.unpublished), (1, 1));
}

/// Below the floor nothing is due for the store: the cell leaves at its window's end.
#[tokio::test]
async fn a_cell_below_the_floor_is_not_held() {
    let (store, clock) = store_and_clock();
    let a = region("a", &store, &clock);
    assert!(a.check(10).await.allowed);
    let reaped = reap_at(&a, &clock, EXPIRY_MS).await;
    assert_eq!(
        (reaped.held, reaped.removed),
        (0, 2),
        "its cell and the one before"
    );
}

#[tokio::test]
async fn a_failed_sync_keeps_the_imported_counts() {
    let (store, a, b) = setup();
    a.admit_and_publish(80).await;
    b.counters.sync().await;
    store.set_failing(true);
    assert_eq!(b.counters.sync().await, None);
    assert!(!b.check(21).await.allowed, "80 imported stays");
}

/// Counters for the chunked flush tests: two and a half flush chunks of them, each hit
/// `cost(i)` times; every seventh stays below the floor (50).
const CHUNKED: usize = 2 * FLUSH_CHUNK_ROWS + FLUSH_CHUNK_ROWS / 2;

fn chunked_cost(i: usize) -> u64 {
    if i.is_multiple_of(7) {
        10
    } else {
        50 + (i % 40) as u64
    }
}

/// The region's rows in the store, by identifier.
fn stored_counts(store: &MemoryStore) -> std::collections::BTreeMap<String, u64> {
    store
        .rows()
        .into_iter()
        .map(|row| (row.key.identifier.to_string(), row.count))
        .collect()
}

/// Region `region`'s rows in the store, by identifier.
fn stored_counts_of(store: &MemoryStore, region: &str) -> std::collections::BTreeMap<String, u64> {
    store
        .rows()
        .into_iter()
        .filter(|row| row.region == region)
        .map(|row| (row.key.identifier.to_string(), row.count))
        .collect()
}

/// What the store should hold for the chunked counters: those at or above the floor.
fn expected_counts(extra: impl Fn(usize) -> u64) -> std::collections::BTreeMap<String, u64> {
    (0..CHUNKED)
        .map(|i| (i.to_string(), chunked_cost(i) + extra(i)))
        .filter(|(_, count)| *count >= 50)
        .collect()
}

/// The flush walks the table and publishes `FLUSH_CHUNK_ROWS` rows at a time: every row at or
/// above the floor is written once with its count, whichever chunk it falls in, and only the
/// rows changed since are written again.
#[tokio::test]
async fn a_flush_of_several_chunks_publishes_every_changed_row_once() {
    let (store, a, _) = setup();
    let names = names();
    let ids: Vec<String> = (0..CHUNKED).map(|i| i.to_string()).collect();
    for (i, id) in ids.iter().enumerate() {
        assert!(
            a.engine
                .check(names.hit_on(id, chunked_cost(i)))
                .await
                .allowed
        );
    }
    let expected = expected_counts(|_| 0);
    assert!(expected.len() > 2 * FLUSH_CHUNK_ROWS, "three chunks");
    let flushed = a.counters.flush().await;
    assert_eq!(
        flushed,
        Flushed {
            published: expected.len(),
            ..Flushed::default()
        }
    );
    assert_eq!(stored_counts(&store), expected);
    assert_eq!(a.counters.flush().await, Flushed::default(), "unchanged");

    // A few counters change, wherever the walk meets them; one below the floor reaches it.
    let changed = [
        0,
        1,
        FLUSH_CHUNK_ROWS,
        2 * FLUSH_CHUNK_ROWS + 1,
        CHUNKED - 2,
    ];
    for i in changed {
        let extra = if i == 0 { 40 } else { 1 };
        a.engine.check(names.hit_on(&ids[i], extra)).await;
    }
    assert_eq!(a.counters.flush().await.published, changed.len());
    let expected = expected_counts(|i| match i {
        0 => 40,
        _ if changed.contains(&i) => 1,
        _ => 0,
    });
    assert_eq!(stored_counts(&store), expected);
}

/// A chunk that fails leaves its rows pending while the other chunks of the same flush
/// publish; the next flush writes exactly those.
#[tokio::test]
async fn a_failed_chunk_of_a_chunked_flush_stays_pending_alone() {
    let (store, a, _) = setup();
    let names = names();
    for i in 0..CHUNKED {
        a.engine
            .check(names.hit_on(&i.to_string(), chunked_cost(i)))
            .await;
    }
    let expected = expected_counts(|_| 0);
    store.fail_next_chunks(1);
    let flushed = a.counters.flush().await;
    assert_eq!(flushed.failed, FLUSH_CHUNK_ROWS, "the first chunk");
    assert_eq!(flushed.published, expected.len() - FLUSH_CHUNK_ROWS);
    assert_eq!(store.rows().len(), expected.len() - FLUSH_CHUNK_ROWS);
    assert_eq!(
        a.counters.flush().await,
        Flushed {
            published: FLUSH_CHUNK_ROWS,
            ..Flushed::default()
        },
        "only the failed chunk's rows again"
    );
    assert_eq!(stored_counts(&store), expected);
}

/// A store call that fails as a whole (here: a region the store refuses) ends the flush: the
/// rows offered count as failed, and nothing is marked published.
#[tokio::test]
async fn a_flush_whose_store_call_fails_stops_and_marks_nothing() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(3_600_000 * 100 + 1_000));
    let invalid = region(&"r".repeat(REGION_MAX_BYTES as usize + 1), &store, &clock);
    let names = names();
    for i in 0..CHUNKED {
        invalid
            .engine
            .check(names.hit_on(&i.to_string(), chunked_cost(i)))
            .await;
    }
    let flushed = invalid.counters.flush().await;
    assert_eq!(
        flushed,
        Flushed {
            failed: FLUSH_CHUNK_ROWS,
            ..Flushed::default()
        },
        "the first call failed; the walk stopped"
    );
    assert_eq!(
        invalid.counters.flush().await.failed,
        FLUSH_CHUNK_ROWS,
        "still pending"
    );
    assert!(store.rows().is_empty());
}

#[test]
fn backoff_skips_a_growing_number_of_ticks() {
    let mut backoff = Backoff::default();
    let mut pattern = Vec::new();
    for _ in 0..12 {
        let run = backoff.should_run();
        pattern.push(run);
        if run {
            backoff.record(false);
        }
    }
    // run, skip 1, run, skip 2, run, skip 4, run, ...
    assert_eq!(
        pattern,
        [
            true, false, true, false, false, true, false, false, false, false, true, false
        ]
    );
    backoff.record(true);
    // the skip already scheduled still runs out, then every tick runs
    while !backoff.should_run() {}
    assert!(backoff.should_run());
}

/// Counts the flushes that wrote and the syncs that answered.
#[derive(Default)]
struct JobCount {
    flushes: std::sync::atomic::AtomicU64,
    syncs: std::sync::atomic::AtomicU64,
}

impl Recorder for JobCount {
    fn decision_source(&self, _: crate::recorder::DecisionSource) {}
    fn origin_call(&self, _: crate::recorder::OriginOp, _: bool, _: Duration) {}
    fn replay_batch(&self, _: usize) {}
    fn replay_overflow(&self) {}
    fn global_flush(&self, _: FlushRecord) {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn global_sync(&self, _: u64, _: u64, _: Duration) {
        self.syncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn global_sync_failed(&self) {}
    fn global_cleanup(&self, _: Duration) {}
}

/// Runs the loop for 60 s of paused time with a hot cell changing every 100 ms; returns
/// (flushes that wrote, syncs).
async fn jobs_in_a_minute(flush_interval: Duration, sync_interval: Duration) -> (u64, u64) {
    let store = Arc::new(MemoryStore::new());
    let jobs = Arc::new(JobCount::default());
    let engine = engine(Arc::new(ManualClock::new(START_MS)), Arc::new(NoRecorder));
    let settings = GlobalSettings {
        flush_interval,
        sync_interval,
        publish_floor: 0.0,
        ..GlobalSettings::default()
    };
    let (stop, run) = run_region_a(store, &engine, settings, &jobs);
    let names = names();
    let traffic = async {
        for _ in 0..600 {
            let _ = engine
                .check(Hit {
                    limit: u64::MAX,
                    ..names.hit(1)
                })
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    traffic.await;
    let _ = stop.send(());
    let _ = run.await;
    let ordering = std::sync::atomic::Ordering::Relaxed;
    (jobs.flushes.load(ordering), jobs.syncs.load(ordering))
}

#[tokio::test(start_paused = true)]
async fn flush_and_sync_each_keep_their_own_rate() {
    // Equal intervals: each runs about 60 times, not half as often.
    let (flushes, syncs) = jobs_in_a_minute(Duration::from_secs(1), Duration::from_secs(1)).await;
    assert!((57..=62).contains(&flushes), "flushes {flushes}");
    assert!((57..=61).contains(&syncs), "syncs {syncs}");
    // A slower flush beside a faster sync still runs (it used to starve).
    let (flushes, syncs) = jobs_in_a_minute(Duration::from_secs(3), Duration::from_secs(1)).await;
    assert!((18..=22).contains(&flushes), "flushes {flushes}");
    assert!((57..=61).contains(&syncs), "syncs {syncs}");
    let (flushes, syncs) = jobs_in_a_minute(Duration::from_secs(10), Duration::from_secs(5)).await;
    assert!((5..=7).contains(&flushes), "flushes {flushes}");
    assert!((11..=13).contains(&syncs), "syncs {syncs}");
}

/// Syncs of the loop per 20 s phase at 1 s intervals with the default overload policy
/// (up to 4× from 2 denials per admission, measured over the last 5–10 s): quiet, then a cell
/// another region counts offered 2× its limit (1 denial per admission: normal cadence), 4×
/// (3 per admission: 3× as often once the measure holds only this phase), only denied (4×),
/// and quiet again.
#[tokio::test(start_paused = true)]
async fn flush_and_sync_speed_up_with_the_overload_of_a_shared_counter() {
    let (store, clock) = store_and_clock();
    let jobs = Arc::new(JobCount::default());
    let engine = engine(clock.clone(), Arc::new(NoRecorder));
    let settings = GlobalSettings {
        flush_interval: Duration::from_secs(1),
        sync_interval: Duration::from_secs(1),
        // The overload cadence alone: the fast cadence of contended cells (the
        // `counters::onset` tests) would sync this cell on top of it.
        onset_fraction: 0.0,
        ..GlobalSettings::default()
    };
    let (stop, run) = run_region_a(store.clone(), &engine, settings, &jobs);
    let names = names();
    let syncs = || jobs.syncs.load(std::sync::atomic::Ordering::Relaxed);
    // 20 s in steps of 100 ms, the engine's clock moving with tokio's; at each step `admit`
    // hits that fit (no limit) and `deny` hits the cell has no room for.
    let phase = |admit: usize, deny: usize| {
        let (engine, clock, names) = (&engine, &clock, &names);
        async move {
            let before = syncs();
            for _ in 0..200 {
                for _ in 0..admit {
                    let hit = Hit {
                        limit: u64::MAX,
                        ..names.hit(1)
                    };
                    assert!(engine.check(hit).await.allowed);
                }
                for _ in 0..deny {
                    assert!(
                        !engine.check(names.hit(1)).await.allowed,
                        "the cell is full"
                    );
                }
                clock.advance(100);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            syncs() - before
        }
    };
    let quiet = phase(0, 0).await;
    assert!((19..=21).contains(&quiet), "quiet: {quiet} syncs");
    // Another region admitted the whole limit of the current cell, as the next sync would
    // merge it (so that every hit with the limit is denied).
    let cell = CellKey::in_scope(
        Arc::clone(&names.scope),
        "1:u",
        3_600_000,
        clock.now_ms() / 3_600_000,
    );
    engine
        .publication()
        .merge_synced(&cell, PnCount::hits(100), PnCount::default());
    assert!(!engine.contended_since(clock.now_ms() - 1_000));
    let twice = phase(1, 1).await;
    assert!(engine.contended_since(clock.now_ms() - 1_000));
    assert!((19..=22).contains(&twice), "2× the limit: {twice} syncs");
    let four_times = phase(1, 3).await;
    // 5–10 s of a measure mixing both phases (2 denials per admission: twice as often),
    // then three syncs a second: about 5 + 2 × 5 + 3 × 10.
    assert!((44..=55).contains(&four_times), "4×: {four_times} syncs");
    let denied = phase(0, 1).await;
    // Four a second (the first within the 250 ms probe).
    assert!((72..=80).contains(&denied), "only denied: {denied} syncs");
    let after = phase(0, 0).await;
    // Fast until the last denials leave the measure (5–10 s), then one a second.
    assert!((32..=45).contains(&after), "after: {after} syncs");
    let _ = stop.send(());
    let _ = run.await;
}

/// Region `a`'s global counters running their loops (as `serve` runs them) until the sender
/// is used; await the handle for their final flush.
fn run_region_a(
    store: Arc<dyn GlobalStore>,
    engine: &Arc<Engine>,
    settings: GlobalSettings,
    recorder: &Arc<impl Recorder + 'static>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let counters = Arc::new(GlobalCounters::new(
        store,
        Arc::clone(engine),
        "a".into(),
        settings,
        Arc::clone(recorder) as Arc<dyn Recorder>,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(counters.run(async {
        let _ = stopped.await;
    }));
    (stop, run)
}
