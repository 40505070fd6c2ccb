//! The Redis regional origin, end to end: real service processes, real `redis-server`s.
//!
//! - processes sharing one Redis converge on one limit (within 10 %);
//! - a warm key is decided from memory (Redis round trips per request ≪ 1);
//! - a Redis outage causes no gRPC error, and no accepted work is lost;
//! - the service starts and answers with Redis down;
//! - a 3-node Redis Cluster works as the origin;
//! - SIGTERM replays what is pending, and still exits promptly when Redis is gone;
//! - regressions: a replay that timed out and is sent again is counted once; a failed cold
//!   read does not credit the decision to the origin.
//!
//! Tests that count Redis commands or cut Redis off start their own `redis-server` on a free
//! port; the others share the machine's Redis on 127.0.0.1:6379 under a unique
//! `--redis-prefix`. A missing Redis fails the test with what to install or start.
//!
//! Limits with long windows use `unit: day`, so a test never straddles a window boundary
//! (windows are aligned to the Unix epoch; `avoid_window_boundary` guards the rare case).

use gcounter_rls_integration as support;

use gcounter_redis::testing as redis_testing;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::grpc::{
    self, Code, HealthCheckRequest, RateLimitRequest, RlsClient, ServingStatus, UInt64Value, code,
    descriptor, hit, one_status, request,
};
use support::load::{self, Sent};
use support::metrics::count;
use support::proxy::{Cut, Proxy, proxied_redis};
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};
use support::windows::{WindowTally, full_windows_from_now};
use support::{Service, now_ms};

const DAY: Duration = Duration::from_secs(86_400);

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A dedicated `redis-server` on a free port (killed on drop), or a failed test saying why.
/// A request that checks `(key, value)` without consuming (descriptor `hits_addend` 0).
fn peek(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    let mut d = descriptor(&[(key, value)]);
    d.hits_addend = Some(UInt64Value { value: 0 });
    request(domain, vec![d])
}

/// The count a fresh peek sees for `(key, value)` under `limit` (the previous window is
/// empty in these tests, so remaining = limit − current).
async fn seen_count(
    client: &mut RlsClient,
    domain: &str,
    key: &str,
    value: &str,
    limit: u64,
) -> u64 {
    let status = one_status(client, peek(domain, key, value)).await;
    assert_eq!(
        code(&status),
        Code::Ok,
        "a peek under the limit: {status:?}"
    );
    let remaining = u64::from(status.limit_remaining);
    assert!(
        remaining > 0,
        "the peek must stay below the limit to read a count: {status:?}"
    );
    limit - remaining
}

fn origin_ops(text: &str, op: &str, result: &str) -> f64 {
    count(
        text,
        "rls_origin_operations_total",
        &[("op", op), ("result", result)],
    )
}

/// Every origin call, whatever its kind and result.
fn origin_calls(text: &str) -> f64 {
    ["cold", "stale", "strict", "replay"]
        .iter()
        .flat_map(|op| ["ok", "error"].map(|result| origin_ops(text, op, result)))
        .sum()
}

fn origin_errors(text: &str) -> f64 {
    ["cold", "stale", "strict", "replay"]
        .iter()
        .map(|op| origin_ops(text, op, "error"))
        .sum()
}

/// `rls_decisions_by_source_total` of `source` (`local` or `origin`).
fn decisions_by_source(text: &str, source: &str) -> f64 {
    count(text, "rls_decisions_by_source_total", &[("source", source)])
}

fn origin_summary(text: &str) -> String {
    let mut parts = Vec::new();
    for op in ["cold", "stale", "strict", "replay"] {
        let (ok, error) = (origin_ops(text, op, "ok"), origin_ops(text, op, "error"));
        parts.push(format!("{op} {ok}/{error}"));
    }
    format!(
        "origin ops ok/error: {}; decisions local {} origin {}; pending {}; circuit {}",
        parts.join(", "),
        decisions_by_source(text, "local"),
        decisions_by_source(text, "origin"),
        count(text, "rls_replay_pending_cells", &[]),
        count(text, "rls_origin_circuit_state", &[]),
    )
}

/// [`wait_replayed`] as most tests wait: 300 ms without a replay, within 10 s.
fn replayed(service: &Service) -> String {
    wait_replayed(service, Duration::from_millis(300), Duration::from_secs(10))
}

/// Polls /metrics until no cell waits for replay, the circuit is closed, and no replay ran
/// for `quiet` (so none is in flight); returns the last text.
fn wait_replayed(service: &Service, quiet: Duration, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    let mut settled: Option<f64> = None;
    loop {
        let text = service.metrics();
        let pending = count(&text, "rls_replay_pending_cells", &[]);
        let circuit = count(&text, "rls_origin_circuit_state", &[]);
        let replays = origin_ops(&text, "replay", "ok") + origin_ops(&text, "replay", "error");
        let idle = pending == 0.0 && circuit == 0.0;
        if idle && settled == Some(replays) {
            return text;
        }
        settled = idle.then_some(replays);
        if Instant::now() > deadline {
            panic!(
                "replay did not settle within {timeout:?}: {}\n--- service log (tail) ---\n{}",
                origin_summary(&text),
                service.log_tail(30)
            );
        }
        std::thread::sleep(quiet);
    }
}

// ---------------------------------------------------------------------------------------
// 1. Convergence
// ---------------------------------------------------------------------------------------

/// Three processes share one Redis and one limit; requests arrive round-robin at twice the
/// limit. Each full fixed window admits between 95 % and 110 % of the limit in total.
///
/// Parameters: limit 100 per 2 s (`unit: second, unit_multiplier: 2`), 100 requests/s in
/// total (2× the limit), open loop, one key; 5 full windows measured (the partial first and
/// last are skipped); `--replay-interval 50ms --freshness 1s`. A request is counted in the
/// window the service decided it in (derived from its `duration_until_reset`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_redis_converge_within_ten_percent() {
    const LIMIT: u64 = 100;
    const WINDOW_MS: u64 = 2_000;
    const FULL_WINDOWS: u64 = 5;
    const PROCESSES: usize = 3;
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("converge");
    let (_dir, path) =
        support::limits_file(&support::one_rule("converge", "tenant", "second", 2, LIMIT));
    let args = redis_args(
        LOCAL_REDIS_URL,
        &prefix,
        // This test measures convergence through a healthy Redis: a strict read that times
        // out falls back to a local decision (the designed degradation, tested in
        // `lifecycle`), and on a machine loaded by builds the 50 ms default read deadline is
        // missed now and then, which is not what this test is about.
        &[
            "--replay-interval",
            "50ms",
            "--freshness",
            "1s",
            "--redis-read-timeout",
            "1s",
        ],
    );
    let services: Vec<Service> = (0..PROCESSES)
        .map(|_| Service::start(&path, &args))
        .collect();
    let mut clients = Vec::new();
    for service in &services {
        clients.push(grpc::rls_client(service.grpc_addr).await);
    }

    let rate = 2.0 * LIMIT as f64 * 1_000.0 / WINDOW_MS as f64;
    let (first_full, duration) = full_windows_from_now(WINDOW_MS, FULL_WINDOWS);
    println!(
        "convergence: {PROCESSES} processes, limit {LIMIT} per {WINDOW_MS} ms, {rate} requests/s \
         round-robin for {duration:?}, windows {first_full}..{} measured",
        first_full + FULL_WINDOWS - 1
    );
    let sent = load::paced(clients, rate, duration, |_| {
        hit("converge", "tenant", "acme")
    })
    .await;

    load::assert_no_grpc_errors(&sent, "the convergence run");

    let mut tally = WindowTally::new(WINDOW_MS, PROCESSES);
    let mut disagreements = 0;
    for s in &sent {
        let sequence = tally.record(s.target, s).expect("one status per answer");
        if sequence != s.sent_ms / WINDOW_MS {
            disagreements += 1;
        }
    }
    println!(
        "{} requests; {disagreements} decided in another window than the one they were sent in",
        sent.len()
    );
    for (i, service) in services.iter().enumerate() {
        println!("process {i}: {}", origin_summary(&service.metrics()));
    }
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
    tally.assert_full_windows(first_full..first_full + FULL_WINDOWS, LIMIT, 0.95..=1.10);
}

// ---------------------------------------------------------------------------------------
// 2. The warm path
// ---------------------------------------------------------------------------------------

/// A hot key well under its limit: after the first (cold) decision, requests are decided from
/// memory; Redis only sees the periodic replay. Measured with `INFO commandstats` on a
/// dedicated Redis and cross-checked against `rls_origin_operations_total`.
///
/// Parameters: limit 1,000,000 per day, N = 3,000 requests from 4 concurrent callers,
/// production defaults (`--replay-interval 100ms`, `--freshness 3s`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_key_decides_without_touching_redis() {
    const N: usize = 3_000;
    const CALLERS: usize = 4;
    const LIMIT: u64 = 1_000_000;
    let redis = redis_testing::PlainRedis::start_or_fail();
    let url = redis.url();
    support::avoid_window_boundary(DAY, Duration::from_secs(60));
    let (_dir, path) = support::limits_file(&support::one_rule("warm", "hot", "day", 1, LIMIT));
    let service = Service::start(&path, &["--redis-url", &url]);
    let mut client = grpc::rls_client(service.grpc_addr).await;

    // The first decision is cold: it reads the current and the previous cell.
    let first = one_status(&mut client, hit("warm", "hot", "k")).await;
    assert_eq!(code(&first), Code::Ok, "{first:?}");
    replayed(&service);

    let calls_before = redis_admin::command_calls(&url);
    let metrics_before = service.metrics();
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let mut client = client.clone();
        callers.spawn(async move {
            let mut ok = 0usize;
            for _ in 0..N / CALLERS {
                let status = one_status(&mut client, hit("warm", "hot", "k")).await;
                assert_eq!(code(&status), Code::Ok, "far under the limit: {status:?}");
                ok += 1;
            }
            ok
        });
    }
    let mut answered = 0;
    while let Some(done) = callers.join_next().await {
        answered += done.expect("a caller task panicked");
    }
    let elapsed = started.elapsed();
    assert_eq!(answered, N);
    let metrics_after = replayed(&service);
    let calls_after = redis_admin::command_calls(&url);

    let delta = |name: &str| {
        calls_after.get(name).copied().unwrap_or(0) - calls_before.get(name).copied().unwrap_or(0)
    };
    // The replay script reads its hash with one HGETALL of its own (refund fields apart from
    // hits fields), which Redis counts as a command too: not a round trip.
    let (evalsha, script) = (delta("evalsha"), delta("script|load"));
    let hgetall = delta("hgetall") - evalsha;
    // One hot key: each replay round trip carries one EVALSHA (its cell); a read is one
    // HGETALL; the first replay may load the script once.
    let round_trips = hgetall + evalsha;
    let commands = round_trips + script;
    let per_request = round_trips as f64 / N as f64;
    let origin_round_trips = origin_calls(&metrics_after) - origin_calls(&metrics_before);
    println!(
        "warm key: {N} requests in {elapsed:?}; Redis saw HGETALL {hgetall}, EVALSHA {evalsha}, \
         SCRIPT LOAD {script}: {round_trips} round trips ({per_request:.4} per request), \
         {commands} commands ({:.4} per request); the service counted {origin_round_trips} origin calls",
        commands as f64 / N as f64
    );
    println!("service: {}", origin_summary(&metrics_after));

    assert!(
        per_request < 0.1,
        "a warm key must not touch Redis per request: {per_request:.4} round trips per request"
    );
    assert_eq!(
        origin_round_trips, round_trips as f64,
        "rls_origin_operations_total must match the round trips Redis saw"
    );
    let get = hgetall;
    let local = decisions_by_source(&metrics_after, "local")
        - decisions_by_source(&metrics_before, "local");
    assert!(
        local >= (N as u64 - get) as f64,
        "decisions without an origin read ({local}) must be all but those that read ({get})"
    );
    // Nothing was lost on the way: Redis holds every accepted request.
    let stored: u64 = redis_admin::counts_under(&url, "rls:")
        .iter()
        .map(|(_, count)| count)
        .sum();
    assert_eq!(stored, N as u64 + 1, "Redis holds every accepted request");
}

// ---------------------------------------------------------------------------------------
// 3. Outage
// ---------------------------------------------------------------------------------------

/// Redis vanishes for 3 s (a proxy in front of it resets every connection and blackholes
/// new ones) under steady load: no gRPC error, every request is answered OK, the origin
/// errors and the circuit opens; once it is back the pending replay catches up, and a new
/// process sees exactly the work accepted before, during and after the outage.
///
/// Parameters: limit 1,000,000 per day, 5 keys round-robin at 200 requests/s for 9 s, the link
/// cut from 3 s to 6 s; `--freshness 500ms` (so cells go stale during the cut), replay every
/// 100 ms (the default).
///
/// The exact count can only be off if the cut lands between Redis applying a replay and its
/// reply reaching the service (a fraction of a millisecond per 100 ms): that replay is then
/// sent again, and it must then count once: `a_replay_that_times_out_is_not_counted_twice`
/// checks that case deterministically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_causes_no_grpc_errors_and_loses_nothing() {
    const LIMIT: u64 = 1_000_000;
    const KEYS: [&str; 5] = ["u0", "u1", "u2", "u3", "u4"];
    const RATE: f64 = 200.0;
    let (redis, proxy, prefix) = proxied_redis("outage");
    support::avoid_window_boundary(DAY, Duration::from_secs(60));
    let (_dir, path) = support::limits_file(&support::one_rule("outage", "user", "day", 1, LIMIT));
    let through_proxy = proxy.redis_url();
    let service = Service::start(
        &path,
        &redis_args(&through_proxy, &prefix, &["--freshness", "500ms"]),
    );
    let load = load::in_background(&service, RATE, Duration::from_secs(9), |i| {
        hit("outage", "user", KEYS[i % KEYS.len()])
    })
    .await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_cut = service.metrics();
    println!("before the cut: {}", origin_summary(&before_cut));
    let cut_ms = now_ms();
    proxy.cut(Cut::Blackhole);
    let mut worst_circuit = 0.0f64;
    let mut circuit_timeline = Vec::new();
    while now_ms() < cut_ms + 3_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let text = service.metrics();
        let circuit = count(&text, "rls_origin_circuit_state", &[]);
        worst_circuit = worst_circuit.max(circuit);
        circuit_timeline.push(circuit as u8);
    }
    let during = service.metrics();
    proxy.restore();
    let restore_ms = now_ms();
    println!("end of the cut: {}", origin_summary(&during));
    println!(
        "circuit every 100 ms during the cut (0 closed, 1 half-open, 2 open): {circuit_timeline:?}"
    );

    let sent = load.await.expect("the load task");
    let caught_up_at = Instant::now();
    let settled = wait_replayed(
        &service,
        Duration::from_millis(300),
        Duration::from_secs(25),
    );
    println!(
        "replay caught up {:?} after the load ended: {}",
        caught_up_at.elapsed(),
        origin_summary(&settled)
    );

    load::assert_no_grpc_errors(&sent, "the outage test");
    let mut accepted: BTreeMap<&str, u64> = BTreeMap::new();
    let mut not_ok = 0;
    for s in &sent {
        let status = s.first_status().expect("one status per answer");
        if code(status) == Code::Ok {
            *accepted.entry(KEYS[s.index % KEYS.len()]).or_default() += 1;
        } else {
            not_ok += 1;
        }
    }
    let in_outage: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.sent_ms >= cut_ms && s.sent_ms < restore_ms)
        .collect();
    let before: Vec<&Sent> = sent.iter().filter(|s| s.sent_ms < cut_ms).collect();
    let after: Vec<&Sent> = sent.iter().filter(|s| s.sent_ms >= restore_ms).collect();
    let total_accepted: u64 = accepted.values().sum();
    println!(
        "{} requests, {total_accepted} accepted ({} before, {} during, {} after the cut); per key {accepted:?}",
        sent.len(),
        before.len(),
        in_outage.len(),
        after.len()
    );
    println!(
        "latency before the cut: {}",
        load::latency_summary(before.iter().copied())
    );
    println!(
        "latency during the cut: {}",
        load::latency_summary(in_outage.iter().copied())
    );
    println!(
        "latency after the cut:  {}",
        load::latency_summary(after.iter().copied())
    );
    assert_eq!(not_ok, 0, "every request is far under the limit: all OK");
    assert!(
        in_outage.len() > 400,
        "decisions must go on during the outage: {} answered",
        in_outage.len()
    );
    let slowest = in_outage
        .iter()
        .map(|s| s.latency())
        .max()
        .unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(2),
        "a dead origin must not hold decisions: slowest {slowest:?}"
    );
    let new_errors = origin_errors(&during) - origin_errors(&before_cut);
    assert!(
        new_errors > 0.0,
        "the cut must show as origin errors: {}",
        origin_summary(&during)
    );
    assert_eq!(
        worst_circuit, 2.0,
        "the circuit must open during the outage (timeline {circuit_timeline:?})"
    );
    assert!(
        origin_ops(&settled, "replay", "ok") > origin_ops(&during, "replay", "ok"),
        "replays must succeed again after the restore: {}",
        origin_summary(&settled)
    );

    // Redis itself holds every accepted request, once.
    let stored: u64 = redis_admin::counts_under(&redis.url(), &prefix)
        .iter()
        .map(|(_, count)| count)
        .sum();
    println!("Redis holds {stored} under the prefix; {total_accepted} were accepted");

    // A new process, straight on Redis, sees it all.
    let fresh = Service::start(
        &path,
        &["--redis-url", &redis.url(), "--redis-prefix", &prefix],
    );
    let mut fresh_client = grpc::rls_client(fresh.grpc_addr).await;
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for key in KEYS {
        seen.insert(
            key,
            seen_count(&mut fresh_client, "outage", "user", key, LIMIT).await,
        );
    }
    println!("a new process sees per key {seen:?}");
    assert_eq!(
        seen, accepted,
        "a new process must see exactly the accepted work (Redis holds {stored})"
    );
    assert_eq!(
        stored, total_accepted,
        "Redis holds every accepted request once"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Start-up without Redis
// ---------------------------------------------------------------------------------------

/// Redis down at start-up, twice: a port where nothing listens (connections refused) and a
/// blackhole (connections hang). The service starts, is healthy, answers, and still limits
/// from local counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_works_with_redis_down() {
    const LIMIT: u64 = 3;
    support::avoid_window_boundary(DAY, Duration::from_secs(30));
    let (_dir, path) = support::limits_file(&support::one_rule("down", "user", "day", 1, LIMIT));
    let nowhere = support::free_port();
    let blackhole = Proxy::start(support::local_addr(nowhere));
    blackhole.cut(Cut::Blackhole);
    let cases = [
        ("refused", format!("redis://127.0.0.1:{nowhere}")),
        ("blackholed", blackhole.redis_url()),
    ];
    for (what, url) in cases {
        let started = Instant::now();
        let service = Service::start(&path, &["--redis-url", &url]);
        let startup = started.elapsed();
        let health = service.admin_get("/healthz");
        assert_eq!(
            health.status,
            200,
            "{what}: /healthz {}",
            health.body_text()
        );
        let mut health_client = grpc::health_client(service.grpc_addr).await;
        let serving = health_client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{what}: gRPC health check failed: {e:?}"))
            .into_inner();
        assert_eq!(serving.status, ServingStatus::Serving as i32, "{what}");

        let mut client = grpc::rls_client(service.grpc_addr).await;
        let mut codes = Vec::new();
        let mut slowest = Duration::ZERO;
        for _ in 0..=LIMIT {
            let asked = Instant::now();
            let status = one_status(&mut client, hit("down", "user", "alice")).await;
            slowest = slowest.max(asked.elapsed());
            codes.push(code(&status));
        }
        let other = one_status(&mut client, hit("down", "user", "bob")).await;
        let text = service.metrics();
        println!(
            "{what}: healthy after {startup:?}; answers {codes:?}, slowest {slowest:?}; {}",
            origin_summary(&text)
        );
        let mut expected = vec![Code::Ok; LIMIT as usize];
        expected.push(Code::OverLimit);
        assert_eq!(codes, expected, "{what}: local counts still limit");
        assert_eq!(
            code(&other),
            Code::Ok,
            "{what}: another key is its own counter"
        );
        assert!(
            slowest < Duration::from_secs(1),
            "{what}: a dead origin must not hold decisions: slowest {slowest:?}"
        );
        assert!(
            origin_ops(&text, "cold", "error") >= 1.0,
            "{what}: the failed cold reads are counted: {}",
            origin_summary(&text)
        );
    }
}

// ---------------------------------------------------------------------------------------
// 5. Redis Cluster
// ---------------------------------------------------------------------------------------

/// A 3-node Redis Cluster as the origin of two processes: A lists the three nodes in
/// `--redis-url`, B gives one seed with `--redis-cluster`. A's work on 8 keys (spread over
/// the nodes) is seen by B; B takes one key to its limit and is denied at exactly the right
/// count; then A, whose copy went stale, is denied too.
///
/// Parameters: limit 40 per day; `--replay-interval 50ms --freshness 500ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_works_as_the_origin() {
    const LIMIT: u64 = 40;
    const KEYS: [&str; 8] = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"];
    let cluster = redis_testing::RedisCluster::start_or_fail(3);
    support::avoid_window_boundary(DAY, Duration::from_secs(60));
    let urls = cluster.urls();
    let prefix = redis_admin::unique_prefix("cluster");
    let (_dir, path) = support::limits_file(&support::one_rule("cluster", "user", "day", 1, LIMIT));
    let common = [
        "--redis-prefix",
        &prefix,
        "--replay-interval",
        "50ms",
        "--freshness",
        "500ms",
    ];
    let all_nodes = urls.join(",");
    let mut a_args = vec!["--redis-url", all_nodes.as_str()];
    a_args.extend(common);
    let mut b_args = vec!["--redis-url", urls[0].as_str(), "--redis-cluster"];
    b_args.extend(common);
    let a = Service::start(&path, &a_args);
    let b = Service::start(&path, &b_args);
    let mut client_a = grpc::rls_client(a.grpc_addr).await;
    let mut client_b = grpc::rls_client(b.grpc_addr).await;

    // A consumes 3, 4, …, 9 on c0..c6 and 30 on c7.
    let consumed: Vec<u64> = (0..KEYS.len() as u64)
        .map(|i| if i == 7 { 30 } else { i + 3 })
        .collect();
    for (key, &count) in KEYS.iter().zip(&consumed) {
        for n in 1..=count {
            let status = one_status(&mut client_a, hit("cluster", "user", key)).await;
            assert_eq!(code(&status), Code::Ok, "A, {key} #{n}: {status:?}");
            assert_eq!(
                u64::from(status.limit_remaining),
                LIMIT - n,
                "A, {key} #{n}"
            );
        }
    }
    let a_text = wait_replayed(&a, Duration::from_millis(200), Duration::from_secs(10));
    println!("A after its work: {}", origin_summary(&a_text));

    // The keys are in the cluster, spread over its nodes, with A's counts.
    let mut per_node = Vec::new();
    let mut stored = 0;
    for url in &urls {
        let counts = redis_admin::counts_under(url, &prefix);
        per_node.push(counts.len());
        stored += counts.iter().map(|(_, c)| c).sum::<u64>();
    }
    println!("cluster keys per node {per_node:?}, {stored} counted in all");
    assert_eq!(
        per_node.iter().sum::<usize>(),
        KEYS.len(),
        "one key per counter"
    );
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "8 counters should land on more than one node: {per_node:?}"
    );
    assert_eq!(stored, consumed.iter().sum::<u64>());

    // B sees A's totals.
    for (key, &count) in KEYS.iter().zip(&consumed) {
        let seen = seen_count(&mut client_b, "cluster", "user", key, LIMIT).await;
        assert_eq!(seen, count, "B sees A's work on {key}");
    }

    // B takes c7 from 30 to the limit: 10 accepted, the 11th denied.
    let mut accepted_by_b = 0;
    let mut denied_at = None;
    for n in 1..=15 {
        let status = one_status(&mut client_b, hit("cluster", "user", "c7")).await;
        if code(&status) == Code::OverLimit {
            denied_at = Some(n);
            break;
        }
        accepted_by_b += 1;
    }
    println!("B on c7: {accepted_by_b} accepted, denied at request {denied_at:?}");
    assert_eq!(
        (accepted_by_b, denied_at),
        (LIMIT - 30, Some(LIMIT - 30 + 1)),
        "B is denied exactly when A's 30 and its own reach {LIMIT}"
    );
    let b_text = wait_replayed(&b, Duration::from_millis(200), Duration::from_secs(10));
    println!("B after its work: {}", origin_summary(&b_text));

    // A's copy of c7 (30) goes stale; its next decision reads the cluster and is denied.
    std::thread::sleep(Duration::from_millis(700));
    let a_c7 = one_status(&mut client_a, hit("cluster", "user", "c7")).await;
    assert_eq!(
        code(&a_c7),
        Code::OverLimit,
        "A must see B's work once its copy is stale: {a_c7:?}"
    );
    let a_c0 = one_status(&mut client_a, hit("cluster", "user", "c0")).await;
    assert_eq!(code(&a_c0), Code::Ok, "{a_c0:?}");
    assert_eq!(u64::from(a_c0.limit_remaining), LIMIT - consumed[0] - 1);

    let a_text = a.metrics();
    let b_text = b.metrics();
    println!("A at the end: {}", origin_summary(&a_text));
    println!("B at the end: {}", origin_summary(&b_text));
    assert_eq!(
        origin_errors(&a_text),
        0.0,
        "A: {}",
        origin_summary(&a_text)
    );
    assert_eq!(
        origin_errors(&b_text),
        0.0,
        "B: {}",
        origin_summary(&b_text)
    );
}

// ---------------------------------------------------------------------------------------
// 6. Shutdown
// ---------------------------------------------------------------------------------------

/// With replay effectively off (`--replay-interval 1h`), accepted work waits in memory; SIGTERM
/// replays it before the process exits 0, and a new process sees all of it.
///
/// Parameters: limit 1,000 per day, K = 25 requests on two keys (15 + 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_replays_pending_cells() {
    const LIMIT: u64 = 1_000;
    const WORK: [(&str, u64); 2] = [("alice", 15), ("bob", 10)];
    redis_admin::require_local_redis();
    support::avoid_window_boundary(DAY, Duration::from_secs(30));
    let prefix = redis_admin::unique_prefix("sigterm");
    let (_dir, path) = support::limits_file(&support::one_rule("term", "user", "day", 1, LIMIT));
    let args = redis_args(LOCAL_REDIS_URL, &prefix, &["--replay-interval", "1h"]);
    let mut service = Service::start(&path, &args);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for (user, count) in WORK {
        for _ in 0..count {
            let status = one_status(&mut client, hit("term", "user", user)).await;
            assert_eq!(code(&status), Code::Ok, "{user}: {status:?}");
        }
    }
    let k: u64 = WORK.iter().map(|(_, n)| n).sum();
    let text = service.metrics();
    println!("before SIGTERM ({k} accepted): {}", origin_summary(&text));
    assert_eq!(
        count(&text, "rls_replay_pending_cells", &[]),
        WORK.len() as f64,
        "both cells wait for replay"
    );
    let before: u64 = redis_admin::counts_under(LOCAL_REDIS_URL, &prefix)
        .iter()
        .map(|(_, c)| c)
        .sum();
    assert_eq!(before, 0, "nothing is replayed before the shutdown");

    drop(client);
    let took = service.terminate_cleanly(Duration::from_secs(15));
    println!("exited cleanly {took:?} after SIGTERM");

    let stored = redis_admin::counts_under(LOCAL_REDIS_URL, &prefix);
    let stored_total: u64 = stored.iter().map(|(_, c)| c).sum();
    println!(
        "Redis holds {stored_total} in {} keys after the shutdown",
        stored.len()
    );

    let fresh = Service::start(&path, &args);
    let mut fresh_client = grpc::rls_client(fresh.grpc_addr).await;
    for (user, count) in WORK {
        let seen = seen_count(&mut fresh_client, "term", "user", user, LIMIT).await;
        println!("a new process sees {seen} for {user} ({count} accepted)");
        assert_eq!(
            seen, count,
            "{user}: the shutdown replayed every accepted request"
        );
    }
    assert_eq!(stored_total, k, "Redis holds the K accepted requests");
    drop(fresh);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

/// SIGTERM just after Redis became unreachable (a partition: the open connection is frozen,
/// new ones hang; the circuit is still closed): the final replay keeps trying for
/// `--final-replay-timeout` (here 2 s), each attempt bounded by `--redis-replay-timeout`
/// (1 s), then gives up, and the process still exits 0, promptly, instead of hanging on a
/// dead connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_redis_down_exits_promptly() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let proxy = Proxy::start(support::local_addr(redis.server.port));
    let (_dir, path) = support::limits_file(&support::one_rule("gone", "user", "day", 1, 1_000));
    let url = proxy.redis_url();
    let mut service = Service::start(
        &path,
        &[
            "--redis-url",
            &url,
            "--replay-interval",
            "1h",
            "--final-replay-timeout",
            "2s",
        ],
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for _ in 0..5 {
        let status = one_status(&mut client, hit("gone", "user", "alice")).await;
        assert_eq!(code(&status), Code::Ok, "{status:?}");
    }
    drop(client);
    let before = service.metrics();
    assert_eq!(
        count(&before, "rls_origin_circuit_state", &[]),
        0.0,
        "Redis answered so far: {}",
        origin_summary(&before)
    );
    proxy.cut(Cut::Freeze);
    let took = service.terminate_cleanly(Duration::from_secs(10));
    println!("Redis partitioned at SIGTERM: exited cleanly {took:?} after the signal");
    assert!(
        took < Duration::from_secs(5),
        "the final replay must give up at --final-replay-timeout (2 s): took {took:?}"
    );
    let log = service.log_tail(30);
    assert!(
        log.contains("replay failed"),
        "the lost final replay must be logged\n--- log ---\n{log}"
    );
}

// ---------------------------------------------------------------------------------------
// Regressions
// ---------------------------------------------------------------------------------------

/// Redis stalls writes for 2.5 s (`CLIENT PAUSE 2500 WRITE`: what Redis itself does during a
/// `FAILOVER`, and what a slow fork or a latency spike looks like). A replay that outlives
/// `--redis-replay-timeout` (1 s) is sent again while Redis still holds the first one and
/// applies it when the stall ends. Replay publishes cumulative per-process counts merged with
/// `max`, so the work must still be counted exactly once.
///
/// Parameters: production defaults (`--replay-interval 100ms`, `--redis-replay-timeout 1s`);
/// 10 requests before the stall, 10 during; limit 1,000 per day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_times_out_is_not_counted_twice() {
    const LIMIT: u64 = 1_000;
    let redis = redis_testing::PlainRedis::start_or_fail();
    support::avoid_window_boundary(DAY, Duration::from_secs(30));
    let (_dir, path) = support::limits_file(&support::one_rule("stall", "user", "day", 1, LIMIT));
    let service = Service::start(&path, &["--redis-url", &redis.url()]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for _ in 0..10 {
        let status = one_status(&mut client, hit("stall", "user", "alice")).await;
        assert_eq!(code(&status), Code::Ok, "{status:?}");
    }
    replayed(&service);

    let mut admin = redis_admin::connect(&redis.url());
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2_500)
        .arg("WRITE")
        .query(&mut admin)
        .expect("CLIENT PAUSE 2500 WRITE");
    let stalled = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let asked = Instant::now();
        let status = one_status(&mut client, hit("stall", "user", "alice")).await;
        slowest = slowest.max(asked.elapsed());
        assert_eq!(code(&status), Code::Ok, "{status:?}");
    }
    // A write on the admin connection waits out the pause: once it is answered, the stall
    // is over and Redis applies what it held.
    let () = redis::cmd("SET")
        .arg("rls-test:stall-over")
        .arg(1)
        .query(&mut admin)
        .expect("a write after the pause");
    println!("the stall ended {:?} after it began", stalled.elapsed());
    let settled = wait_replayed(
        &service,
        Duration::from_millis(300),
        Duration::from_secs(20),
    );
    let stored: u64 = redis_admin::counts_under(&redis.url(), "rls:")
        .iter()
        .map(|(_, c)| c)
        .sum();
    println!(
        "20 accepted (10 during a 2.5 s write stall, slowest answer {slowest:?}); Redis holds {stored}; {}",
        origin_summary(&settled)
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a stalled Redis must not hold decisions: {slowest:?}"
    );
    let fresh = Service::start(&path, &["--redis-url", &redis.url()]);
    let mut fresh_client = grpc::rls_client(fresh.grpc_addr).await;
    let seen = seen_count(&mut fresh_client, "stall", "user", "alice", LIMIT).await;
    assert_eq!(
        (stored, seen),
        (20, 20),
        "replay must be idempotent: a replay that timed out but reached Redis, sent again, \
         must not count twice"
    );
}

/// `rls_decisions_by_source_total{source="origin"}` is for decisions based on an origin read.
/// With Redis unreachable no read ever succeeds, so every decision is local: a failed cold
/// read must not credit the decision to the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_credited_to_the_origin_only_when_it_answered() {
    let (_dir, path) = support::limits_file(&support::one_rule("credit", "user", "day", 1, 1_000));
    let url = format!("redis://127.0.0.1:{}", support::free_port());
    let service = Service::start(&path, &["--redis-url", &url]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let users = ["a", "b", "c"];
    for user in users {
        for _ in 0..2 {
            let status = one_status(&mut client, hit("credit", "user", user)).await;
            assert_eq!(code(&status), Code::Ok, "{status:?}");
        }
    }
    let text = service.metrics();
    println!("Redis refused: {}", origin_summary(&text));
    let succeeded: f64 = ["cold", "stale", "strict", "replay"]
        .iter()
        .map(|op| origin_ops(&text, op, "ok"))
        .sum();
    assert_eq!(succeeded, 0.0, "nothing listens on {url}");
    let origin = decisions_by_source(&text, "origin");
    let local = decisions_by_source(&text, "local");
    assert_eq!(
        (local, origin),
        (6.0, 0.0),
        "a decision counts as origin-based only when an origin read succeeded"
    );
}
