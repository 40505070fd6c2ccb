//! The circuit breaker in front of Redis, through the real binary: refused connections open
//! it; once Redis answers again it closes within the documented "at most about 10 s" (the
//! longest wait between probes), while requests go on being answered.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::Service;
use support::grpc::{self, hit};
use support::load;
use support::metrics::count;
use support::proxy::{Cut, proxied_redis};
use support::redis_admin::redis_args;

/// The documented bound (10 s, the longest wait between probes) and 2 s for a busy machine.
const CLOSES_WITHIN: Duration = Duration::from_secs(12);

fn circuit_state(service: &Service) -> f64 {
    count(&service.metrics(), "rls_origin_circuit_state", &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_closes_within_its_longest_probe_wait_once_redis_is_back() {
    let (_redis, proxy, prefix) = proxied_redis("circuit");
    support::avoid_window_boundary(Duration::from_secs(86_400), Duration::from_secs(120));
    let (_dir, path) =
        support::limits_file(&support::one_rule("circuit", "user", "day", 1, 1_000_000));
    let url = proxy.redis_url();
    // A probe answered later than the read timeout counts as failed: 500 ms, so that a busy
    // machine's latency is not taken for a Redis still down.
    let service = Service::start(
        &path,
        &redis_args(&url, &prefix, &["--redis-read-timeout", "500ms"]),
    );
    let client = grpc::rls_client(service.grpc_addr).await;
    // Redis answered before the cut (the read at start, or a cold read), and the log says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut warm = client.clone();
    while !service
        .log_tail(200)
        .contains("the regional origin (redis) reached")
    {
        assert!(
            Instant::now() < deadline,
            "Redis not reached:\n{}",
            service.log_tail(50)
        );
        let _ = warm.should_rate_limit(hit("circuit", "user", "warm")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.cut(Cut::Refuse);
    // 8 s of refused cell reads (every request a new key): the circuit opens, and its failed
    // probes grow the wait between them (1, 2, 4 s ...).
    let outage = load::paced(vec![client.clone()], 50.0, Duration::from_secs(8), |i| {
        hit("circuit", "user", &format!("down-{i}"))
    })
    .await;
    load::assert_no_grpc_errors(&outage, "requests during the outage");
    assert_eq!(circuit_state(&service), 2.0, "open after the outage");

    proxy.restore();
    let restored = Instant::now();
    // Requests go on (the probes ride on them and on the replay).
    let recovery = tokio::spawn(load::paced(vec![client], 20.0, CLOSES_WITHIN, |i| {
        hit("circuit", "user", &format!("back-{i}"))
    }));
    service.wait_until(
        CLOSES_WITHIN,
        "the circuit closed once Redis answered",
        || {
            let state = circuit_state(&service);
            (state == 0.0)
                .then_some(())
                .ok_or(format!("rls_origin_circuit_state {state}"))
        },
    );
    println!("closed {:?} after Redis came back", restored.elapsed());
    let sent = recovery.await.expect("the recovery load");
    load::assert_no_grpc_errors(&sent, "requests while the circuit closed");

    // The log says it: reached at start, lost when the circuit opened, reached again.
    let log = service.log_tail(5_000);
    let first = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{log}"))
    };
    let reached = first("the regional origin (redis) reached");
    let lost = first("the regional origin (redis) lost");
    let again = first("the regional origin (redis) reached again");
    assert!(reached < lost && lost < again, "out of order:\n{log}");
}
