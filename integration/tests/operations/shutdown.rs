//! What the shutdown shows from outside, for SIGTERM and SIGINT alike: once the signal
//! arrives, health fails at once while a request held in flight is still being answered (gRPC
//! health NOT_SERVING on an open watch; `/healthz` and `/healthcheck` no longer answer 200:
//! the admin listener closes as the drain begins, so a probe is refused); the request is
//! answered, its count reaches Redis in the final replay, and the process exits 0.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::Service;
use support::grpc::{self, Code, HealthCheckRequest, ServingStatus, hit};
use support::proxy::{proxied_redis, replaying_only_at_stop};
use support::redis_admin;

const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// `HGETALL`s (cell reads) the Redis at `url` has received since it started.
fn cell_reads(url: &str) -> u64 {
    redis_admin::command_calls(url)
        .get("hgetall")
        .copied()
        .unwrap_or(0)
}

/// `path` on the admin port answers anything but `ok` (a status, or no connection at all
/// once the listener is closed); what it answered.
fn not_ok(service: &Service, path: &str, ok: u16) -> Result<String, String> {
    match support::http_get(service.http_addr, path, &[]) {
        Ok(r) if r.status == ok => Err(format!("{path} still {ok}")),
        Ok(r) => Ok(format!("{path} {}", r.status)),
        Err(e) => Ok(format!("{path} refused ({e})")),
    }
}

async fn drains_on(signal: &str) {
    let (redis, proxy, prefix) = proxied_redis("signal");
    let (_dir, mut service) = replaying_only_at_stop(&proxy, &prefix, "sig", 1_000, "5s");
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::should_rate_limit(&mut client, hit("sig", "user", "warm-up")).await;
    let mut health = grpc::health_client(service.grpc_addr).await;
    let mut watch = health
        .watch(HealthCheckRequest {
            service: RLS_SERVICE.to_owned(),
        })
        .await
        .expect("a health watch")
        .into_inner();
    let first = watch
        .message()
        .await
        .expect("a health status")
        .expect("one");
    assert_eq!(first.status, ServingStatus::Serving as i32);

    // A request on a new key waits for its reads, each answer held 1.2 s (one after the
    // other: the client gives up after 5 s).
    let reads_before = cell_reads(&redis.url());
    proxy.delay(Duration::from_millis(1_200));
    let held = {
        let mut client = client.clone();
        tokio::spawn(async move {
            client
                .should_rate_limit(hit("sig", "user", "held"))
                .await
                .map(tonic::Response::into_inner)
        })
    };
    let redis_url = redis.url();
    tokio::task::spawn_blocking(move || {
        support::eventually("the held request's cell read reached Redis", true, || {
            cell_reads(&redis_url) > reads_before
        });
    })
    .await
    .expect("the read wait");

    service.send_signal(signal);
    let changed = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .unwrap_or_else(|_| panic!("no health change 5 s after SIG{signal}"));
    let status = changed
        .expect("the health watch")
        .map(|m| m.status)
        .unwrap_or_else(|| panic!("the health watch ended without NOT_SERVING"));
    assert_eq!(
        status,
        ServingStatus::NotServing as i32,
        "after SIG{signal}"
    );
    // An open watch is an open stream: the drain would wait for it to its deadline.
    drop((watch, health));
    let mut seen = Vec::new();
    for (path, ok) in [("/healthz", 200), ("/healthcheck", 200)] {
        service.wait_until(
            Duration::from_secs(5),
            &format!("{path} failing after SIG{signal}"),
            || not_ok(&service, path, ok).map(|what| seen.push(what)),
        );
    }
    // All of that during the drain: the held request is still waiting.
    assert!(
        !held.is_finished() && service.is_running(),
        "the drain ended before health was seen failing: {seen:?}"
    );
    println!("during the drain after SIG{signal}: {seen:?}");

    let answered = held
        .await
        .expect("the held request's task")
        .unwrap_or_else(|e| panic!("the held request failed during the drain: {e:?}"));
    assert_eq!(answered.overall_code, Code::Ok as i32);
    // Redis at full speed again for the final replay (whose calls time out after 1 s).
    proxy.delay(Duration::ZERO);
    let started = Instant::now();
    let exit = service.wait_exit(Duration::from_secs(20));
    let log = service.log_tail(30);
    let exit = exit.unwrap_or_else(|| panic!("still running after the drain\n{log}"));
    assert!(exit.success(), "exit {exit} after SIG{signal}\n{log}");
    println!("exited {:?} after the held request", started.elapsed());
    // The final replay came after the drain: both decisions are in Redis.
    let stored: u64 = redis_admin::counts_under(&redis.url(), &prefix)
        .iter()
        .map(|(_, count)| count)
        .sum();
    assert_eq!(stored, 2, "the warm-up and the held request\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_health_drains_and_replays() {
    drains_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_drains_like_sigterm() {
    drains_on("INT").await;
}
