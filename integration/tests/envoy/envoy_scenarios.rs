//! The Envoy examples in situations: a hot reload while Envoy serves, the service stopped
//! and restarted under both `failure_mode_deny` settings, two regions sharing one limit, and
//! one limit through an RLQS and an RLS v3 Envoy.
//!
//! All run `envoy/per-api-key.yaml` with `config/per-api-key.yaml` (3 per minute for each
//! x-api-key, 10 for `gold-key`) as the README runs them, on free ports. Each burst of
//! requests on one key is kept inside one minute (`avoid_window_boundary`): the windows are
//! aligned to the clock, and a sliding window would carry part of the previous minute over.

use gcounter_rls_integration as support;

use std::path::PathBuf;
use std::time::Duration;

use support::example::Client;
use support::grpc::{self, UInt64Value, descriptor, request};
use support::redis_admin::{self, LOCAL_REDIS_URL};
use support::sql_admin::{Backend, TestDb};
use support::{Envoy, Example, Service, free_port};

const MINUTE: Duration = Duration::from_secs(60);
const EXAMPLE: &str = "per-api-key";
const PER_KEY: &str = "3, 3;w=60;name=\"per_api_key\"";
const GOLD: &str = "10, 10;w=60;name=\"gold\"";
/// Debounce (250 ms) plus a loaded 2-core machine.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps the next `work` inside one minute.
fn same_minute(work: Duration) {
    support::avoid_window_boundary(MINUTE, work);
}

/// `n` admitted requests on `key` (remaining counting down from `n - 1`), then the 429.
fn exhaust(client: &Client, key: &str, limit: &str, n: u32) {
    let headers = [("x-api-key", key)];
    client.exhaust("/", &headers, limit, n);
}

/// The per-key rule in `/rlconfig` once the edit below is loaded.
const RELOADED: &str = "per-api-key.api_key: unit=MINUTE requests_per_unit=5,";

/// Rewrites the limits file in place (as an editor saves: temporary file, rename); panics
/// if `from` is not in it.
fn edit(path: &PathBuf, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read the limits copy");
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    support::replace_file(path, &text.replace(from, to));
}

#[test]
fn hot_reload_applies_an_edit_and_a_broken_one_keeps_the_running_limits() {
    let example = Example::load(EXAMPLE);
    let (_dir, limits) = example.copy_limits();
    let service = example.start_service_with(&limits, &[]);
    let envoy = example.start_envoy(&service);
    let client = Client::new(&envoy, vec![service.log_path.clone()]);

    // k1 spans the reload: its requests must share one minute.
    same_minute(RELOAD_TIMEOUT + Duration::from_secs(15));
    exhaust(&client, "k1", PER_KEY, 3);

    edit(&limits, "requests_per_unit: 3\n", "requests_per_unit: 5\n");
    let took = support::wait_for(RELOAD_TIMEOUT, "the edit shows in /rlconfig", || {
        service.rlconfig().contains(RELOADED)
    });
    println!("reloaded {took:?} after the edit");
    let five = "5, 5;w=60;name=\"per_api_key\"";
    // The running counter keeps its 3: 2 more under the new limit, with Envoy untouched.
    exhaust(&client, "k1", five, 2);
    same_minute(Duration::from_secs(5));
    exhaust(&client, "k2", five, 5);

    let errors_before = service.config_reloads("error");
    edit(
        &limits,
        "requests_per_unit: 5\n",
        "requests_per_unit: many\n",
    );
    support::wait_for(RELOAD_TIMEOUT, "the broken edit rejected", || {
        service.config_reloads("error") > errors_before
    });
    let running = service.rlconfig();
    assert!(
        running.contains(RELOADED),
        "/rlconfig after the broken edit:\n{running}"
    );
    same_minute(Duration::from_secs(5));
    exhaust(&client, "k3", five, 5);
}

/// `failure_mode_deny` false: requests pass while the service is down; true: Envoy answers
/// 500. Either way limiting resumes once it is back on the same port.
fn service_stopped_and_restarted(deny: bool) {
    let example = Example::load(EXAMPLE);
    let (grpc_port, http_port) = (free_port(), free_port());
    let service = example.start_service_on(grpc_port, http_port, &[]);
    let edits: &[(&str, &str)] = if deny {
        &[("failure_mode_deny: false", "failure_mode_deny: true")]
    } else {
        &[]
    };
    let envoy = Envoy::start(&example.envoy_file, grpc_port, edits);
    let first_log = service.log_path.clone();

    same_minute(Duration::from_secs(10));
    exhaust(
        &Client::new(&envoy, vec![first_log.clone()]),
        "alice",
        PER_KEY,
        3,
    );

    drop(service);
    let client = Client::new(&envoy, vec![first_log.clone()]);
    // alice was over her limit: passing now means Envoy did not ask.
    for key in ["alice", "bob", "bob", "bob"] {
        let headers = [("x-api-key", key)];
        if deny {
            let r = client.get("/", &headers);
            assert_eq!(
                r.status,
                500,
                "service down, failure_mode_deny: true: {:?}{}",
                r.headers,
                client.context()
            );
        } else {
            client.unlimited("/", &headers);
        }
    }
    let stat = |name: &str| {
        envoy
            .stat(&format!("cluster.upstream.ratelimit.{name}"))
            .unwrap_or(0)
    };
    assert_eq!(
        (stat("error"), stat("failure_mode_allowed")),
        (4, if deny { 0 } else { 4 }),
        "Envoy's ratelimit error, failure_mode_allowed{}",
        client.context()
    );

    let service = example.start_service_on(grpc_port, http_port, &[]);
    let client = Client::new(&envoy, vec![first_log, service.log_path.clone()]);
    // Envoy reconnects on the next request; allow for a slow first connection.
    let mut probe = 0;
    let took = support::wait_for(
        Duration::from_secs(20),
        "Envoy reaches the restarted service",
        || {
            probe += 1;
            let r = client.get("/", &[("x-api-key", &format!("probe-{probe}"))]);
            r.header("x-ratelimit-limit").is_some()
        },
    );
    println!("limiting resumed {took:?} after the restart ({probe} probes)");
    same_minute(Duration::from_secs(10));
    exhaust(&client, "carol", PER_KEY, 3);
}

#[test]
fn service_stopped_fail_open_lets_traffic_through_then_limiting_resumes() {
    service_stopped_and_restarted(false);
}

#[test]
fn service_stopped_fail_closed_answers_500_then_limiting_resumes() {
    service_stopped_and_restarted(true);
}

/// What `service` would still admit for gold-key, asked without consuming (hits_addend 0).
fn gold_remaining(rt: &tokio::runtime::Runtime, service: &Service) -> u32 {
    rt.block_on(async {
        let mut client = grpc::rls_client(service.grpc_addr).await;
        let mut d = descriptor(&[("api_key", "gold-key")]);
        d.hits_addend = Some(UInt64Value { value: 0 });
        let response = grpc::should_rate_limit(&mut client, request(EXAMPLE, vec![d])).await;
        response.statuses[0].limit_remaining
    })
}

/// Two regions, each an Envoy with its own service (own `--region`, own Redis prefix), one
/// shared SQL database: what goes through the first is taken from the limit the second sees.
#[test]
fn two_regions_share_one_limit() {
    redis_admin::require_local_redis();
    let db = TestDb::create(Backend::MariaDb, "envoy_regions");
    let url = db.url();
    let example = Example::load(EXAMPLE);
    let region = |name: &str| -> Service {
        let prefix = redis_admin::unique_prefix(&format!("envoy-{name}"));
        example.start_service(&[
            "--region",
            name,
            "--redis-url",
            LOCAL_REDIS_URL,
            "--redis-prefix",
            &prefix,
            "--database-url",
            &url,
            "--migrate",
            "--global-flush-interval",
            "200ms",
            "--global-sync-interval",
            "200ms",
            // Publish every count: by default a region keeps counts under half the limit.
            "--publish-floor",
            "0",
        ])
    };
    let (a, b) = (region("a"), region("b"));
    let (envoy_a, envoy_b) = (example.start_envoy(&a), example.start_envoy(&b));
    let logs = vec![a.log_path.clone(), b.log_path.clone()];
    let (through_a, through_b) = (
        Client::new(&envoy_a, logs.clone()),
        Client::new(&envoy_b, logs),
    );
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let gold = [("x-api-key", "gold-key")];
    const SYNC_TIMEOUT: Duration = Duration::from_secs(15);

    same_minute(2 * SYNC_TIMEOUT + Duration::from_secs(10));
    for remaining in (6..10).rev() {
        through_a.admitted("/", &gold, GOLD, remaining);
    }
    let took = support::wait_for(SYNC_TIMEOUT, "region b sees a's 4", || {
        gold_remaining(&rt, &b) == 6
    });
    println!("b saw a's 4 after {took:?}");
    // b admits exactly what a left.
    through_b.exhaust("/", &gold, GOLD, 6);
    // And back: a learns of b's 6.
    support::wait_for(SYNC_TIMEOUT, "region a sees b's 6", || {
        gold_remaining(&rt, &a) == 0
    });
    through_a.limited("/", &gold, GOLD);
    support::wait_for(SYNC_TIMEOUT, "both regions' counts in the table", || {
        (db.region_count("a"), db.region_count("b")) == (4, 6)
    });
}

/// One limit, two protocols: an Envoy on the RLS v3 filter (per-api-key.yaml moved onto the
/// quota example's domain) and one on the RLQS filter (quota.yaml), against one service on
/// config/quota.yaml (6 a minute per key). What either admits leaves the other nothing.
#[test]
fn an_rlqs_envoy_and_an_rls_envoy_share_one_limit() {
    let example = Example::load("quota");
    let (grpc_port, http_port) = (free_port(), free_port());
    let service = example.start_service_on(grpc_port, http_port, &[]);
    let rlqs = Envoy::start(&example.envoy_file, grpc_port, &[]);
    let rls = Envoy::start(
        Example::load(EXAMPLE).envoy_file,
        grpc_port,
        &[("domain: per-api-key", "domain: quota")],
    );
    let logs = vec![service.log_path.clone()];
    let (rlqs, rls) = (Client::new(&rlqs, logs.clone()), Client::new(&rls, logs));
    // About 40 requests, 7 s of pauses between them and up to 15 s for the RLQS report, all
    // in one minute: on a loaded machine that took over 30 s, and a minute that ended while
    // the test waited for bob's report let his sliding count fall under what was admitted.
    same_minute(Duration::from_secs(45));

    // RLS v3 spends alice's 6; the RLQS Envoy lets one request through before its first
    // assignment, then denies.
    let alice = [("x-api-key", "alice")];
    let admitted = (0..6)
        .filter(|_| rls.get("/", &alice).status == 200)
        .count();
    assert_eq!(admitted, 6, "RLS v3 admits the limit{}", rls.context());
    let admitted = (0..10)
        .filter(|_| {
            std::thread::sleep(Duration::from_millis(200));
            rlqs.get("/", &alice).status == 200
        })
        .count();
    assert!(
        admitted <= 1,
        "RLQS admitted {admitted} after RLS v3 spent the limit{}",
        rlqs.context()
    );

    // RLQS spends bob's; RLS v3 then denies him. The RLQS Envoy reports every 5 s: wait for
    // its report to count.
    let bob = [("x-api-key", "bob")];
    let admitted = (0..20)
        .filter(|_| {
            std::thread::sleep(Duration::from_millis(250));
            rlqs.get("/", &bob).status == 200
        })
        .count();
    // The bound of docs/rlqs.md, "Bursts", for one Envoy on a fresh counter: the limit and
    // one request of rounding.
    assert!(
        (1..=6 + 1).contains(&admitted),
        "RLQS admitted {admitted} of bob's 20 on a limit of 6{}",
        rlqs.context()
    );
    // Envoy reports every 5 s: wait for its report of every request it let through.
    let counted = || service.sliding_count("quota", "api_key%3Dbob");
    support::wait_for(
        Duration::from_secs(15),
        "the RLQS Envoy's report of bob",
        || counted() >= admitted as u64,
    );
    let left = 6usize.saturating_sub(admitted);
    let more = (0..6).filter(|_| rls.get("/", &bob).status == 200).count();
    assert!(
        more <= left,
        "RLS v3 admitted {more} more than the {left} RLQS left{}",
        rls.context()
    );
}
