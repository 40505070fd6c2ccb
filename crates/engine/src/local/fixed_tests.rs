//! Upstream's semantics in the engine: fixed windows (`--windows fixed`) and denied hits
//! counted (`--count-denied`), each test failing if the mode were ignored.

use super::tests::Names;
use super::*;
use crate::recorder::NoRecorder;
use crate::regional::InProcessOrigin;

/// An engine on `origin` deciding by `clock`, with `windows` and `count_denied`.
fn engine(
    origin: Arc<InProcessOrigin>,
    clock: &Arc<ManualClock>,
    windows: Windows,
    count_denied: bool,
) -> Engine {
    let settings = EngineSettings {
        windows,
        count_denied,
        ..EngineSettings::default()
    };
    Engine::new(settings, origin, clock.clone(), Arc::new(NoRecorder))
}

/// The current cell's count as the engine holds it.
fn current(engine: &Engine, identifier: &str, duration_ms: u64) -> u64 {
    let names = Names::new();
    let state = engine
        .inspection()
        .inspect(&names.hit_for(identifier, duration_ms, 0, 0).counter);
    state.current.map_or(0, |cell| cell.total())
}

#[tokio::test]
async fn a_fixed_window_starts_over_on_the_boundary() {
    let n = Names::new();
    let clock = Arc::new(ManualClock::new(10_400));
    for windows in [Windows::Fixed, Windows::Sliding] {
        clock.set(10_400);
        let engine = engine(Arc::new(InProcessOrigin::new(100)), &clock, windows, false);
        for left in (0..5).rev() {
            assert_eq!(
                engine.check(n.hit_for("a", 1_000, 1, 5)).await.remaining,
                left
            );
        }
        assert!(!engine.check(n.hit_for("a", 1_000, 1, 5)).await.allowed);
        // The next window, 1 ms in: fixed has the whole limit again; sliding still weighs
        // floor(4.995) = 4 of the previous 5.
        clock.set(11_001);
        let next = engine.check(n.hit_for("a", 1_000, 1, 5)).await;
        match windows {
            Windows::Fixed => assert_eq!((next.allowed, next.remaining), (true, 4)),
            Windows::Sliding => assert_eq!((next.allowed, next.remaining), (true, 0)),
        }
    }
}

#[tokio::test]
async fn fixed_windows_answer_upstreams_duration_until_reset() {
    let n = Names::new();
    // Upstream at Unix second 1_000_000 with an hourly limit: 3600 - 1_000_000 % 3600 = 800 s,
    // whatever the milliseconds, allowed or denied.
    let clock = Arc::new(ManualClock::new(1_000_000_700));
    let engine = engine(
        Arc::new(InProcessOrigin::new(100)),
        &clock,
        Windows::Fixed,
        false,
    );
    let hour = 3_600_000;
    let allowed = engine.check(n.hit_for("a", hour, 1, 1)).await;
    assert_eq!((allowed.allowed, allowed.until_reset_ms), (true, 800_000));
    let denied = engine.check(n.hit_for("a", hour, 1, 1)).await;
    assert_eq!((denied.allowed, denied.until_reset_ms), (false, 800_000));
}

#[tokio::test]
async fn counted_denials_grow_the_counter_and_reach_the_region() {
    let n = Names::new();
    let clock = Arc::new(ManualClock::new(60_000));
    for count_denied in [true, false] {
        let origin = Arc::new(crate::local::tests::shared_origin(100));
        let engine = engine(Arc::clone(&origin), &clock, Windows::Fixed, count_denied);
        for _ in 0..3 {
            assert!(engine.check(n.hit_for("a", 60_000, 1, 3)).await.allowed);
        }
        let denied = engine.check(n.hit_for("a", 60_000, 2, 3)).await;
        assert!(!denied.allowed);
        // What the decision saw: upstream's "limit before increase".
        assert_eq!(denied.seen, 3);
        assert!(!engine.check(n.hit_for("a", 60_000, 1, 3)).await.allowed);
        let want = if count_denied { 6 } else { 3 };
        assert_eq!(
            current(&engine, "a", 60_000),
            want,
            "count_denied {count_denied}"
        );

        // Another process of the region reads the same count from the origin.
        engine.convergence().replay_now().await;
        let Some(sibling) = origin.sibling("other") else {
            panic!("a second process");
        };
        let other = engine_over(Arc::new(sibling), &clock, count_denied);
        let peek = other.check(n.hit_for("a", 60_000, 0, 10)).await;
        assert_eq!(peek.remaining, 10 - want, "count_denied {count_denied}");
    }
}

fn engine_over(
    origin: Arc<InProcessOrigin>,
    clock: &Arc<ManualClock>,
    count_denied: bool,
) -> Engine {
    engine(origin, clock, Windows::Fixed, count_denied)
}

#[tokio::test]
async fn a_counted_denial_leaves_the_next_window_untouched() {
    let n = Names::new();
    let clock = Arc::new(ManualClock::new(120_000));
    let engine = engine(
        Arc::new(InProcessOrigin::new(100)),
        &clock,
        Windows::Fixed,
        true,
    );
    for _ in 0..20 {
        engine.check(n.hit_for("a", 60_000, 1, 10)).await;
    }
    assert_eq!(current(&engine, "a", 60_000), 20);
    clock.set(180_000);
    let next = engine.check(n.hit_for("a", 60_000, 1, 10)).await;
    assert_eq!((next.allowed, next.remaining), (true, 9));
}

#[tokio::test]
async fn fixed_windows_read_no_previous_cell() {
    let n = Names::new();
    // A sliding decision early in a window reads the previous cell; a fixed one never does,
    // so the inspection's count is the current cell alone.
    let clock = Arc::new(ManualClock::new(10_000));
    let engine = engine(
        Arc::new(InProcessOrigin::new(100)),
        &clock,
        Windows::Fixed,
        false,
    );
    for _ in 0..4 {
        engine.check(n.hit_for("a", 1_000, 1, 10)).await;
    }
    clock.set(11_100);
    engine.check(n.hit_for("a", 1_000, 1, 10)).await;
    let state = engine
        .inspection()
        .inspect(&n.hit_for("a", 1_000, 0, 0).counter);
    assert_eq!(state.windows, Windows::Fixed);
    assert_eq!(state.effective(), 1);
}
