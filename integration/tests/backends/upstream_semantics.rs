//! envoyproxy/ratelimit's semantics (`--windows fixed --count-denied`), end to end: real
//! service processes sharing the machine's Redis.
//!
//! Each assertion is one of upstream's time-dependent expectations
//! (`test/redis/fixed_cache_impl_test.go`, `test/integration`) and fails with sliding
//! windows or uncounted denials:
//! - over the limit after N in a window, `duration_until_reset` as upstream computes it
//!   (`unit - now % unit` in whole seconds), allowed or denied;
//! - the whole limit back at the unit's boundary;
//! - a denied hit counted: the counter in Redis grows past the limit, and a second process
//!   reading it agrees; the next window starts from zero all the same;
//! - upstream's near- and over-limit stats of those hits;
//! - the no-argument start (upstream's variables) has these semantics without a flag.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::Service;
use support::grpc::{self, Code, DescriptorStatus, RlsClient, code, hit, one_status};
use support::metrics::sample;
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};

const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);
const UPSTREAM: &[&str] = &["--windows", "fixed", "--count-denied"];

/// `duration_until_reset` in whole milliseconds; panics when absent.
fn reset_ms(status: &DescriptorStatus) -> i64 {
    assert!(
        status.duration_until_reset.is_some(),
        "no duration_until_reset: {status:?}"
    );
    grpc::duration_ms(status.duration_until_reset.as_ref())
}

async fn ask(client: &mut RlsClient, key: &str, value: &str) -> DescriptorStatus {
    one_status(client, hit("fixed", key, value)).await
}

/// Upstream's stat `name` of rule `fixed.<key>`.
fn upstream_stat(service: &Service, key: &str, name: &str) -> f64 {
    let rule = format!("fixed.{key}");
    sample(
        &service.metrics(),
        &format!("ratelimit_service_rate_limit_{name}"),
        &[("domain", "fixed"), ("key1", key), ("rule", &rule)],
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_denies_after_n_and_starts_over_on_the_boundary() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("fixed-boundary");
    let (_dir, service) = support::serve_limits(
        &support::flat_rules("fixed", &[("per_second", "second", 3)]),
        &redis_args(LOCAL_REDIS_URL, &prefix, UPSTREAM),
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;
    // Warm the counter's cells, so the window's decisions below are quick.
    ask(&mut client, "per_second", "warm").await;

    let start = support::into_fresh_window(SECOND);
    for left in [2, 1, 0] {
        let status = ask(&mut client, "per_second", "a").await;
        assert_eq!(
            (code(&status), status.limit_remaining),
            (Code::Ok, left),
            "{status:?}"
        );
        // Upstream: 1 - now % 1 = 1 s, whole.
        assert_eq!(reset_ms(&status), 1_000, "{status:?}");
    }
    let denied = ask(&mut client, "per_second", "a").await;
    assert_eq!(code(&denied), Code::OverLimit, "{denied:?}");
    assert_eq!(denied.limit_remaining, 0);
    // Until the boundary, not until the hit would pass on a sliding window.
    assert_eq!(reset_ms(&denied), 1_000, "{denied:?}");
    assert!(
        support::now_ms() < start + 1_000,
        "the four requests took the whole second: the machine is too loaded for this test"
    );

    // 20 ms into the next second: the whole limit again (a sliding window would still weigh
    // 98 % of the previous second's 4 hits and deny).
    support::sleep_until_ms(start + 1_020);
    let next = ask(&mut client, "per_second", "a").await;
    assert_eq!(
        (code(&next), next.limit_remaining),
        (Code::Ok, 2),
        "{next:?}"
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_hits_count_in_redis_and_a_second_process_agrees() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("fixed-denied");
    let (_dir, path) =
        support::limits_file(&support::flat_rules("fixed", &[("per_day", "day", 5)]));
    let args = redis_args(LOCAL_REDIS_URL, &prefix, UPSTREAM);
    let first = Service::start(&path, &args);
    let second = Service::start(&path, &args);
    let mut a = grpc::rls_client(first.grpc_addr).await;
    let mut b = grpc::rls_client(second.grpc_addr).await;
    support::avoid_window_boundary(DAY, Duration::from_secs(60));

    let mut codes = Vec::new();
    for _ in 0..9 {
        codes.push(code(&ask(&mut a, "per_day", "acme").await));
    }
    assert_eq!(
        codes,
        [[Code::Ok; 5].as_slice(), &[Code::OverLimit; 4]].concat()
    );
    // Every hit is counted, as upstream's INCRBY: 9 in Redis, not 5.
    support::eventually("the 9 hits replayed to Redis", 9, || {
        redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, "acme").0
    });
    // The second process reads the same counter: denied, having seen 9 (+1, its own hit).
    let other = ask(&mut b, "per_day", "acme").await;
    assert_eq!(code(&other), Code::OverLimit, "{other:?}");
    support::eventually("the second process's denial counted too", 10, || {
        redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, "acme").0
    });

    // Upstream's stats of the first process: limit 5, near-limit threshold 4: the 5th hit
    // is near; each denial, at the limit already, is over.
    assert_eq!(upstream_stat(&first, "per_day", "total_hits"), 9.0);
    assert_eq!(upstream_stat(&first, "per_day", "within_limit"), 5.0);
    assert_eq!(upstream_stat(&first, "per_day", "near_limit"), 1.0);
    assert_eq!(upstream_stat(&first, "per_day", "over_limit"), 4.0);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_denials_leave_the_next_window_untouched() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("fixed-next");
    let (_dir, service) = support::serve_limits(
        &support::flat_rules("fixed", &[("per_second", "second", 2)]),
        &redis_args(LOCAL_REDIS_URL, &prefix, UPSTREAM),
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;
    ask(&mut client, "per_second", "warm").await;
    let start = support::into_fresh_window(SECOND);
    let mut denied = 0;
    // Hammering past the limit for most of a second...
    while support::now_ms() < start + 700 {
        if code(&ask(&mut client, "per_second", "b").await) == Code::OverLimit {
            denied += 1;
        }
    }
    assert!(denied > 0, "no request went over the limit of 2");
    // ...does not spill into the next one.
    support::sleep_until_ms(start + 1_020);
    let next = ask(&mut client, "per_second", "b").await;
    assert_eq!(
        (code(&next), next.limit_remaining),
        (Code::Ok, 1),
        "{next:?}"
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_argument_start_has_upstreams_semantics() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("fixed-noarg");
    let root = tempfile::tempdir().expect("temp dir");
    let config = root.path().join("ratelimit").join("config");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(
        config.join("fixed.yaml"),
        support::flat_rules("fixed", &[("per_second", "second", 3)]),
    )
    .expect("write limits");
    let root_text = root.path().to_string_lossy().into_owned();
    let service = Service::start_upstream(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("USE_STATSD", "false"),
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_APPDIRECTORY", "config"),
    ]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    ask(&mut client, "per_second", "warm").await;
    let start = support::into_fresh_window(SECOND);
    for _ in 0..4 {
        ask(&mut client, "per_second", "noarg-counted").await;
    }
    support::sleep_until_ms(start + 1_020);
    let next = ask(&mut client, "per_second", "noarg-counted").await;
    assert_eq!(
        (code(&next), next.limit_remaining, reset_ms(&next)),
        (Code::Ok, 2, 1_000),
        "{next:?}"
    );
    // The denied 4th hit counted too: 4 + 1 in Redis, as upstream's INCRBY.
    support::eventually("the five hits replayed to Redis", 5, || {
        redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, "noarg-counted").0
    });
    let metrics = service.metrics();
    for switch in ["fixed_windows", "count_denied"] {
        assert_eq!(
            sample(&metrics, "rls_switch_enabled", &[("switch", switch)]),
            Some(1.0),
            "{switch}"
        );
    }
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}
