//! Regions converging through a `MemoryStore`, with a manual clock.

use super::*;
use crate::cell_key::CounterKeyRef;
use crate::engine::{EngineSettings, Hit, ManualClock};
use crate::global::MemoryStore;
use crate::recorder::NoRecorder;
use crate::regional::InProcessOrigin;

struct Region {
    engine: Arc<Engine>,
    counters: GlobalCounters,
}

fn region(name: &str, store: &Arc<MemoryStore>, clock: &Arc<ManualClock>) -> Region {
    let metrics: Arc<dyn Recorder> = Arc::new(NoRecorder);
    let engine = Arc::new(Engine::new(
        EngineSettings::default(),
        Arc::new(InProcessOrigin::new(1_000)),
        clock.clone(),
        metrics.clone(),
    ));
    let counters = GlobalCounters::new(
        store.clone(),
        engine.clone(),
        name.into(),
        GlobalSettings::default(),
        metrics,
    );
    Region { engine, counters }
}

struct Names {
    workspace: Arc<str>,
    namespace: Arc<str>,
}

impl Names {
    fn hit(&self, cost: u64) -> Hit<'_> {
        Hit {
            counter: CounterKeyRef::new(&self.workspace, &self.namespace, "1:u", 3_600_000),
            limit: 100,
            cost,
        }
    }
}

fn names() -> Names {
    Names {
        workspace: "d".into(),
        namespace: "4:user/".into(),
    }
}

fn setup() -> (Arc<MemoryStore>, Region, Region) {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(3_600_000 * 100 + 1_000));
    let a = region("a", &store, &clock);
    let b = region("b", &store, &clock);
    (store, a, b)
}

#[tokio::test]
async fn a_region_admits_only_what_another_left() {
    let (_, a, b) = setup();
    let names = names();
    assert!(a.engine.check(names.hit(60)).await.allowed);
    assert_eq!(a.counters.flush().await.published, 1);
    assert_eq!(b.counters.sync().await, Some(1));
    assert!(
        !b.engine.check(names.hit(41)).await.allowed,
        "41 does not fit"
    );
    assert!(b.engine.check(names.hit(40)).await.allowed, "40 does");
    // B's 40 is below the publish floor (half of 100): it stays in B
    assert_eq!(b.counters.flush().await, Flushed::default());
    // A's own row is never imported as foreign: A still sees exactly its 60
    a.counters.sync().await;
    assert_eq!(a.engine.check(names.hit(0)).await.remaining, 40);
}

#[tokio::test]
async fn below_the_floor_stays_local_and_unchanged_cells_are_not_rewritten() {
    let (store, a, _) = setup();
    let names = names();
    a.engine.check(names.hit(49)).await;
    assert_eq!(a.counters.flush().await, Flushed::default());
    a.engine.check(names.hit(1)).await;
    assert_eq!(a.counters.flush().await.published, 1);
    assert_eq!(a.counters.flush().await, Flushed::default(), "unchanged");
    assert_eq!(store.rows().len(), 1);
    assert_eq!(store.rows()[0].count, 50);
}

#[tokio::test]
async fn a_failed_flush_keeps_rows_pending_until_the_store_returns() {
    let (store, a, b) = setup();
    let names = names();
    a.engine.check(names.hit(70)).await;
    store.set_failing(true);
    assert_eq!(a.counters.flush().await.failed, 1);
    assert_eq!(b.counters.sync().await, None, "sync fails too");
    store.set_failing(false);
    assert_eq!(a.counters.flush().await.published, 1, "still pending");
    b.counters.sync().await;
    assert!(!b.engine.check(names.hit(31)).await.allowed);
}

#[tokio::test]
async fn a_failed_sync_keeps_the_imported_counts() {
    let (store, a, b) = setup();
    let names = names();
    a.engine.check(names.hit(80)).await;
    a.counters.flush().await;
    b.counters.sync().await;
    store.set_failing(true);
    assert_eq!(b.counters.sync().await, None);
    assert!(
        !b.engine.check(names.hit(21)).await.allowed,
        "80 imported stays"
    );
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
