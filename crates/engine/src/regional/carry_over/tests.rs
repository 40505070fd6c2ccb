//! Carry-over over the in-process origin, decided by a real engine on a manual clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;
use crate::local::tests::Names;
use crate::local::{Engine, EngineSettings, ManualClock};
use crate::recorder::{DecisionSource, FlushRecord, NoRecorder, OriginOp};
use crate::regional::InProcessOrigin;

/// The replaced limiter's counts, by cell (workspace, identifier, sequence), counting reads.
#[derive(Default)]
struct Counts {
    by_cell: HashMap<(String, u64), u64>,
    reads: AtomicU64,
    /// Never answers: a store slower than any timeout.
    hang: bool,
}

impl CarrySource for Counts {
    fn count<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, Option<u64>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if self.hang {
            return Box::pin(std::future::pending());
        }
        let count = self
            .by_cell
            .get(&(key.identifier.to_string(), key.sequence))
            .copied();
        Box::pin(std::future::ready(Ok(count)))
    }
}

/// Counts the carry-over outcomes.
#[derive(Default)]
struct Outcomes(std::sync::Mutex<Vec<CarryOutcome>>);

impl Recorder for Outcomes {
    fn decision_source(&self, _: DecisionSource) {}
    fn origin_call(&self, _: OriginOp, _: bool, _: Duration) {}
    fn replay_batch(&self, _: usize) {}
    fn replay_overflow(&self) {}
    fn global_flush(&self, _: FlushRecord) {}
    fn global_sync(&self, _: u64, _: u64, _: Duration) {}
    fn global_sync_failed(&self) {}
    fn global_cleanup(&self, _: Duration) {}
    fn carry_over(&self, outcome: CarryOutcome) {
        self.0.lock().unwrap().push(outcome);
    }
}

const MINUTE_MS: u64 = 60_000;
/// The switch, 30 s into the minute of sequence 100.
const SWITCH_MS: u64 = 100 * MINUTE_MS + 30_000;

fn settings(max_reads_per_second: u32) -> CarrySettings {
    CarrySettings {
        switched_at_ms: SWITCH_MS,
        read_timeout: Duration::from_millis(20),
        max_reads_per_second,
    }
}

struct Setup {
    engine: Engine,
    clock: Arc<ManualClock>,
    store: Arc<InProcessOrigin>,
    source: Arc<Counts>,
    outcomes: Arc<Outcomes>,
}

fn setup(source: Counts, carry: CarrySettings) -> Setup {
    let store = Arc::new(InProcessOrigin::new(1_000));
    let source = Arc::new(source);
    let outcomes = Arc::new(Outcomes::default());
    let origin = CarryOverOrigin::new(store.clone(), source.clone(), carry, outcomes.clone());
    let clock = Arc::new(ManualClock::new(SWITCH_MS));
    let engine = Engine::new(
        EngineSettings::default(),
        Arc::new(origin),
        clock.clone(),
        Arc::new(NoRecorder),
    );
    Setup {
        engine,
        clock,
        store,
        source,
        outcomes,
    }
}

fn counts(cells: &[(&str, u64, u64)]) -> Counts {
    Counts {
        by_cell: cells
            .iter()
            .map(|(id, sequence, count)| (((*id).to_owned(), *sequence), *count))
            .collect(),
        ..Counts::default()
    }
}

async fn admitted(engine: &Engine, names: &Names, identifier: &str, tries: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..tries {
        if engine
            .check(names.hit_for(identifier, MINUTE_MS, 1, 10))
            .await
            .allowed
        {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test(start_paused = true)]
async fn a_counter_at_7_of_10_before_the_switch_allows_3_after_it() {
    let s = setup(counts(&[("a", 100, 7)]), settings(100));
    let names = Names::new();
    assert_eq!(admitted(&s.engine, &names, "a", 10).await, 3);
    // A counter the replaced limiter never counted starts at zero.
    assert_eq!(admitted(&s.engine, &names, "b", 12).await, 10);
    assert_eq!(
        *s.outcomes.0.lock().unwrap(),
        // "a": its previous window absent, its current one seeded; "b": both absent.
        vec![
            CarryOutcome::Absent,
            CarryOutcome::Seeded,
            CarryOutcome::Absent,
            CarryOutcome::Absent
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_previous_window_is_carried_where_the_sliding_window_weighs_it() {
    // 10 counted in the previous minute, half of it still weighs 30 s into this one.
    let s = setup(counts(&[("a", 99, 10)]), settings(100));
    let names = Names::new();
    assert_eq!(admitted(&s.engine, &names, "a", 10).await, 5);
}

#[tokio::test(start_paused = true)]
async fn the_seed_is_the_regions_once_not_once_per_process() {
    let s = setup(counts(&[("a", 100, 7)]), settings(100));
    let key = CellKey::new("domain", "3:key/", "a", MINUTE_MS, 100);
    let first = s.store.seed(&key, 7).await.unwrap();
    let second = s.store.seed(&key, 7).await.unwrap();
    assert_eq!(first.total, PnCount::new(7, 0));
    assert_eq!(second.total, PnCount::new(7, 0));
    // A process of the region seeding later finds the region's count, not 14.
    let names = Names::new();
    assert_eq!(admitted(&s.engine, &names, "a", 10).await, 3);
}

#[tokio::test(start_paused = true)]
async fn windows_begun_after_the_switch_are_never_read() {
    let s = setup(counts(&[("a", 101, 7)]), settings(100));
    let names = Names::new();
    s.clock.set(101 * MINUTE_MS + 1_000);
    assert_eq!(admitted(&s.engine, &names, "a", 12).await, 10);
    // Only the previous window (sequence 100, begun before the switch) was read.
    assert_eq!(s.source.reads.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn past_the_cap_a_cell_starts_without_a_carried_count() {
    // Two reads a second: "a"'s two windows take them, "b"'s are over the cap.
    let s = setup(counts(&[("a", 100, 7), ("b", 100, 7)]), settings(2));
    let names = Names::new();
    assert_eq!(admitted(&s.engine, &names, "a", 10).await, 3);
    assert_eq!(admitted(&s.engine, &names, "b", 12).await, 10);
    let over_cap = s
        .outcomes
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|o| **o == CarryOutcome::OverCap)
        .count();
    assert_eq!(over_cap, 2);
    // The next second has its allowance again, for the cells not seen yet.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(admitted(&s.engine, &names, "c", 12).await, 10);
    assert_eq!(s.source.reads.load(Ordering::Relaxed), 4);
}

#[tokio::test(start_paused = true)]
async fn a_read_slower_than_its_timeout_lets_the_cell_start_without_it() {
    let source = Counts {
        hang: true,
        ..counts(&[("a", 100, 7)])
    };
    let s = setup(source, settings(100));
    let names = Names::new();
    assert_eq!(admitted(&s.engine, &names, "a", 12).await, 10);
    assert!(
        s.outcomes
            .0
            .lock()
            .unwrap()
            .iter()
            .all(|o| *o == CarryOutcome::Failed)
    );
}
