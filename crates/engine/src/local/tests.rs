//! Engine behaviour over the in-process origin, with a manual clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::cell_key::{CellKey, CounterKey, CounterKeyRef};
use crate::pn::PnCount;
use crate::recorder::{DecisionSource, OriginOp};
use crate::recorder::{FlushRecord, NoRecorder};
use crate::regional::{CellRead, InProcessOrigin, OriginError, OriginFuture};

fn sibling(origin: &InProcessOrigin, process: &str) -> InProcessOrigin {
    match origin.sibling(process) {
        Some(sibling) => sibling,
        None => panic!("a test makes fewer than 65,536 processes"),
    }
}

fn metrics() -> Arc<dyn Recorder> {
    Arc::new(NoRecorder)
}

/// Counts the replay overflows the engine reports.
#[derive(Default)]
struct OverflowCount(AtomicU64);

impl Recorder for OverflowCount {
    fn decision_source(&self, _: DecisionSource) {}
    fn origin_call(&self, _: OriginOp, _: bool, _: Duration) {}
    fn replay_batch(&self, _: usize) {}
    fn replay_overflow(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn global_flush(&self, _: FlushRecord) {}
    fn global_sync(&self, _: u64, _: u64, _: Duration) {}
    fn global_sync_failed(&self) {}
    fn global_cleanup(&self, _: Duration) {}
}

/// An engine with the default settings over `origin`, deciding by `clock`.
fn engine_on(origin: Arc<dyn RegionalOrigin>, clock: &Arc<ManualClock>) -> Engine {
    Engine::new(EngineSettings::default(), origin, clock.clone(), metrics())
}

fn engine_at(now_ms: u64) -> (Arc<Engine>, Arc<ManualClock>, Arc<InProcessOrigin>) {
    let clock = Arc::new(ManualClock::new(now_ms));
    let origin = Arc::new(InProcessOrigin::new(1_000));
    let engine = engine_on(origin.clone(), &clock);
    (Arc::new(engine), clock, origin)
}

/// [`engine_at`] over an origin another process shares: it holds live cells, so each replay
/// publishes to it (alone, it keeps only the cells that left the table).
fn engine_sharing_origin_at(now_ms: u64) -> (Arc<Engine>, Arc<ManualClock>, Arc<InProcessOrigin>) {
    let clock = Arc::new(ManualClock::new(now_ms));
    let origin = Arc::new(shared_origin(1_000));
    let engine = engine_on(origin.clone(), &clock);
    (Arc::new(engine), clock, origin)
}

/// An in-process origin another process shares (see [`engine_sharing_origin_at`]). The
/// sibling is dropped; the store keeps counting it.
pub(crate) fn shared_origin(max_cells: usize) -> InProcessOrigin {
    let origin = InProcessOrigin::new(max_cells);
    assert!(origin.sibling("another process").is_some());
    origin
}

/// An engine at 10 s on the manual clock over `origin`, its settings the defaults as
/// `adjust` changes them, reporting to `recorder`.
fn engine_over<O: RegionalOrigin + 'static>(
    origin: &Arc<O>,
    adjust: impl FnOnce(&mut EngineSettings),
    recorder: Arc<dyn Recorder>,
) -> Engine {
    let mut settings = EngineSettings::default();
    adjust(&mut settings);
    let clock = Arc::new(ManualClock::new(10_000));
    Engine::new(settings, origin.clone(), clock, recorder)
}

/// A counter's names, shared by a test's hits (other modules' tests use it too).
pub(crate) struct Names {
    scope: Arc<crate::cell_key::Scope>,
}

impl Names {
    pub(crate) fn new() -> Self {
        Self {
            scope: crate::cell_key::Scope::new("domain", "3:key/"),
        }
    }

    /// The key of a one-second cell of this counter.
    fn cell_key(&self, identifier: &str, sequence: u64) -> CellKey {
        CellKey {
            scope: Arc::clone(&self.scope),
            identifier: identifier.into(),
            duration_ms: 1_000,
            sequence,
        }
    }

    fn hit<'a>(&'a self, identifier: &'a str, cost: u64, limit: u64) -> Hit<'a> {
        self.hit_for(identifier, 1_000, cost, limit)
    }

    pub(crate) fn hit_for<'a>(
        &'a self,
        identifier: &'a str,
        duration_ms: u64,
        cost: u64,
        limit: u64,
    ) -> Hit<'a> {
        Hit {
            counter: CounterKeyRef::new(&self.scope, identifier, duration_ms),
            limit,
            cost,
            exact: false,
        }
    }
}

#[tokio::test]
async fn admits_up_to_the_limit_then_denies() {
    let (engine, _, _) = engine_at(10_000);
    let names = Names::new();
    for expected_remaining in (0..5).rev() {
        let v = engine.check(names.hit("a", 1, 5)).await;
        assert!(v.allowed);
        assert_eq!(v.remaining, expected_remaining);
    }
    let denied = engine.check(names.hit("a", 1, 5)).await;
    assert!(!denied.allowed);
    // the cell ends in 1 s, where the 5 still weigh 5; 1 ms later they weigh 4
    assert_eq!(denied.until_reset_ms, 1_001);
    // another identifier has its own counter
    assert!(engine.check(names.hit("b", 1, 5)).await.allowed);
}

#[tokio::test]
async fn the_previous_cell_slides_out() {
    let (engine, clock, _) = engine_at(10_000);
    let names = Names::new();
    admit(&engine, &names, "a", 10, 10).await;
    // half-way into the next cell, half of the previous 10 still count
    clock.set(11_500);
    let v = engine.check(names.hit("a", 1, 10)).await;
    assert!(v.allowed);
    assert_eq!(v.remaining, 4);
    admit(&engine, &names, "a", 4, 10).await;
    assert!(!engine.check(names.hit("a", 1, 10)).await.allowed);
    // two cells later nothing of it is left
    clock.set(13_000);
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_hammering_admits_exactly_the_limit() {
    let (engine, _, _) = engine_at(10_000);
    let names = Arc::new(Names::new());
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let engine = Arc::clone(&engine);
        let names = Arc::clone(&names);
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..500 {
                if engine.check(names.hit("hot", 1, 1_000)).await.allowed {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("task panicked");
    }
    assert_eq!(admitted, 1_000, "16 × 500 requests on a limit of 1000");
}

#[tokio::test]
async fn accepted_work_is_replayed_and_a_cold_process_sees_it() {
    let (engine, clock, origin) = engine_sharing_origin_at(10_000);
    let names = Names::new();
    for _ in 0..3 {
        engine.check(names.hit("a", 2, 10)).await;
    }
    assert_eq!(engine.pending_replay_cells(), 1);
    engine.convergence().replay_now().await;
    assert_eq!(engine.pending_replay_cells(), 0);

    // a second engine of the same region starts cold and reads the total
    let other = engine_on(Arc::new(sibling(&origin, "other")), &clock);
    let v = other.check(names.hit("a", 1, 10)).await;
    assert_eq!(v.remaining, 3);
    other.convergence().replay_now().await;
    // the first engine catches up when its own replay merges the origin's total
    engine.check(names.hit("a", 1, 10)).await;
    engine.convergence().replay_now().await;
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 2);
}

#[tokio::test]
async fn admitted_hits_count_past_the_limit_on_both_windows_and_are_replayed() {
    let (engine, clock, origin) = engine_sharing_origin_at(10_500);
    let names = Names::new();
    // 7 hits an Envoy let through, 3 of them before this window began: over a limit of 5.
    engine.count_admitted(names.hit("a", 7, 5), 3).await;
    let state = engine.inspection().inspect(&names.hit("a", 0, 5).counter);
    assert_eq!(state.current.map(|cell| cell.total()), Some(4));
    assert_eq!(state.previous.map(|cell| cell.total()), Some(3));
    assert!(!engine.check(names.hit("a", 1, 5)).await.allowed);
    // a share of the previous window larger than the report is capped at the report
    engine.count_admitted(names.hit("b", 2, 5), 9).await;
    let state = engine.inspection().inspect(&names.hit("b", 0, 5).counter);
    assert_eq!(state.current.map(|cell| cell.total()), Some(0));
    assert_eq!(state.previous.map(|cell| cell.total()), Some(2));

    engine.convergence().replay_now().await;
    assert_eq!(engine.pending_replay_cells(), 0);
    let other = engine_on(Arc::new(sibling(&origin, "other")), &clock);
    // another process of the region sees the 4 of the current window and half the previous 3
    let verdict = other.check(names.hit("a", 0, 10)).await;
    assert_eq!(verdict.remaining, 10 - 4 - 1);
}

/// An origin that can be switched off and counts reads: the test double for Redis.
/// Siblings are other processes of the region: same cells, same switch, own components.
struct SwitchableOrigin {
    inner: InProcessOrigin,
    down: Arc<AtomicBool>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
}

impl SwitchableOrigin {
    fn new(down: bool) -> Self {
        Self {
            inner: InProcessOrigin::new(100),
            down: Arc::new(AtomicBool::new(down)),
            reads: Default::default(),
        }
    }

    fn sibling(&self, process: &str) -> Self {
        Self {
            inner: sibling(&self.inner, process),
            down: Arc::clone(&self.down),
            reads: Arc::clone(&self.reads),
        }
    }

    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

impl RegionalOrigin for SwitchableOrigin {
    fn name(&self) -> &'static str {
        "switchable"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.read(key)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.replay(batch)
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.penalize(penalties)
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.penalty_until(counter)
    }
}

#[tokio::test]
async fn a_dead_origin_degrades_to_local_counts_and_loses_nothing() {
    let origin = Arc::new(SwitchableOrigin::new(true));
    let engine = engine_over(&origin, |_| {}, metrics());
    let names = Names::new();
    admit(&engine, &names, "a", 4, 5).await;
    engine.convergence().replay_now().await;
    assert_eq!(
        engine.pending_replay_cells(),
        1,
        "failed work is queued again"
    );
    engine.check(names.hit("a", 1, 5)).await;
    assert!(!engine.check(names.hit("a", 1, 5)).await.allowed);

    origin.down.store(false, Ordering::SeqCst);
    engine.convergence().replay_now().await;
    assert_eq!(engine.pending_replay_cells(), 0);
    let key = names.cell_key("a", 10);
    assert_eq!(
        origin.inner.read(&key).await.ok().map(|r| r.total.value()),
        Some(5)
    );
}

/// One hit of cost 1 on each of `count` counters of one rule (limit 10, a 1 s window).
async fn hit_each(engine: &Engine, count: u32) {
    let scope = crate::cell_key::Scope::new("d", "1:k/");
    for i in 0..count {
        let identifier = i.to_string();
        engine
            .check(Hit {
                counter: CounterKeyRef::new(&scope, &identifier, 1_000),
                limit: 10,
                cost: 1,
                exact: false,
            })
            .await;
    }
}

#[tokio::test]
async fn the_cell_cap_holds() {
    let origin = Arc::new(InProcessOrigin::new(100));
    let engine = engine_over(&origin, |s| s.max_cells = 100, metrics());
    hit_each(&engine, 5_000).await;
    assert!(
        engine.live_cells() <= 100,
        "live cells: {}",
        engine.live_cells()
    );
}

#[tokio::test]
async fn memory_reports_each_pool_against_its_share_of_the_budget() {
    let origin = Arc::new(InProcessOrigin::new(100));
    let engine = engine_over(
        &origin,
        |s| {
            s.max_cells = 100;
            s.max_cell_bytes = 1 << 20;
        },
        metrics(),
    );
    let pools = engine.memory();
    let names: Vec<&str> = pools.iter().map(|p| p.pool).collect();
    assert_eq!(
        names,
        [
            "cells",
            "replay_queue",
            "strict_mode",
            "penalty_box",
            "rights",
            "foreign_components"
        ]
    );
    assert!(pools.iter().map(|p| p.budget).sum::<u64>() <= 1 << 20);
    assert!(pools.iter().all(|p| p.bytes == 0), "{pools:?}");
    hit_each(&engine, 10).await;
    let cells = engine.memory()[0];
    assert!(
        cells.bytes >= 10 * CELL_OVERHEAD_BYTES && cells.bytes <= cells.budget,
        "{cells:?}"
    );
}

/// Two engines of one region over a shared origin, with freshness on (as with Redis).
fn shared_region(freshness_ms: u64) -> (Engine, Engine, Arc<ManualClock>, Arc<SwitchableOrigin>) {
    let clock = Arc::new(ManualClock::new(100_000));
    let origin = Arc::new(SwitchableOrigin::new(false));
    let settings = EngineSettings {
        freshness: Some(Duration::from_millis(freshness_ms)),
        ..EngineSettings::default()
    };
    let a = Engine::new(settings.clone(), origin.clone(), clock.clone(), metrics());
    let b = Engine::new(
        settings,
        Arc::new(origin.sibling("b")),
        clock.clone(),
        metrics(),
    );
    (a, b, clock, origin)
}

fn minute_hit<'a>(names: &'a Names, cost: u64, limit: u64) -> Hit<'a> {
    names.hit_for("a", 60_000, cost, limit)
}

/// The penalty the penalty-box tests give their rule: five minutes.
const PENALTY_MS: u64 = 300_000;

/// Whether a cost-1 hit on client "a" under `limit` per minute, with the rule's penalty
/// ([`PENALTY_MS`]), is allowed.
async fn allowed_with_penalty(engine: &Engine, names: &Names, limit: u64) -> bool {
    engine
        .check_with_penalty(minute_hit(names, 1, limit), PENALTY_MS)
        .await
        .allowed
}

#[tokio::test]
async fn a_stale_cell_reads_the_origin_before_deciding() {
    let (a, b, clock, origin) = shared_region(1_000);
    let names = Names::new();
    for _ in 0..5 {
        a.check(minute_hit(&names, 1, 10)).await;
    }
    a.convergence().replay_now().await;
    assert_eq!(
        b.check(minute_hit(&names, 0, 10)).await.remaining,
        5,
        "cold read"
    );
    for _ in 0..3 {
        a.check(minute_hit(&names, 1, 10)).await;
    }
    a.convergence().replay_now().await;
    let reads = origin.reads();
    clock.advance(500);
    assert_eq!(
        b.check(minute_hit(&names, 0, 10)).await.remaining,
        5,
        "still fresh"
    );
    assert_eq!(
        origin.reads(),
        reads,
        "a fresh warm cell does not touch the origin"
    );
    clock.advance(600);
    assert_eq!(
        b.check(minute_hit(&names, 0, 10)).await.remaining,
        2,
        "stale: read first"
    );
    assert_eq!(origin.reads(), reads + 1);
}

#[tokio::test]
async fn a_failed_read_never_makes_a_cell_fresh() {
    let (a, b, clock, origin) = shared_region(1_000);
    let names = Names::new();
    origin.down.store(true, Ordering::SeqCst);
    assert!(
        b.check(minute_hit(&names, 1, 10)).await.allowed,
        "decides locally"
    );
    origin.down.store(false, Ordering::SeqCst);
    for _ in 0..6 {
        a.check(minute_hit(&names, 1, 10)).await;
    }
    a.convergence().replay_now().await;
    clock.advance(10);
    // b's cell was never fresh: this decision reads the origin and sees a's 6
    assert_eq!(b.check(minute_hit(&names, 0, 10)).await.remaining, 4);
}

#[tokio::test]
async fn after_a_denial_strict_mode_reads_the_origin_on_each_decision() {
    let (a, b, clock, origin) = shared_region(60_000);
    let names = Names::new();
    for _ in 0..5 {
        assert!(a.check(minute_hit(&names, 1, 5)).await.allowed);
    }
    a.convergence().replay_now().await;
    assert!(
        !b.check(minute_hit(&names, 1, 5)).await.allowed,
        "b saw a's 5 cold"
    );
    let reads = origin.reads();
    clock.advance(1_000);
    b.check(minute_hit(&names, 1, 5)).await;
    b.check(minute_hit(&names, 1, 5)).await;
    assert_eq!(
        origin.reads(),
        reads + 2,
        "fresh, but strict: every decision reads"
    );
    // still strict after the window rolls over (deadline = denial + duration)
    clock.set(120_000 + 500);
    b.check(minute_hit(&names, 0, 5)).await;
    assert!(origin.reads() > reads + 2);
}

#[tokio::test]
async fn replay_overflow_keeps_the_work_in_the_cell() {
    let origin = Arc::new(shared_origin(100));
    let overflows = Arc::new(OverflowCount::default());
    let engine = engine_over(&origin, |s| s.max_pending_replay = 1, overflows.clone());
    let cells = Replaying::new(engine, origin);
    cells.hit("a", 1).await;
    cells.hit("b", 2).await;
    assert_eq!(cells.engine.pending_replay_cells(), 1);
    assert_eq!(overflows.0.load(Ordering::Relaxed), 1);
    cells.engine.convergence().replay_now().await;
    // b's next accept queues it again, with the earlier work
    cells.hit("b", 1).await;
    assert_eq!(cells.replayed_total("b").await, Some(3));
}

#[tokio::test]
async fn a_replay_sent_twice_counts_once() {
    let origin = Arc::new(shared_origin(1_000));
    let cells = Replaying::new(engine_over(&origin, |_| {}, metrics()), origin);
    for _ in 0..4 {
        cells.hit("a", 1).await;
    }
    cells.engine.convergence().replay_now().await;
    // the same cumulative value again, as after a timeout whose command did land
    let key = cells.names.cell_key("a", 10);
    assert_eq!(
        cells.origin.replay(&[(key, PnCount::hits(4))]).await.ok(),
        Some(vec![PnCount::hits(4)])
    );
    cells.hit("a", 1).await;
    assert_eq!(cells.replayed_total("a").await, Some(5));
}

#[tokio::test]
async fn an_evicted_cell_resumes_its_component_from_the_origin() {
    let origin = Arc::new(InProcessOrigin::new(1_000));
    let cells = Replaying::new(
        engine_over(&origin, |s| s.max_cells = 8, metrics()),
        Arc::clone(&origin),
    );
    cells.fill_first().await;
    // One hit of 3: the cell is never looked up again, so it is among the first to leave.
    cells.hit("a", 3).await;
    assert_eq!(
        cells.replayed_total("a").await,
        Some(0),
        "alone, the origin holds no copy of a live cell"
    );
    // push "a" out of the table (eight evictable cells)
    for id in 0..64 {
        cells.hit(&id.to_string(), 1).await;
    }
    let a = cells.names.hit("a", 0, 10);
    assert!(!cells.holds("a"));
    assert_eq!(
        cells.replayed_total("a").await,
        Some(3),
        "kept as it left the table"
    );
    // read back cold: the decision counts the 3 and this hit
    cells.hit("a", 1).await;
    assert_eq!(cells.engine.check(a).await.remaining, 6);
}

/// The global sync may bring an evicted cell back (other regions counted in it): the cell it
/// creates starts from what the origin kept, so accepts after it add to that count instead of
/// being absorbed by the max-merge of the process's cumulative counts.
#[tokio::test]
async fn a_cell_the_sync_brings_back_resumes_the_kept_count() {
    let origin = Arc::new(InProcessOrigin::new(1_000));
    let cells = Replaying::new(
        engine_over(&origin, |s| s.max_cells = 8, metrics()),
        Arc::clone(&origin),
    );
    // Keys hit twice: quick_cache's S3-FIFO takes them into its main ring, where a cell
    // looked up again since it came in waits for its second chance.
    let push_out = |round: usize| {
        let cells = &cells;
        async move {
            for id in 0..64 {
                let identifier = format!("{round} {id}");
                cells.hit(&identifier, 1).await;
                cells.hit(&identifier, 1).await;
            }
        }
    };
    cells.fill_first().await;
    cells.hit("a", 3).await;
    push_out(1).await;
    assert_eq!(cells.replayed_total("a").await, Some(3), "kept as it left");
    // another region counted in it: the sync creates the cell again
    assert!(cells.engine.publication().merge_synced(
        &cells.names.cell_key("a", 10),
        PnCount::hits(1),
        PnCount::default()
    ));
    cells.hit("a", 2).await;
    let a = cells.names.hit("a", 0, 10);
    assert_eq!(
        cells.engine.check(a).await.remaining,
        4,
        "3 kept, 1 foreign, 2 since"
    );
    push_out(2).await;
    assert!(!cells.holds("a"));
    assert_eq!(
        cells.replayed_total("a").await,
        Some(5),
        "this process's 3 and 2 kept as it left again"
    );
}

#[tokio::test]
async fn publishable_cells_and_synced_counts() {
    let (engine, _, _) = engine_at(10_000);
    let names = Names::new();
    for (identifier, hits) in [("low", 3), ("high", 6)] {
        for _ in 0..hits {
            engine.check(names.hit(identifier, 1, 10)).await;
        }
    }
    let rows = engine.publication().publishable(0.5).await;
    let keys: Vec<(&str, PnCount)> = rows.iter().map(|r| (&*r.key.identifier, r.count)).collect();
    assert_eq!(
        keys,
        [("high", PnCount::hits(6))],
        "below the floor stays local"
    );
    rows[0].mark_published();
    assert!(
        engine.publication().publishable(0.5).await.is_empty(),
        "unchanged since published"
    );

    // foreign counts reach the decision; a new cell is created for them
    assert!(engine.publication().merge_synced(
        &names.cell_key("elsewhere", 10),
        PnCount::hits(8),
        PnCount::default()
    ));
    assert_eq!(
        engine.check(names.hit("elsewhere", 0, 10)).await.remaining,
        2
    );
    assert!(!engine.publication().merge_synced(
        &names.cell_key("high", 10),
        PnCount::hits(1),
        PnCount::hits(2)
    ));
    assert_eq!(engine.check(names.hit("high", 0, 10)).await.remaining, 3);
}

/// The merge of a whole sync (many walk slices, a read large enough to be freed on the
/// blocking pool) creates and merges exactly what merging its rows one at a time does.
#[tokio::test]
async fn merging_a_whole_sync_is_merging_each_row() {
    const COUNTERS: u64 = 7_000;
    let names = Names::new();
    let (all, _, _) = engine_at(10_500);
    let (each, _, _) = engine_at(10_500);
    // every third counter was used here: its two cells exist and hold an own count
    for engine in [&all, &each] {
        for i in (0..COUNTERS).step_by(3) {
            assert!(
                engine
                    .check(names.hit(&i.to_string(), 1, 100))
                    .await
                    .allowed
            );
        }
    }
    let rows: Vec<(CellKey, PnCount, PnCount)> = (0..COUNTERS)
        .flat_map(|i| {
            [9, 10].map(|sequence| {
                let own = PnCount {
                    hits: i % 5,
                    refunds: i % 2,
                };
                (
                    names.cell_key(&i.to_string(), sequence),
                    PnCount::hits(i % 7),
                    own,
                )
            })
        })
        .collect();
    assert!(crate::aside::buffer_bytes(&rows) >= crate::aside::ASIDE_BYTES);
    let one_at_a_time = rows
        .iter()
        .filter(|(key, foreign, own)| each.publication().merge_synced(key, *foreign, *own))
        .count() as u64;
    let created = all
        .publication()
        .merge_synced_all(rows, |(key, foreign, own)| (key, *foreign, *own))
        .await;
    assert_eq!(created, one_at_a_time);
    assert_eq!(created, 2 * (COUNTERS - COUNTERS.div_ceil(3)));
    for i in 0..COUNTERS {
        let id = i.to_string();
        let counter = names.hit(&id, 0, 100).counter;
        let (merged, expected) = (
            all.inspection().inspect(&counter),
            each.inspection().inspect(&counter),
        );
        assert_eq!(merged.current, expected.current, "counter {i}");
        assert_eq!(merged.previous, expected.previous, "counter {i}");
        let global = merged.current.map(|view| view.global);
        assert_eq!(global, Some(i % 7), "counter {i}: the foreign sum merged");
    }
}

/// The walk the global flush takes a chunk at a time meets every publishable cell once,
/// across its chunks, and stops with an empty chunk.
#[tokio::test]
async fn the_publishable_walk_meets_every_row_once_a_chunk_at_a_time() {
    let (engine, _, _) = engine_at(10_000);
    let names = Names::new();
    let ids: Vec<String> = (0..700).map(|i| i.to_string()).collect();
    for (i, id) in ids.iter().enumerate() {
        // every third below the floor (5 of 10)
        let cost = if i % 3 == 0 { 4 } else { 5 };
        engine.check(names.hit(id, cost, 10)).await;
    }
    let mut walk = engine.publication().publishable_walk(0.5);
    let mut chunks = Vec::new();
    loop {
        let chunk = walk.next_chunk(100).await;
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk.len());
        assert!(chunk.iter().all(|row| row.count == PnCount::hits(5)));
        // marked as the flush does: the rest of the walk is unaffected
        chunk.iter().for_each(Publishable::mark_published);
    }
    let above_floor = ids.len() - ids.len().div_ceil(3);
    assert_eq!(chunks.iter().sum::<usize>(), above_floor);
    assert!(chunks.iter().all(|len| *len <= 100));
    assert!(chunks.len() > 1, "several chunks: {chunks:?}");
    assert!(
        engine.publication().publishable(0.5).await.is_empty(),
        "every row was met and marked"
    );
}

/// With the fast cadence's walk, a cell another region counts is published below the floor;
/// a cell of this region alone still waits for it.
#[tokio::test]
async fn a_shared_cell_is_published_from_its_first_hit() {
    let (engine, _, _) = engine_at(10_000);
    let names = Names::new();
    engine.publication().merge_synced(
        &names.cell_key("shared", 10),
        PnCount::hits(2),
        PnCount::default(),
    );
    for identifier in ["shared", "alone"] {
        engine.check(names.hit(identifier, 1, 10)).await;
    }
    let walked = |shared_from_first_hit: bool| {
        let walk = engine.publication().publishable_walk(0.5);
        let mut walk = if shared_from_first_hit {
            walk.shared_from_first_hit()
        } else {
            walk
        };
        async move {
            let rows = walk.next_chunk(10).await;
            rows.iter()
                .map(|row| (row.key.identifier.to_string(), row.count))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(walked(false).await, [], "both below the floor");
    assert_eq!(
        walked(true).await,
        [("shared".to_owned(), PnCount::hits(1))],
        "the shared one from its first hit"
    );
}

/// Cells the full queue refused reach the origin even if never accepted again (a one-shot key's
/// cell never is: waiting for its next accept would lose its count).
#[tokio::test]
async fn overflowed_one_shot_cells_are_recovered_when_the_queue_drains() {
    let origin = Arc::new(SwitchableOrigin::new(true));
    let engine = engine_over(&origin, |s| s.max_pending_replay = 4, metrics());
    let names = Names::new();
    let ids: Vec<String> = (0..40).map(|i| format!("one-shot-{i}")).collect();
    for id in &ids {
        engine.check(names.hit(id, 1, 10)).await;
    }
    engine.convergence().replay_now().await;
    assert_eq!(
        engine.pending_replay_cells(),
        4,
        "the outage: 36 overflowed"
    );
    origin.down.store(false, Ordering::SeqCst);
    // the background loop's replay tick: replay, then recover; bounded by the cell count
    for _ in 0..ids.len() {
        engine.convergence().replay_now().await;
        engine.convergence().recover_overflowed().await;
        if engine.pending_replay_cells() == 0 {
            break;
        }
    }
    for id in &ids {
        let total = origin.inner.read(&names.cell_key(id, 10)).await.ok();
        assert_eq!(
            total.map(|r| r.total.value()),
            Some(1),
            "{id} reached the origin"
        );
    }
}

/// Reaping a large table hands the runtime back between slices, so decisions on a
/// one-thread runtime (`--workers 1`) go on while it runs. `retain` held the only thread
/// for the whole table: no decision ran until it returned.
#[tokio::test(flavor = "current_thread")]
async fn reaping_a_large_table_lets_decisions_run_meanwhile() {
    let (engine, clock, _) = engine_at(10_000);
    let names = Names::new();
    let ids: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    for id in &ids {
        engine.check(names.hit(id, 1, 10)).await;
    }
    // two windows later every one of those cells is past its sliding window
    clock.set(12_500);
    let hot = names.hit("hot", 1, 1_000_000);
    engine.check(hot).await;
    let reaping = Arc::new(AtomicBool::new(true));
    let reaper = {
        let (engine, reaping) = (Arc::clone(&engine), Arc::clone(&reaping));
        tokio::spawn(async move {
            let reaped = engine.reap().await;
            reaping.store(false, Ordering::SeqCst);
            reaped
        })
    };
    let mut decided_while_reaping = 0;
    tokio::task::yield_now().await;
    while reaping.load(Ordering::SeqCst) {
        assert!(engine.check(hot).await.allowed);
        decided_while_reaping += 1;
        tokio::task::yield_now().await;
    }
    let reaped = reaper.await.expect("reaper task");
    assert!(reaped >= 20_000, "reaped {reaped}");
    assert!(
        decided_while_reaping >= 20_000 / table::WALK_SLICE / 2,
        "only {decided_while_reaping} decisions ran while reaping"
    );
}

/// The final replay (shutdown) also sends the cells the queue had refused.
#[tokio::test]
async fn the_final_replay_includes_overflowed_cells() {
    let origin = Arc::new(InProcessOrigin::new(1_000));
    let engine = Arc::new(engine_over(
        &origin,
        |s| s.max_pending_replay = 3,
        metrics(),
    ));
    let names = Names::new();
    let ids: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for id in &ids {
        engine.check(names.hit(id, 1, 10)).await;
    }
    Arc::clone(&engine)
        .run_background(std::future::ready(()))
        .await;
    for id in &ids {
        let read = origin.read(&names.cell_key(id, 10)).await.ok();
        assert_eq!(read.map(|r| r.total.value()), Some(1), "{id} was replayed");
    }
}

#[tokio::test]
async fn a_denial_answers_when_the_same_request_would_pass() {
    // 1 s cells; 10 of 10 used 200 ms into the cell: the end of the cell (800 ms) is too
    // early, the previous cell still weighs 10 then; 1 ms later it weighs 9.
    let (engine, clock, _) = engine_at(10_200);
    let names = Names::new();
    admit(&engine, &names, "a", 10, 10).await;
    let denied = engine.check(names.hit("a", 1, 10)).await;
    assert!(!denied.allowed);
    assert_eq!(denied.until_reset_ms, 801);
    clock.advance(800);
    assert!(
        !engine.check(names.hit("a", 1, 10)).await.allowed,
        "the cell's end is too early"
    );
    clock.advance(1);
    assert!(
        engine.check(names.hit("a", 1, 10)).await.allowed,
        "the computed moment passes"
    );
    // an accepted request keeps upstream's reset: the end of the current cell
    assert_eq!(
        engine.check(names.hit("b", 1, 10)).await.until_reset_ms,
        999
    );
}

#[tokio::test]
async fn the_penalty_box_holds_a_client_past_its_window_and_lets_it_out() {
    let (engine, clock, _) = engine_at(10_000);
    let names = Names::new();
    let penalty = 5_000;
    for _ in 0..3 {
        assert!(
            engine
                .check_with_penalty(names.hit("a", 1, 3), penalty)
                .await
                .allowed
        );
    }
    let denied = engine
        .check_with_penalty(names.hit("a", 1, 3), penalty)
        .await;
    assert!(!denied.allowed);
    assert_eq!(
        denied.until_reset_ms, 5_000,
        "the penalty outlasts the window's wait"
    );
    // two windows later the window alone would admit it; the box does not
    clock.advance(2_500);
    assert!(
        engine.check(names.hit("a", 1, 3)).await.allowed,
        "no penalty rule: the window"
    );
    let held = engine
        .check_with_penalty(names.hit("a", 1, 3), penalty)
        .await;
    assert!(!held.allowed);
    assert_eq!(held.until_reset_ms, 2_500, "time left in the box");
    assert!(
        engine
            .penalties()
            .held_until(&names.hit("a", 1, 3).counter)
            .is_some()
    );
    clock.advance(2_500);
    for (identifier, why) in [("a", "out of the box"), ("b", "others never in it")] {
        let hit = names.hit(identifier, 1, 3);
        assert!(
            engine.check_with_penalty(hit, penalty).await.allowed,
            "{why}"
        );
    }
}

#[tokio::test]
async fn the_penalty_box_holds_across_the_processes_of_a_region() {
    let (a, b, clock, origin) = shared_region(1_000);
    let names = Names::new();
    for _ in 0..2 {
        assert!(allowed_with_penalty(&a, &names, 2).await);
    }
    assert!(!allowed_with_penalty(&a, &names, 2).await);
    a.convergence().replay_now().await;
    // the next minute: b has never seen this client; its cold cell reads the region's box
    clock.advance(90_000);
    let held = b
        .check_with_penalty(minute_hit(&names, 1, 2), PENALTY_MS)
        .await;
    assert!(!held.allowed, "b holds the client a penalized");
    assert_eq!(held.until_reset_ms, 210_000);
    // the origin down: b still holds it (it took the penalty into its own box)
    origin.down.store(true, Ordering::SeqCst);
    clock.advance(10_000);
    assert!(!allowed_with_penalty(&b, &names, 2).await);
    clock.advance(200_000);
    assert!(allowed_with_penalty(&b, &names, 2).await);
}

#[tokio::test]
async fn a_failed_penalty_send_degrades_to_the_local_box_and_is_retried() {
    let (a, b, clock, origin) = shared_region(1_000);
    let names = Names::new();
    origin.down.store(true, Ordering::SeqCst);
    assert!(allowed_with_penalty(&a, &names, 1).await);
    assert!(!allowed_with_penalty(&a, &names, 1).await);
    a.convergence().replay_now().await;
    clock.advance(60_000);
    assert!(!allowed_with_penalty(&a, &names, 1).await, "local box");
    origin.down.store(false, Ordering::SeqCst);
    a.convergence().replay_now().await;
    clock.advance(60_000);
    assert!(
        !allowed_with_penalty(&b, &names, 1).await,
        "sent on the next cycle"
    );
}

/// An origin whose `penalize` never answers while `hang` is set (a Redis that stopped
/// answering mid-call): the send's future is dropped by its caller's deadline.
struct HangingPenalties {
    inner: SwitchableOrigin,
    hang: AtomicBool,
}

impl RegionalOrigin for HangingPenalties {
    fn name(&self) -> &'static str {
        "hanging-penalties"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.inner.read(key)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        self.inner.replay(batch)
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        if self.hang.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        self.inner.penalize(penalties)
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        self.inner.penalty_until(counter)
    }
}

/// A replay cycle dropped while the penalties are on their way keeps them for the next
/// cycle, as it keeps its cells: the region's other processes still learn of the penalty.
#[tokio::test]
async fn a_dropped_penalty_send_is_sent_by_the_next_cycle() {
    let clock = Arc::new(ManualClock::new(100_000));
    let shared = SwitchableOrigin::new(false);
    let other = shared.sibling("b");
    let origin = Arc::new(HangingPenalties {
        inner: shared,
        hang: AtomicBool::new(true),
    });
    let a = engine_on(origin.clone(), &clock);
    let names = Names::new();
    assert!(allowed_with_penalty(&a, &names, 1).await);
    assert!(!allowed_with_penalty(&a, &names, 1).await);
    let counter = minute_hit(&names, 1, 1).counter.to_owned_key();
    let dropped =
        tokio::time::timeout(Duration::from_millis(50), a.convergence().replay_now()).await;
    assert!(dropped.is_err(), "the send hangs");
    assert_eq!(other.penalty_until(&counter).await.ok(), Some(0));
    origin.hang.store(false, Ordering::SeqCst);
    a.convergence().replay_now().await;
    let until = other.penalty_until(&counter).await.expect("read");
    assert_eq!(until, 100_000 + PENALTY_MS, "sent by the next cycle");
}

/// An origin whose store a test can replace (as a Sentinel failover replaces the master): the
/// new store is empty, and the epoch says so.
struct Replaceable {
    stores: [InProcessOrigin; 2],
    current: AtomicU64,
}

impl RegionalOrigin for Replaceable {
    fn name(&self) -> &'static str {
        "replaceable"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.store().read(key)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        self.store().replay(batch)
    }

    fn epoch(&self) -> u64 {
        self.current.load(Ordering::SeqCst)
    }
}

impl Replaceable {
    fn store(&self) -> &InProcessOrigin {
        &self.stores[self.current.load(Ordering::SeqCst) as usize]
    }
}

/// A replaced store lacks what was published to the old one; after the epoch changes, every
/// cell holding work is republished, also one that gets no further hit.
#[tokio::test]
async fn a_replaced_origin_gets_every_cell_republished() {
    let clock = Arc::new(ManualClock::new(10_000));
    let origin = Arc::new(Replaceable {
        stores: [InProcessOrigin::new(100), InProcessOrigin::new(100)],
        current: AtomicU64::new(0),
    });
    let engine = engine_on(origin.clone(), &clock);
    let names = Names::new();
    admit(&engine, &names, "quiet", 3, 100).await;
    assert!(engine.check(names.hit("busy", 1, 100)).await.allowed);
    assert_eq!(
        engine.convergence().republish_after_origin_change().await,
        0,
        "same store"
    );
    engine.convergence().replay_now().await;
    let quiet = names.cell_key("quiet", 10);
    let on_old = origin.stores[0].read(&quiet).await.expect("read");
    assert_eq!(on_old.own, PnCount::new(3, 0));

    origin.current.store(1, Ordering::SeqCst);
    assert_eq!(
        engine.convergence().republish_after_origin_change().await,
        2
    );
    assert_eq!(
        engine.convergence().republish_after_origin_change().await,
        0,
        "once per change"
    );
    engine.convergence().replay_now().await;
    let on_new = origin.stores[1].read(&quiet).await.expect("read");
    assert_eq!(
        on_new.own,
        PnCount::new(3, 0),
        "the quiet cell reached the new store without a new hit"
    );
    let busy = origin.stores[1]
        .read(&names.cell_key("busy", 10))
        .await
        .expect("read");
    assert_eq!(busy.own, PnCount::new(1, 0));
}

#[tokio::test]
async fn a_refund_gives_budget_back_and_its_replay_is_idempotent() {
    let (engine, _, origin) = engine_sharing_origin_at(10_000);
    let names = Names::new();
    assert_eq!(engine.check(names.hit("a", 60, 100)).await.remaining, 40);
    assert_eq!(engine.refund(names.hit("a", 45, 100)).await.remaining, 85);
    engine.convergence().replay_now().await;
    let key = names.cell_key("a", 10);
    let read = origin.read(&key).await.ok();
    assert_eq!(read.map(|r| r.own), Some(PnCount::new(60, 45)));
    // The same cumulative pair again (a resend), or an older one: nothing moves.
    for resend in [
        PnCount::new(60, 45),
        PnCount::new(60, 10),
        PnCount::new(20, 0),
    ] {
        assert_eq!(
            origin.replay(&[(key.clone(), resend)]).await.ok(),
            Some(vec![PnCount::new(60, 45)])
        );
    }
    assert!(engine.check(names.hit("a", 85, 100)).await.allowed);
    assert!(!engine.check(names.hit("a", 1, 100)).await.allowed);
}

#[tokio::test]
async fn a_refund_never_creates_budget() {
    let (engine, _, _) = engine_at(10_000);
    let names = Names::new();
    // nothing consumed: nothing to give back
    assert_eq!(engine.refund(names.hit("a", 50, 10)).await.remaining, 10);
    assert!(engine.check(names.hit("a", 10, 10)).await.allowed);
    assert!(!engine.check(names.hit("a", 1, 10)).await.allowed);
    // more than consumed: only what was consumed
    assert_eq!(engine.refund(names.hit("a", 50, 10)).await.remaining, 10);
    assert!(engine.check(names.hit("a", 10, 10)).await.allowed);
    assert!(!engine.check(names.hit("a", 1, 10)).await.allowed);

    // A reservation of the previous window: refunded there once the current one has none.
    let (engine, clock, _) = engine_at(20_000);
    assert!(engine.check(names.hit("b", 8, 10)).await.allowed);
    clock.set(21_000);
    // previous 8, no time elapsed in the new window: fully weighted
    assert_eq!(engine.check(names.hit("b", 0, 10)).await.remaining, 2);
    assert_eq!(engine.refund(names.hit("b", 5, 10)).await.remaining, 7);
}

#[tokio::test]
async fn a_refund_rides_the_replay_queue_like_an_accept() {
    let (engine, _, origin) = engine_sharing_origin_at(10_000);
    let names = Names::new();
    engine.check(names.hit("a", 5, 10)).await;
    engine.convergence().replay_now().await;
    assert_eq!(engine.pending_replay_cells(), 0);
    engine.refund(names.hit("a", 2, 10)).await;
    assert_eq!(
        engine.pending_replay_cells(),
        1,
        "the refund is queued for replay"
    );
    engine.convergence().replay_now().await;
    let read = origin.read(&names.cell_key("a", 10)).await.ok();
    assert_eq!(
        read.map(|r| (r.total, r.total.value())),
        Some((PnCount::new(5, 2), 3))
    );
}

/// One lookup per decision: the previous window's total is remembered in the current cell,
/// and whatever changes the previous cell after that reaches the next decision (a foreign
/// count from the global sync, a refund of a reservation made in it, an accept delayed
/// across the boundary).
#[tokio::test]
async fn changes_of_the_previous_cell_reach_the_decisions_that_remembered_it() {
    let (engine, clock, _) = engine_at(20_000);
    let names = Names::new();
    assert!(engine.check(names.hit("a", 6, 10)).await.allowed);
    clock.set(21_000);
    // previous 6, fully weighted at the start of the window: remembered from now on
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 4);
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 4);

    engine.publication().merge_synced(
        &names.cell_key("a", 20),
        PnCount::hits(3),
        PnCount::default(),
    );
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 1);

    assert_eq!(engine.refund(names.hit("a", 2, 10)).await.remaining, 3);
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 3);

    // a decision that read the clock just before the boundary consumes in the old cell
    clock.set(20_999);
    assert!(engine.check(names.hit("a", 1, 100)).await.allowed);
    clock.set(21_000);
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 2);
}

/// What `origin` holds for `key` (hits − refunds), `None` if it cannot be read.
/// `times` hits of 1 on `identifier` (limit `limit`), each of them admitted.
async fn admit(engine: &Engine, names: &Names, identifier: &str, times: usize, limit: u64) {
    for hit in 1..=times {
        let allowed = engine.check(names.hit(identifier, 1, limit)).await.allowed;
        assert!(allowed, "{identifier}: hit {hit} of {times} admitted");
    }
}

/// An engine at 10 s over an in-process origin, hitting the tests' counter (limit 10) at
/// second 10: what the replay tests drive and read back from the origin.
struct Replaying {
    engine: Engine,
    origin: Arc<InProcessOrigin>,
    names: Names,
}

impl Replaying {
    fn new(engine: Engine, origin: Arc<InProcessOrigin>) -> Self {
        Self {
            engine,
            origin,
            names: Names::new(),
        }
    }

    /// A hit of `cost` on `identifier`, whatever it decides.
    async fn hit(&self, identifier: &str, cost: u64) {
        self.engine
            .check(self.names.hit(identifier, cost, 10))
            .await;
    }

    /// The first cells of an empty table are taken as hot: a test of eviction fills it
    /// first.
    async fn fill_first(&self) {
        for id in 0..16 {
            self.hit(&format!("early {id}"), 1).await;
        }
    }

    /// Whether the table holds `identifier`'s current cell.
    fn holds(&self, identifier: &str) -> bool {
        let hit = self.names.hit(identifier, 0, 10);
        self.engine
            .inspection()
            .inspect(&hit.counter)
            .current
            .is_some()
    }

    /// The origin's total of `identifier`'s cell once the engine replayed what it holds.
    async fn replayed_total(&self, identifier: &str) -> Option<u64> {
        self.engine.convergence().replay_now().await;
        origin_total(&*self.origin, &self.names.cell_key(identifier, 10)).await
    }
}

async fn origin_total(origin: &dyn RegionalOrigin, key: &CellKey) -> Option<u64> {
    origin.read(key).await.ok().map(|r| r.total.value())
}
