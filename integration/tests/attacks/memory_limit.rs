//! The service in a container of 256 MiB, started with no memory flag: it reads the limit
//! from its cgroup, derives its budgets from it, and survives a flood of unique keys and an
//! HTTP/2 slow-loris at once without the kernel's OOM killer, answering legitimate requests
//! correctly throughout.
//!
//! The test makes a memory cgroup of its own (cgroup v1 or v2, as root) and fails, saying what
//! is missing, where it cannot.

use gcounter_rls_integration as support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gcounter_loadtest::abuse::{self, SlowLoris, SlowLorisReport};
use support::cgroup::{MemoryCgroup, join_and_exec};
use support::grpc::{self, Code, descriptor, request};
use support::metrics::sample;
use support::{Launch, Service};

const MIB: u64 = 1 << 20;
/// Streams per slow-loris connection: the service's default --max-concurrent-streams.
const STREAMS: usize = 100;
const LIMIT: u64 = 256 * MIB;

/// `victim` is the client a test watches: 3 a day. `fresh` keys are never near their limit.
/// The flood's descriptors carry their own limit (a request override).
const YAML: &str = "\
domain: memory
descriptors:
  - key: victim
    rate_limit:
      unit: day
      requests_per_unit: 3
  - key: fresh
    rate_limit:
      unit: day
      requests_per_unit: 1000000
";

/// What 256 MiB gives (docs/operations.md, "Memory"): 75 % is --max-memory, 192 MiB; less the
/// 48 MiB reserve (32 MiB + the default --max-config-bytes) leaves 144 MiB, in sixteenths:
/// cells 9 (81 MiB), request bytes 2 (18 MiB), connections 3 (172 of 128 KiB + 32 KiB),
/// requests in flight 1 (768 of 12 KiB), metric series 1 (576 of 16 KiB).
const BUDGETS: [(&str, u64); 6] = [
    ("cell_bytes", 72 * MIB),
    ("request_bytes", 18 * MIB),
    ("rlqs_buckets", 9 * MIB),
    ("transport", (172 * 160 + 768 * 12) << 10),
    ("metric_series", (576 * 16) << 10),
    ("reserve", 48 * MIB),
];

/// How the flood sends: `per_request` descriptors of 4 entries of `half` bytes a side.
#[derive(Clone, Copy)]
struct Flood {
    per_request: usize,
    half: usize,
}

impl Flood {
    /// 12 descriptors of 16 KiB (`--max-descriptor-bytes`) in each request of ~192 KiB.
    const LARGE: Flood = Flood {
        per_request: 12,
        half: 2_048,
    };
    /// One descriptor of ~7 KiB a request: small enough for the share of the request budget
    /// kept for small messages, which the slow-loris cannot take.
    const SMALL: Flood = Flood {
        per_request: 1,
        half: 900,
    };

    fn request_bytes(self) -> u64 {
        (self.per_request * 8 * self.half) as u64
    }
}

/// Unique keys from `clients` connections until `until`; the descriptor bytes the service
/// accepted.
async fn unique_key_flood(addr: SocketAddr, clients: usize, flood: Flood, until: Instant) -> u64 {
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let sent = Arc::clone(&sent);
        tasks.spawn(async move {
            let mut rls = grpc::rls_client(addr).await;
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let descriptors = (0..flood.per_request)
                    .map(|i| grpc::big_override(&format!("{client}-{n}-{i}:"), 4, flood.half))
                    .collect();
                let r = rls.should_rate_limit(request("memory", descriptors)).await;
                // Refused (the request budget spent) or not: the attacker carries on.
                if r.is_ok() {
                    sent.fetch_add(flood.request_bytes(), Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    sent.load(Ordering::Relaxed)
}

/// A legitimate call and what it must get: a fresh key is OK; the victim is OK three times,
/// then OVER_LIMIT for the rest of the day.
async fn legit_call(service: &Service, i: u64) -> Result<(), String> {
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let fresh = format!("fresh-{i}");
    let r = client
        .should_rate_limit(request("memory", vec![descriptor(&[("fresh", &fresh)])]))
        .await
        .map_err(|s| format!("call {i} (fresh): {s:?}"))?;
    if r.get_ref().overall_code != Code::Ok as i32 {
        return Err(format!("call {i} (fresh): {:?}", r.into_inner()));
    }
    let r = client
        .should_rate_limit(request("memory", vec![descriptor(&[("victim", "v")])]))
        .await
        .map_err(|s| format!("call {i} (victim): {s:?}"))?;
    let want = if i <= 3 { Code::Ok } else { Code::OverLimit };
    if r.get_ref().overall_code != want as i32 {
        return Err(format!(
            "call {i} (victim): expected {want:?}, got {:?}",
            r.into_inner()
        ));
    }
    Ok(())
}

/// `rls_cell_bytes`, both shares.
fn cell_bytes(text: &str) -> f64 {
    ["evictable", "protected"]
        .iter()
        .filter_map(|share| sample(text, "rls_cell_bytes", &[("share", share)]))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_256mib_container_survives_a_flood_and_a_slow_loris() {
    let cgroup = MemoryCgroup::create(LIMIT);
    let (_dir, path) = support::limits_file(YAML);
    let procs = cgroup.procs();
    let mut service = Service::start_with(
        &path,
        &["--request-timeout", "3s"],
        Launch {
            cgroup: Some(&procs),
            ..Launch::default()
        },
    );
    let log = service.log_tail(40);
    assert!(
        log.contains("memory budgets derived from the memory limit"),
        "the budgets are logged at start\n{log}"
    );

    // The limit and the budgets, read by the service itself from its cgroup.
    let text = service.metrics();
    let limit = sample(
        &text,
        "rls_memory_limit_bytes",
        &[("source", cgroup.source_label())],
    );
    assert_eq!(limit, Some((LIMIT * 3 / 4) as f64), "{text}");
    for (pool, bytes) in BUDGETS {
        let got = sample(&text, "rls_memory_budget_bytes", &[("pool", pool)]);
        assert_eq!(got, Some(bytes as f64), "pool {pool}\n{text}");
    }

    // The flood alone first, with large requests, until it has sent more than the cells'
    // budget (at most 15 s): the one-off keys are then evicted, the cells stay within it.
    let cells_budget = BUDGETS[0].1;
    let started = Instant::now();
    let mut flooded_alone = 0;
    while flooded_alone <= cells_budget && started.elapsed() < Duration::from_secs(15) {
        let until = Instant::now() + Duration::from_secs(4);
        flooded_alone += unique_key_flood(service.grpc_addr, 4, Flood::LARGE, until).await;
    }
    let cells = cell_bytes(&service.metrics());
    eprintln!(
        "unique-key flood alone: {} MiB of descriptors in {:?}; cell bytes {} MiB",
        flooded_alone / MIB,
        started.elapsed(),
        cells as u64 / MIB
    );
    assert!(
        flooded_alone > cells_budget,
        "the flood must send more than the cells' budget: {flooded_alone} B"
    );
    assert!(
        cells <= cells_budget as f64,
        "cell bytes {cells} above the cells budget {cells_budget}"
    );

    // Both attacks at once for 20 s: the slow-loris holds 400 streams (4 connections of
    // --max-concurrent-streams) that each announce 1 MB, 400 MB at any moment, and reopens
    // every stream the service ends; meanwhile 4 clients send unique keys. Unbounded, the
    // announced messages alone would pass the limit: tonic reserves what a stream announces.
    let until = Instant::now() + Duration::from_secs(20);
    let target = service.grpc_addr;
    let loris = tokio::spawn(async move {
        let mut total = SlowLorisReport::default();
        while Instant::now() + Duration::from_secs(1) < until {
            let round = abuse::slow_loris(SlowLoris {
                target,
                path: abuse::SHOULD_RATE_LIMIT.into(),
                connections: 4,
                streams_per_connection: STREAMS,
                announce_bytes: 1_000_000,
                send_bytes: 900_000,
                trickle_every: Duration::from_secs(1),
                duration: until.saturating_duration_since(Instant::now()),
            })
            .await;
            total.add(&round);
        }
        total
    });
    let flood = tokio::spawn(unique_key_flood(service.grpc_addr, 4, Flood::SMALL, until));

    let pid = service.pid();
    let mut peak_rss_kib = 0;
    let mut failures = Vec::new();
    let mut calls = 0u64;
    while !(loris.is_finished() && flood.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            service.is_running(),
            "the service died under the attacks: oom_kill {}\n{}",
            cgroup.oom_kills(),
            service.log_tail(30)
        );
        peak_rss_kib = peak_rss_kib.max(support::process::rss_kib(pid).unwrap_or(0));
        calls += 1;
        if let Err(failure) = legit_call(&service, calls).await {
            failures.push(failure);
        }
    }
    let report = loris.await.expect("the slow-loris task");
    let flooded = flood.await.expect("the flood task");
    let held = 4 * STREAMS as u64 * 1_000_000;
    eprintln!(
        "slow-loris {report:?}; unique-key flood {} MiB of descriptors; peak RSS {} MiB, \
         cgroup peak {:?} MiB, {calls} legitimate calls",
        flooded / MIB,
        peak_rss_kib / 1024,
        cgroup.peak_bytes().map(|b| b / MIB)
    );

    assert!(
        held > LIMIT && report.streams_opened > 4 * STREAMS as u64,
        "the slow-loris must hold more than the limit: {report:?}"
    );
    assert!(calls >= 20, "only {calls} legitimate calls were made");
    assert!(
        failures.is_empty(),
        "legitimate calls failed during the attacks: {failures:?}"
    );
    assert!(service.is_running(), "{}", service.log_tail(30));
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ran in the group");

    // The bounds held: the cells within their budget, and the service still answers.
    let text = service.metrics();
    let cells = cell_bytes(&text);
    eprintln!("cell bytes after the flood: {} MiB", cells as u64 / MIB);
    assert!(
        cells > 0.0 && cells <= cells_budget as f64,
        "cell bytes {cells} against the cells budget {cells_budget}"
    );
    legit_call(&service, calls + 1)
        .await
        .expect("a call after the attacks");
    drop(service);
}

/// Budgets set by flags that do not fit in the container's limit are refused at start:
/// exit 2 with one `error:` line naming them and the limit.
#[test]
fn budgets_over_the_container_limit_are_refused() {
    let cgroup = MemoryCgroup::create(LIMIT);
    let (_dir, path) = support::limits_file(YAML);
    let output = Command::new("sh")
        .args(join_and_exec(&cgroup.procs()))
        .arg(support::binary())
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--max-cell-bytes", "256MiB"])
        .stdin(Stdio::null())
        .output()
        .expect("run the service");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(line.contains("--max-cell-bytes (256MiB)"), "{stderr}");
    assert!(line.contains("memory limit 256MiB"), "{stderr}");
}
