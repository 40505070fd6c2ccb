//! Engine behaviour over the in-process origin, with a manual clock.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::cell_key::CellKey;
use crate::regional::{InProcessOrigin, OriginError, OriginFuture};

fn engine_at(now_ms: u64) -> (Arc<Engine>, Arc<ManualClock>, Arc<InProcessOrigin>) {
    let clock = Arc::new(ManualClock::new(now_ms));
    let origin = Arc::new(InProcessOrigin::new(1_000));
    let engine = Engine::new(EngineSettings::default(), origin.clone(), clock.clone());
    (Arc::new(engine), clock, origin)
}

struct Names {
    workspace: Arc<str>,
    namespace: Arc<str>,
}

impl Names {
    fn new() -> Self {
        Self {
            workspace: "domain".into(),
            namespace: "3:key/".into(),
        }
    }

    fn hit(&self, identifier: &'static str, cost: u64, limit: u64) -> Hit<'_> {
        Hit {
            workspace: &self.workspace,
            namespace: &self.namespace,
            identifier,
            duration_ms: 1_000,
            limit,
            cost,
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
    assert_eq!(denied.until_reset_ms, 1_000);
    // another identifier has its own counter
    assert!(engine.check(names.hit("b", 1, 5)).await.allowed);
}

#[tokio::test]
async fn the_previous_cell_slides_out() {
    let (engine, clock, _) = engine_at(10_000);
    let names = Names::new();
    for _ in 0..10 {
        assert!(engine.check(names.hit("a", 1, 10)).await.allowed);
    }
    // half-way into the next cell, half of the previous 10 still count
    clock.set(11_500);
    let v = engine.check(names.hit("a", 1, 10)).await;
    assert!(v.allowed);
    assert_eq!(v.remaining, 4);
    for _ in 0..4 {
        assert!(engine.check(names.hit("a", 1, 10)).await.allowed);
    }
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
    let (engine, clock, origin) = engine_at(10_000);
    let names = Names::new();
    for _ in 0..3 {
        engine.check(names.hit("a", 2, 10)).await;
    }
    assert_eq!(engine.pending_replay_cells(), 1);
    engine.flush_replay().await;
    assert_eq!(engine.pending_replay_cells(), 0);

    // a second engine of the same region starts cold and reads the total
    let other = Engine::new(EngineSettings::default(), origin.clone(), clock.clone());
    let v = other.check(names.hit("a", 1, 10)).await;
    assert_eq!(v.remaining, 3);
    other.flush_replay().await;
    // the first engine catches up when its own replay merges the origin's total
    engine.check(names.hit("a", 1, 10)).await;
    engine.flush_replay().await;
    assert_eq!(engine.check(names.hit("a", 0, 10)).await.remaining, 2);
}

/// An origin that can be switched off: the test double for a dead Redis.
struct SwitchableOrigin {
    inner: InProcessOrigin,
    down: AtomicBool,
}

impl RegionalOrigin for SwitchableOrigin {
    fn name(&self) -> &'static str {
        "switchable"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, u64> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.read(key)
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(OriginError::Unavailable("down".into())) });
        }
        self.inner.replay(batch)
    }
}

#[tokio::test]
async fn a_dead_origin_degrades_to_local_counts_and_loses_nothing() {
    let origin = Arc::new(SwitchableOrigin {
        inner: InProcessOrigin::new(100),
        down: AtomicBool::new(true),
    });
    let clock = Arc::new(ManualClock::new(10_000));
    let engine = Engine::new(EngineSettings::default(), origin.clone(), clock);
    let names = Names::new();
    for _ in 0..4 {
        assert!(engine.check(names.hit("a", 1, 5)).await.allowed);
    }
    engine.flush_replay().await;
    assert_eq!(
        engine.pending_replay_cells(),
        1,
        "failed work is queued again"
    );
    engine.check(names.hit("a", 1, 5)).await;
    assert!(!engine.check(names.hit("a", 1, 5)).await.allowed);

    origin.down.store(false, Ordering::SeqCst);
    engine.flush_replay().await;
    assert_eq!(engine.pending_replay_cells(), 0);
    let key = CellKey {
        workspace: names.workspace.clone(),
        namespace: names.namespace.clone(),
        identifier: "a".into(),
        duration_ms: 1_000,
        sequence: 10,
    };
    assert_eq!(origin.inner.read(&key).await.ok(), Some(5));
}

#[tokio::test]
async fn the_cell_cap_holds() {
    let clock = Arc::new(ManualClock::new(10_000));
    let settings = EngineSettings {
        max_cells: 100,
        ..EngineSettings::default()
    };
    let engine = Engine::new(settings, Arc::new(InProcessOrigin::new(100)), clock);
    let workspace: Arc<str> = "d".into();
    let namespace: Arc<str> = "1:k/".into();
    for i in 0..5_000 {
        let identifier = i.to_string();
        engine
            .check(Hit {
                workspace: &workspace,
                namespace: &namespace,
                identifier: &identifier,
                duration_ms: 1_000,
                limit: 10,
                cost: 1,
            })
            .await;
    }
    assert!(
        engine.live_cells() <= 100,
        "live cells: {}",
        engine.live_cells()
    );
}
