//! Redis as envoyproxy/ratelimit deployments reach it beyond one TCP node, configured by
//! upstream's variables only: Redis Sentinel (`REDIS_TYPE=sentinel`, `REDIS_URL=master,
//! sentinel,...`, `REDIS_AUTH` for the data nodes, `REDIS_SENTINEL_AUTH` for the sentinels),
//! including a failover under load; a Unix socket with a password; TLS with a private CA and a
//! client certificate (`tls-auth-clients yes`). Real `redis-server` and `redis-server
//! --sentinel` processes started by the tests.

use gcounter_rls_integration as support;

use gcounter_redis::testing::{SentinelSet, TlsOptions, TlsRedis, UnixRedis};

use std::time::{Duration, Instant};

use support::grpc::{self, Code, code, hit};
use support::load;
use support::metrics::count;
use support::redis_admin;
use support::{Service, UpstreamRuntime, now_ms};

const DAY: Duration = Duration::from_secs(86_400);

/// RUNTIME_ROOT/ratelimit/config/limits.yaml with one rule: `limit` a day per `user`.
/// Upstream's runtime directory with `limit` a day for each `user` of domain `upstream`.
fn runtime_root(limit: u64) -> UpstreamRuntime {
    UpstreamRuntime::new(&support::one_rule("upstream", "user", "day", 1, limit))
}

fn replays(text: &str, result: &str) -> f64 {
    count(
        text,
        "rls_origin_operations_total",
        &[("op", "replay"), ("result", result)],
    )
}

/// The sum of every cell under `prefix` on the node at `url`.
fn stored(url: &str, prefix: &str) -> u64 {
    redis_admin::counts_under(url, prefix)
        .iter()
        .map(|(_, n)| n)
        .sum()
}

support::scenario_tests!(failover_under_load {
    /// Sentinel from upstream's variables alone, with passwords on the data nodes and the
    /// sentinels. `SENTINEL FAILOVER` in the middle of a steady load: no gRPC error, replay
    /// goes on against the new master, and once the load ends the new master holds exactly
    /// what was accepted (the cumulative counts republished after the failover make up for
    /// writes the old master took but never replicated).
    sentinel_failover_under_load_from_upstreams_variables => Failover::Command,
    /// The same with the master killed (SIGKILL) under load: the sentinels see it down after
    /// 1 s and promote the replica; meanwhile replays fail (no gRPC error) and stay queued.
    sentinel_master_killed_under_load => Failover::Kill,
});

/// The service on upstream's variables, its Redis found through the set's Sentinels (both
/// with passwords).
fn start_through_sentinels(set: &SentinelSet, runtime: &UpstreamRuntime, prefix: &str) -> Service {
    let redis_url = format!("{},{}", set.name, set.sentinel_addrs().join(","));
    Service::start_upstream(&runtime.env(&[
        ("LOG_LEVEL", "info"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", &redis_url),
        ("REDIS_AUTH", "n0de@pw"),
        ("REDIS_SENTINEL_AUTH", "s3nt"),
        ("CACHE_KEY_PREFIX", prefix),
    ]))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Failover {
    /// `SENTINEL FAILOVER`: the old master is reconfigured as a replica.
    Command,
    /// The master process is killed.
    Kill,
}

async fn failover_under_load(how: Failover) {
    const KEYS: [&str; 5] = ["u0", "u1", "u2", "u3", "u4"];
    const RATE: f64 = 200.0;
    let mut set = SentinelSet::start_or_fail("rlmaster", Some("n0de@pw"), Some("s3nt"));
    support::avoid_window_boundary(DAY, Duration::from_secs(60));
    let runtime = runtime_root(1_000_000);
    let prefix = redis_admin::unique_prefix("sentinel");
    let service = start_through_sentinels(&set, &runtime, &prefix);
    // Captures nothing, so it is `Copy`: both loads below send the same spread of keys.
    let spread = |i: usize| hit("upstream", "user", KEYS[i % KEYS.len()]);
    let load = load::in_background(&service, RATE, Duration::from_secs(12), spread).await;

    // Fail over once the replay has reached the first master: awaited, not a fixed sleep (a
    // loaded machine starts the service and its first replay later).
    let old_master = set.master_port().expect("a master");
    let old_url = format!("redis://:n0de%40pw@127.0.0.1:{old_master}");
    let deadline = Instant::now() + Duration::from_secs(6);
    while stored(&old_url, &prefix) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        stored(&old_url, &prefix) > 0,
        "replay reached the first master before the failover\n{}",
        service.log_tail(40)
    );
    let before = service.metrics();
    let failover_ms = now_ms();
    let new_master = tokio::task::block_in_place(|| match how {
        Failover::Command => set.failover(),
        Failover::Kill => {
            set.node_mut(old_master).expect("the master").kill();
            set.wait_for_new_master(old_master, Duration::from_secs(30))
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let failed_over_ms = now_ms();
    let at_failover = service.metrics();
    println!(
        "{how:?}: failover {old_master} -> {new_master} took {} ms; replays ok/error before {}/{}, at the end of the failover {}/{}",
        failed_over_ms - failover_ms,
        replays(&before, "ok"),
        replays(&before, "error"),
        replays(&at_failover, "ok"),
        replays(&at_failover, "error"),
    );

    // The first load is sized to outlast a failover on a quiet machine; on a busy one the
    // failover can take longer than it, so a second load always runs after the switch.
    let after = load::in_background(&service, RATE, Duration::from_secs(3), spread).await;
    let mut sent = load.await.expect("the load task");
    sent.extend(after.await.expect("the load after the failover"));
    load::assert_no_grpc_errors(&sent, &format!("{how:?}"));
    let accepted = sent
        .iter()
        .filter(|s| s.first_status().is_some_and(|st| code(st) == Code::Ok))
        .count() as u64;
    assert_eq!(accepted, sent.len() as u64, "far under the limit: all OK");
    let after_failover = sent.iter().filter(|s| s.sent_ms >= failed_over_ms).count();
    assert!(
        after_failover > 400,
        "the load went on after the failover: {after_failover} requests"
    );

    // The new master catches up with everything accepted.
    let new_url = format!("redis://:n0de%40pw@127.0.0.1:{new_master}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held = stored(&new_url, &prefix);
    while held != accepted && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = stored(&new_url, &prefix);
    }
    let end = service.metrics();
    println!(
        "{accepted} accepted; the new master holds {held}; replays ok/error at the end {}/{}; pending {}",
        replays(&end, "ok"),
        replays(&end, "error"),
        count(&end, "rls_replay_pending_cells", &[]),
    );
    assert!(
        replays(&end, "ok") > replays(&at_failover, "ok") + 5.0,
        "replay went on against the new master: {} ok at the failover, {} at the end\n{}",
        replays(&at_failover, "ok"),
        replays(&end, "ok"),
        service.log_tail(40)
    );
    assert_eq!(
        held,
        accepted,
        "the new master holds every accepted request once\n{}",
        service.log_tail(40)
    );
    assert!(
        service
            .log_tail(400)
            .contains("Redis Sentinel: connected to the master"),
        "the switch is logged:\n{}",
        service.log_tail(40)
    );
}

/// After a Sentinel failover every cell holding work is republished, including cells that
/// get no further hit: the new master is made to miss one (its count deleted on the old
/// master, and the deletion replicated, before the failover, as a write the replica never got
/// would be), and it holds the cell's count again with no request on it after the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_republishes_cells_that_get_no_further_hit() {
    const HITS: u64 = 5;
    let set = SentinelSet::start_or_fail("rlquiet", Some("n0de@pw"), Some("s3nt"));
    support::avoid_window_boundary(DAY, Duration::from_secs(60));
    let runtime = runtime_root(1_000);
    let prefix = redis_admin::unique_prefix("republish");
    let service = start_through_sentinels(&set, &runtime, &prefix);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for _ in 0..HITS {
        let status = grpc::one_status(&mut client, hit("upstream", "user", "quiet")).await;
        assert_eq!(code(&status), Code::Ok, "{status:?}");
    }
    let old_master = set.master_port().expect("a master");
    let old_url = format!("redis://:n0de%40pw@127.0.0.1:{old_master}");
    service.wait_until(Duration::from_secs(10), "the hits replayed", || {
        let held = stored(&old_url, &prefix);
        (held == HITS)
            .then_some(())
            .ok_or(format!("the master holds {held}"))
    });
    redis_admin::delete_under(&old_url, &prefix);
    let mut admin = redis_admin::connect(&old_url);
    let replicas: u64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query(&mut admin)
        .expect("WAIT for the replica");
    assert_eq!(replicas, 1, "the deletion reached the replica");
    assert_eq!(stored(&old_url, &prefix), 0);

    let busy = load::in_background(&service, 20.0, Duration::from_secs(40), |_| {
        hit("upstream", "user", "busy")
    })
    .await;
    let new_master =
        tokio::task::block_in_place(|| set.failover()).unwrap_or_else(|e| panic!("{e}"));
    let new_url = format!("redis://:n0de%40pw@127.0.0.1:{new_master}");
    // No request on the quiet cell from here on: only the republish can bring its count back.
    // The busy cell's keys share the prefix, so the cell is told apart after it.
    let quiet = |url: &str| -> u64 {
        redis_admin::counts_under(url, &prefix)
            .iter()
            .filter(|(key, _)| {
                key.strip_prefix(&prefix)
                    .is_some_and(|k| k.contains("quiet"))
            })
            .map(|(_, n)| n)
            .sum()
    };
    service.wait_until(
        Duration::from_secs(30),
        "the quiet cell republished to the new master",
        || {
            let held = quiet(&new_url);
            (held == HITS)
                .then_some(())
                .ok_or(format!("the new master holds {held} for it"))
        },
    );
    busy.abort();
}

/// Upstream's REDIS_SOCKET_TYPE=unix with REDIS_AUTH: a Redis listening only on a socket,
/// with `requirepass`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_with_redis_auth_from_upstreams_variables() {
    support::avoid_window_boundary(DAY, Duration::from_secs(10));
    let redis = UnixRedis::start("s0cket:pw").unwrap_or_else(|e| panic!("{e}"));
    let socket = redis.socket.to_string_lossy().into_owned();
    let runtime = runtime_root(10);
    let service = Service::start_upstream(&runtime.env(&[
        ("REDIS_URL", &socket),
        // A password with a ':' is `user:password` to upstream: the default user here.
        ("REDIS_AUTH", "default:s0cket:pw"),
    ]));
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::assert_admitted(&mut client, 3, "upstream", &[("user", "unix")]).await;
    let url = format!("redis+unix://{socket}?pass=s0cket%3Apw");
    let what = format!("the Redis behind {socket} holds the 3 hits");
    service.wait_until(Duration::from_secs(10), &what, || match stored(&url, "") {
        3 => Ok(()),
        n => Err(format!("{n} stored")),
    });
    assert!(
        !service.log_tail(400).contains("s0cket"),
        "the password is never logged"
    );
}

/// Upstream's REDIS_TLS with REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY
/// against a Redis with `tls-auth-clients yes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificate_from_upstreams_variables() {
    support::avoid_window_boundary(DAY, Duration::from_secs(10));
    let tls = TlsRedis::start_with(TlsOptions {
        auth_clients: true,
        ..TlsOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let runtime = runtime_root(10);
    let prefix = redis_admin::unique_prefix("mtls");
    let addr = format!("127.0.0.1:{}", tls.server.port);
    let file = |path: &std::path::Path| path.to_string_lossy().into_owned();
    let (ca, cert, key) = (
        file(&tls.ca_file),
        file(&tls.client_cert_file),
        file(&tls.client_key_file),
    );
    let service = Service::start_upstream(&runtime.env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &addr),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", &ca),
        ("REDIS_TLS_CLIENT_CERT", &cert),
        ("REDIS_TLS_CLIENT_KEY", &key),
        ("CACHE_KEY_PREFIX", &prefix),
    ]));
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::assert_admitted(&mut client, 2, "upstream", &[("user", "mtls")]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = service.metrics();
        if replays(&text, "ok") > 0.0 && count(&text, "rls_replay_pending_cells", &[]) == 0.0 {
            assert_eq!(replays(&text, "error"), 0.0, "{}", service.log_tail(30));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no replay reached the TLS Redis:\n{}",
            service.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bad Sentinel and TLS settings stop start-up naming the variable (and the file).
#[test]
fn bad_sentinel_and_tls_settings_stop_start_up() {
    let runtime = runtime_root(10);
    let run = |env: &[(&str, &str)]| {
        let (output, _, ended) = support::process::run_within(
            std::process::Command::new(support::binary())
                .env_clear()
                .env("RUNTIME_ROOT", &runtime.root)
                .env("USE_STATSD", "false")
                .env("REDIS_SOCKET_TYPE", "tcp")
                .env("HOST", "127.0.0.1")
                .env("PORT", "0")
                .env("GRPC_HOST", "127.0.0.1")
                .env("GRPC_PORT", "0")
                .env("DEBUG_HOST", "127.0.0.1")
                .env("DEBUG_PORT", "0")
                .envs(env.iter().copied()),
            Duration::from_secs(15),
        );
        assert!(ended, "{env:?} was not refused at start");
        assert_eq!(output.status.code(), Some(2), "{env:?}: an invalid setting");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let text = run(&[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "127.0.0.1:26379")]);
    assert!(text.contains("REDIS_URL"), "{text}");
    let text = run(&[
        ("REDIS_URL", "127.0.0.1:6380"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/nonexistent/ca.pem"),
    ]);
    assert!(
        text.contains("redis-tls-ca") && text.contains("/nonexistent/ca.pem"),
        "{text}"
    );
    let text = run(&[
        ("REDIS_URL", "127.0.0.1:6380"),
        ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
    ]);
    assert!(text.contains("REDIS_TLS_CLIENT_CERT"), "{text}");
}
