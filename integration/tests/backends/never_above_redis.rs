//! `guarantee: never_above` across the processes of a region: service processes sharing one
//! Redis spend rights taken from it, so the region never admits more than one process
//! deciding alone would, whatever process each call reaches. Each test has its defect to
//! plant (`GCOUNTER_PLANT=never-above-unshared`: decided from each process's own counts),
//! under which it goes red.

use gcounter_rls_integration as support;

use std::time::Duration;

use gcounter_redis::testing as redis_testing;
use support::grpc;
use support::load;
use support::{Service, bounded};

const PROCESSES: usize = 3;

/// `PROCESSES` services on one Redis, with `limits` and `extra` flags, each once it took a
/// right from Redis.
async fn region(limits: &str, redis: &str, extra: &[&str]) -> (tempfile::TempDir, Vec<Service>) {
    let (dir, path) = support::limits_file(&bounded::with_ready(limits));
    let mut args = vec!["--redis-url", redis];
    args.extend_from_slice(extra);
    let mut services = Vec::new();
    for process in 0..PROCESSES {
        let service = Service::start(&path, &args);
        bounded::await_first_right(&service, &format!("process {process}")).await;
        services.push(service);
    }
    (dir, services)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_of_a_region_admit_exactly_the_limit_of_a_fixed_window() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 300, guarantee: never_above}\n";
    let (_dir, services) = region(limits, &redis.url(), &["--windows", "fixed"]).await;
    bounded::assert_exactly_the_limit_of_a_fixed_window(&services).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_of_a_region_never_go_above_the_sliding_window_rule() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let (_dir, services) = region(&bounded::sliding_limits(), &redis.url(), &[]).await;
    bounded::assert_never_above_the_sliding_rule(&services, 3).await;
}

const WINDOW_MS: u64 = bounded::SLIDING_WINDOW_MS;
const SLIDING_LIMIT: u64 = bounded::SLIDING_LIMIT;

const HIT: (&str, &str, &str) = ("bounded", "api_key", "k");

/// A process killed while it holds rights: nobody spends them (they count as spent), and
/// they are back in full two windows later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_processs_rights_are_back_within_two_windows() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let (_dir, services) = region(&bounded::sliding_limits(), &redis.url(), &[]).await;
    let cell = support::into_fresh_window(Duration::from_millis(WINDOW_MS)) / WINDOW_MS;
    let mut doomed = grpc::rls_client(services[0].grpc_addr).await;
    let mut survivor = grpc::rls_client(services[1].grpc_addr).await;
    // The first process takes in growing asks (1, 2, 4, 8, …) and holds what it has not
    // spent of the last one when it is killed.
    let spent = bounded::burst(&mut doomed, 12, HIT).await;
    assert_eq!(spent, 12);
    services[0].send_signal("KILL");
    let others = bounded::burst(&mut survivor, 2 * SLIDING_LIMIT as usize, HIT).await;
    assert!(
        spent + others < SLIDING_LIMIT as usize,
        "the killed process's rights were spent again: {spent} + {others}"
    );
    // Two windows later its takes no longer weigh: the whole limit is there again.
    support::sleep_until_ms((cell + 2) * WINDOW_MS + 20);
    let back = bounded::burst(&mut survivor, 2 * SLIDING_LIMIT as usize, HIT).await;
    assert_eq!(back, SLIDING_LIMIT as usize);
}

/// Redis down: each process spends the rights it holds, then refuses; every call is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_processes_spend_what_they_hold_then_refuse() {
    let mut redis = redis_testing::PlainRedis::start_or_fail();
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1000, guarantee: never_above}\n";
    let (_dir, services) = region(limits, &redis.url(), &["--windows", "fixed"]).await;
    support::stay_in_one_minute(Duration::from_secs(20));
    let mut client = grpc::rls_client(services[0].grpc_addr).await;
    let before = bounded::burst(&mut client, 30, HIT).await;
    assert_eq!(before, 30);
    redis.server.kill();
    let clients = vec![
        grpc::rls_client(services[0].grpc_addr).await,
        grpc::rls_client(services[1].grpc_addr).await,
    ];
    let sent = load::paced(clients, 100.0, Duration::from_secs(3), |_| {
        grpc::hit("bounded", "api_key", "k")
    })
    .await;
    load::assert_no_grpc_errors(&sent, "calls with Redis down");
    let during = bounded::admitted(&sent);
    // What the first process held (at most its last take) and nothing from the second.
    assert!(
        during.len() < 30,
        "{} admitted with Redis down",
        during.len()
    );
    let late = during
        .iter()
        .filter(|a| a.0 > sent[0].sent_ms + 1_000)
        .count();
    assert_eq!(late, 0, "admitted after the rights held were spent");
}

/// A `never_above` window not longer than twice `--clock-skew` would admit nothing where
/// rights are spent: the service refuses to start, naming the limit's file and line.
#[test]
fn a_window_within_twice_the_clock_skew_is_refused_at_start() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 10, guarantee: never_above}\n";
    let (_dir, path) = support::limits_file(limits);
    let output = std::process::Command::new(support::binary())
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--redis-url", &redis.url(), "--clock-skew", "500ms"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run gcounter-rls");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started: {stderr}");
    for needle in [
        &format!("{}:3: bounded.api_key", path.display()),
        "window of 1s",
        "--clock-skew 500ms",
    ] {
        support::assert_mentions(&stderr, needle, "the refusal");
    }
}
