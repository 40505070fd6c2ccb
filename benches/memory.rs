//! Resident memory per live cell, the cap under a flood of unique identifiers, and what
//! reaping a full table costs a warm decision.
//!
//! `cargo bench --bench memory` (not criterion: it measures bytes, once, in a fresh process).
//! The engine is the embedded default's: in-process origin, replay run as the background
//! task would. RSS comes from /proc/self/statm, so the figure includes the allocator's
//! overhead and fragmentation, which is what an operator pays.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark: a panic is how it reports a broken set-up"
)]

use std::sync::Arc;

use futures_util::FutureExt;
use gcounter_engine::cell_key::CounterKeyRef;
use gcounter_engine::engine::{Engine, EngineSettings, Hit, ManualClock};
use gcounter_engine::regional::InProcessOrigin;
use gcounter_rls::telemetry::Metrics;

const MINUTE_MS: u64 = 60_000;
/// Decisions between two replays (the service replays every 100 ms).
const REPLAY_EVERY: u64 = 10_000;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("resident pages in /proc/self/statm");
    pages * 4096
}

fn engine(max_cells: usize, max_cell_bytes: u64) -> Engine {
    Engine::new(
        EngineSettings {
            max_cells,
            max_cell_bytes,
            max_pending_replay: 1_000_000,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(max_cells)),
        Arc::new(ManualClock::new(1_000 * MINUTE_MS + MINUTE_MS / 2)),
        Arc::new(Metrics::new()),
    )
}

/// Decide once on each of `keys` (identifiers like client addresses), replaying as the service does.
fn fill(engine: &Engine, keys: std::ops::Range<u64>, mut each: impl FnMut(u64)) {
    let workspace: Arc<str> = "bench".into();
    let namespace: Arc<str> = "14:remote_address/".into();
    let mut identifier = String::new();
    for i in keys {
        use std::fmt::Write;
        identifier.clear();
        let _ = write!(identifier, "10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
        let hit = Hit {
            counter: CounterKeyRef::new(&workspace, &namespace, &identifier, MINUTE_MS),
            limit: 1_000,
            cost: 1,
        };
        engine
            .check(hit)
            .now_or_never()
            .expect("the embedded engine decides without waiting");
        if i % REPLAY_EVERY == REPLAY_EVERY - 1 {
            engine
                .replay_now()
                .now_or_never()
                .expect("in-process replay is immediate");
            each(i + 1);
        }
    }
    engine
        .replay_now()
        .now_or_never()
        .expect("in-process replay is immediate");
}

fn per_cell() {
    // Each key makes two cells: its current window and its (empty) previous one.
    const KEYS: u64 = 500_000;
    // The default --max-cells, filled to the cap: tables are sized for their cap. The byte
    // cap is raised so that it does not bind: this measures what a cell costs.
    let engine = engine(1_000_000, 1 << 30);
    let before = rss_bytes();
    fill(&engine, 0..KEYS, |_| {});
    let after = rss_bytes();
    let cells = engine.live_cells() as u64;
    println!(
        "{{\"bench\":\"memory per live cell\",\"keys\":{KEYS},\"live_cells\":{cells},\"rss_before_mib\":{:.1},\"rss_after_mib\":{:.1},\"bytes_per_cell\":{:.0}}}",
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
        (after - before) as f64 / cells as f64
    );
}

fn flood() {
    const MAX_CELLS: usize = 1_000_000;
    const KEYS: u64 = 5_000_000;
    // The service's defaults: the byte cap binds before the cell cap for these cells.
    let engine = engine(MAX_CELLS, gcounter_engine::engine::DEFAULT_MAX_CELL_BYTES);
    let mut samples = Vec::new();
    fill(&engine, 0..KEYS, |done| {
        if done % 500_000 == 0 {
            samples.push((done, rss_bytes(), engine.live_cells()));
        }
    });
    let mib = |b: u64| b as f64 / 1_048_576.0;
    let series: Vec<String> = samples
        .iter()
        .map(|(done, rss, cells)| format!("[{done},{:.1},{cells}]", mib(*rss)))
        .collect();
    // Growth over the second half of the flood, long after the cap was reached.
    let half = samples.len() / 2;
    let growth = samples
        .last()
        .zip(samples.get(half))
        .map_or(0.0, |(last, mid)| mib(last.1) - mib(mid.1));
    println!(
        "{{\"bench\":\"flood of unique identifiers\",\"max_cells\":{MAX_CELLS},\"keys\":{KEYS},\"rss_growth_second_half_mib\":{growth:.1},\"samples_keys_rss_mib_cells\":[{}]}}",
        series.join(",")
    );
}

/// 1M expired cells reaped on a one-thread runtime (`--workers 1`) while a task decides on a
/// warm key in a loop: the longest loop turn is the longest a decision waited for the reaper.
/// (`Cache::retain` held the only thread for the whole table.)
fn reap() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    const KEYS: u64 = 500_000;
    let clock = Arc::new(ManualClock::new(1_000 * MINUTE_MS + MINUTE_MS / 2));
    let engine = Arc::new(Engine::new(
        EngineSettings {
            max_cells: 1_000_000,
            max_cell_bytes: 1 << 30,
            max_pending_replay: 1_000_000,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(1_000_000)),
        clock.clone(),
        Arc::new(Metrics::new()),
    ));
    fill(&engine, 0..KEYS, |_| {});
    let cells = engine.live_cells();
    // two windows later, every one of them is past its sliding window
    clock.advance(2 * MINUTE_MS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let (turns, reap_took, reaped) = runtime.block_on(async {
        let workspace: Arc<str> = "bench".into();
        let namespace: Arc<str> = "14:remote_address/".into();
        let hot = Hit {
            counter: CounterKeyRef::new(&workspace, &namespace, "hot", MINUTE_MS),
            limit: u64::MAX / 2,
            cost: 1,
        };
        engine.check(hot).await;
        let done = Arc::new(AtomicBool::new(false));
        let reaper = {
            let (engine, done) = (Arc::clone(&engine), Arc::clone(&done));
            tokio::spawn(async move {
                let started = Instant::now();
                let reaped = engine.reap().await;
                done.store(true, Ordering::Release);
                (started.elapsed(), reaped)
            })
        };
        // Sized up front: growing it mid-reap is a large allocation, and glibc then
        // consolidates the half million small chunks the reaper just freed (35 ms, once),
        // which a service spreads over its many large allocations instead.
        let mut turns: Vec<Duration> = Vec::with_capacity(1 << 20);
        let mut last = Instant::now();
        while !done.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
            engine.check(hot).await;
            let now = Instant::now();
            turns.push(now - last);
            last = now;
        }
        let (took, reaped) = reaper.await.expect("the reaper task");
        (turns, took, reaped)
    });
    let mut sorted = turns.clone();
    sorted.sort();
    let at = |q: f64| {
        sorted
            .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "{{\"bench\":\"warm decision while reaping\",\"live_cells\":{cells},\"reaped\":{reaped},\"reap_ms\":{:.1},\"decisions\":{},\"turn_p99_ms\":{:.3},\"turn_max_ms\":{:.3}}}",
        reap_took.as_secs_f64() * 1e3,
        turns.len(),
        at(0.99),
        at(1.0)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks one of the two.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    if wants("per_cell") {
        per_cell();
    }
    if wants("flood") {
        flood();
    }
    if wants("reap") {
        reap();
    }
}
