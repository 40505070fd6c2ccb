//! Resident memory per live cell, and the cap under a flood of unique identifiers.
//!
//! `cargo bench --bench memory` (not criterion: it measures bytes, once, in a fresh process).
//! The engine is the embedded default's: in-process origin, replay flushed as the background
//! task would. RSS comes from /proc/self/statm, so the figure includes the allocator's
//! overhead and fragmentation, which is what an operator pays.

use std::sync::Arc;

use futures_util::FutureExt;
use gcounter_rls::engine::{Engine, EngineSettings, Hit, ManualClock};
use gcounter_rls::regional::InProcessOrigin;
use gcounter_rls::telemetry::Metrics;

const MINUTE_MS: u64 = 60_000;
/// Decisions between two replay flushes (the service flushes every 100 ms).
const FLUSH_EVERY: u64 = 10_000;

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

/// Decide once on each of `keys` (identifiers like client addresses), flushing replay.
fn fill(engine: &Engine, keys: std::ops::Range<u64>, mut each: impl FnMut(u64)) {
    let workspace: Arc<str> = "bench".into();
    let namespace: Arc<str> = "14:remote_address/".into();
    let mut identifier = String::new();
    for i in keys {
        use std::fmt::Write;
        identifier.clear();
        let _ = write!(identifier, "10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
        let hit = Hit {
            workspace: &workspace,
            namespace: &namespace,
            identifier: &identifier,
            duration_ms: MINUTE_MS,
            limit: 1_000,
            cost: 1,
        };
        engine
            .check(hit)
            .now_or_never()
            .expect("the embedded engine decides without waiting");
        if i % FLUSH_EVERY == FLUSH_EVERY - 1 {
            engine
                .flush_replay()
                .now_or_never()
                .expect("in-process replay is immediate");
            each(i + 1);
        }
    }
    engine
        .flush_replay()
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
    let engine = engine(MAX_CELLS, gcounter_rls::engine::DEFAULT_MAX_CELL_BYTES);
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
}
