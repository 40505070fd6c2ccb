//! Memory per live cell through the whole service: under a flood of unique keys, what the
//! process really holds per live cell (its resident memory: the table, the embedded origin's
//! components, the replay queue's buffer, the allocator's overhead) is within 0.83–1.2 × what
//! the cell budget counts per live cell, whether the budget holds every counter or the flood
//! passes it (in a container whose limit the budgets are derived from, with no OOM kill; the
//! table's ghosts counted).
//!
//! The scaled form of the container run in BENCHMARKS.md ("Memory per live cell"). The test
//! makes a memory cgroup of its own (cgroup v1 or v2, as root) and fails, saying what is
//! missing, where it cannot.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use gcounter_loadtest::{DescriptorTemplate, LoadtestArgs};
use support::cgroup::MemoryCgroup;
use support::metrics::sample;
use support::{Launch, Service};

const MIB: u64 = 1 << 20;
/// --max-memory 192 MiB (75 %), of which the cells get 72 MiB: room for ~150,000 cells.
const LIMIT: u64 = 256 * MIB;
/// Unique keys of the flood past that budget (two cells each: 400,000 cells).
const FLOOD_KEYS: u64 = 200_000;
/// Unique keys under a budget that holds them all.
const KEYS: u64 = 100_000;
/// Resident bytes per live cell ÷ counted bytes per live cell. Under a flood past the budget
/// this holds only because the table's ghosts (the hashes of evicted keys quick_cache keeps to
/// admit a returning key as hot, up to half as many slots as it holds cells) are counted:
/// uncounted, they made it ~1.27 ×.
const RATIO: std::ops::RangeInclusive<f64> = 0.83..=1.2;

/// A year's window: no cell expires or rolls over during the test.
const YAML: &str = "\
domain: memory
descriptors:
  - key: client
    rate_limit:
      unit: year
      requests_per_unit: 1000000000
";

/// The pools of `--max-cell-bytes` (`rls_memory_bytes{pool}`).
const CELL_POOLS: [&str; 6] = [
    "cells",
    "replay_queue",
    "foreign_components",
    "strict_mode",
    "penalty_box",
    "rights",
];

struct Reading {
    rss: u64,
    counted: u64,
    live: u64,
}

fn read(service: &Service) -> Reading {
    let text = service.metrics();
    let counted = CELL_POOLS
        .iter()
        .filter_map(|pool| sample(&text, "rls_memory_bytes", &[("pool", pool)]))
        .sum::<f64>() as u64;
    let live = sample(&text, "rls_live_cells", &[]).unwrap_or(0.0) as u64;
    let rss = support::process::rss_kib(service.pid()).expect("the service's VmRSS") * 1024;
    Reading { rss, counted, live }
}

/// Each key of `keys` once (`gcounter-loadtest --sequential`).
async fn flood(service: &Service, keys: u64) {
    let args = LoadtestArgs {
        target: service.grpc_addr.to_string(),
        domain: "memory".into(),
        descriptors: vec![
            "client=10.0.{key}"
                .parse::<DescriptorTemplate>()
                .expect("a descriptor template"),
        ],
        key_space: keys,
        sequential: true,
        hits_addend: 1,
        connections: 2,
        concurrency: 32,
        rate: None,
        duration: Duration::from_secs(600),
        warmup: Duration::ZERO,
        write_grpc_body: None,
        ok_spans: false,
    };
    let report = gcounter_loadtest::run(args)
        .await
        .expect("the flood runs")
        .expect("a report");
    assert_eq!(report.errors, 0, "{report:?}");
}

/// Until the replay queue is empty: what the flood queued reached the origin.
async fn settle(service: &Service) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let text = service.metrics();
        if sample(&text, "rls_replay_pending_cells", &[]) == Some(0.0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the replay queue did not drain in 30 s");
}

/// Per live cell after a flood of `keys` unique keys (one decision first: the runtime, the
/// connections and the config are warm, so the growth is what the cells hold).
struct PerCell {
    live: u64,
    resident: f64,
    counted: f64,
}

impl PerCell {
    /// Resident ÷ counted.
    fn ratio(&self) -> f64 {
        self.resident / self.counted.max(1.0)
    }

    /// Resident memory per live cell within `range` × what the budget counts.
    fn assert_counted_as_held(&self, range: &std::ops::RangeInclusive<f64>) {
        assert!(
            range.contains(&self.ratio()),
            "resident {:.0} B per live cell, counted {:.0} B: the budget must count what is held \
             (ratio {:.2}, within {range:?})",
            self.resident,
            self.counted,
            self.ratio()
        );
    }
}

async fn flood_and_measure(service: &Service, keys: u64) -> PerCell {
    flood(service, 1).await;
    settle(service).await;
    let before = read(service);
    flood(service, keys).await;
    settle(service).await;
    let after = read(service);
    let live = after.live.saturating_sub(before.live);
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / live.max(1) as f64;
    let measured = PerCell {
        live,
        resident: per(after.rss, before.rss),
        counted: per(after.counted, before.counted),
    };
    eprintln!(
        "{keys} keys, {live} live cells: resident {:.0} B, counted {:.0} B per live cell \
         (resident ÷ counted {:.2}); RSS {} MiB",
        measured.resident,
        measured.counted,
        measured.ratio(),
        after.rss / MIB
    );
    measured
}

/// More keys than the budget derived from the container holds: the table evicts, and the
/// embedded origin and the allocator hold more than the live cells alone. No OOM kill, and
/// the budget still counts what is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_budget_in_a_container_is_counted_as_held() {
    let cgroup = MemoryCgroup::create(LIMIT);
    let (_dir, path) = support::limits_file(YAML);
    let procs = cgroup.procs();
    let mut service = Service::start_with(
        &path,
        &[],
        Launch {
            cgroup: Some(&procs),
            ..Launch::default()
        },
    );
    let measured = flood_and_measure(&service, FLOOD_KEYS).await;
    assert!(
        service.is_running(),
        "the service died: oom_kill {}\n{}",
        cgroup.oom_kills(),
        service.log_tail(30)
    );
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ran in the group");
    assert!(
        measured.live < 2 * FLOOD_KEYS,
        "{} live cells: the flood must pass the budget",
        measured.live
    );
    measured.assert_counted_as_held(&RATIO);
}

/// A larger `--max-memory` holds more cells, each counted at what it holds (a fixed cap in
/// cells made each weigh the budget over the cap, up to twice its bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counter_a_large_budget_holds_is_counted_as_held() {
    let (_dir, path) = support::limits_file(YAML);
    let service = Service::start(&path, &["--max-memory", "2GiB"]);
    let measured = flood_and_measure(&service, KEYS).await;
    // Each counter holds its current window's cell and the previous window's; key 0's were
    // the warm-up's.
    assert_eq!(measured.live, 2 * (KEYS - 1), "every counter stays live");
    measured.assert_counted_as_held(&RATIO);
}
