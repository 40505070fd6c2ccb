//! envoyproxy/ratelimit's own integration tests (`test/integration/integration_test.go`),
//! run against our binary: started as upstream's image starts it (`ratelimit`, no arguments,
//! its environment variables), on upstream's test runtime (`integration/upstream-runtime/`,
//! copied unchanged from its `test/integration/runtime/current/`), with a real Redis.
//!
//! Each test follows its upstream counterpart step by step and asserts the same answers:
//! codes, `current_limit`, `limit_remaining`, the presence and direction of
//! `duration_until_reset`, and upstream's per-rule stats under its Prometheus names. What
//! upstream asserts that does not exist here is left out and said so where it would be: the
//! local cache's gauges (`LOCAL_CACHE_SIZE_IN_BYTES`: our local memory is the engine itself,
//! and it has no hit/miss gauges), the per-second Redis (`REDIS_PERSECOND`, refused), memcache.
//!
//! Our windows slide where upstream's are fixed; inside one window both answer the same,
//! so each test first waits, if needed, until its work fits inside one window of its
//! longest unit that matters (`avoid_window_boundary`).

use gcounter_rls_integration as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gcounter_redis::testing::{PlainRedis, RedisCluster, unique_prefix};
use support::Service;
use support::grpc::{
    self, Code, DescriptorStatus, RateLimitResponse, RlsClient, descriptor, request,
};
use support::metrics::sample;

const MINUTE: Duration = Duration::from_secs(60);

/// A copy of upstream's runtime (`RUNTIME_ROOT`), so that a test may add and remove files.
fn runtime_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    copy_tree(
        &support::repo_path("integration/upstream-runtime"),
        root.path(),
    );
    root
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read upstream runtime") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy runtime file");
        }
    }
}

/// Where upstream's Redis settings point: one node, a node under a key prefix, a cluster.
enum RedisUnderTest {
    Single(PlainRedis),
    Prefixed(PlainRedis, String),
    Cluster(RedisCluster),
}

impl RedisUnderTest {
    /// Upstream's variables for this Redis (`makeSimpleRedisSettings` and its variants).
    fn env(&self) -> Vec<(String, String)> {
        let host_port = |redis: &PlainRedis| format!("127.0.0.1:{}", redis.server.port);
        let mut env = vec![
            ("BACKEND_TYPE".into(), "redis".into()),
            ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
            ("USE_STATSD".into(), "false".into()),
        ];
        match self {
            Self::Single(redis) => env.push(("REDIS_URL".into(), host_port(redis))),
            Self::Prefixed(redis, prefix) => {
                env.push(("REDIS_URL".into(), host_port(redis)));
                env.push(("CACHE_KEY_PREFIX".into(), prefix.clone()));
            }
            Self::Cluster(cluster) => {
                let nodes: Vec<String> = cluster
                    .urls()
                    .iter()
                    .map(|url| url.trim_start_matches("redis://").to_owned())
                    .collect();
                env.push(("REDIS_TYPE".into(), "cluster".into()));
                env.push(("REDIS_URL".into(), nodes.join(",")));
            }
        }
        env
    }
}

/// The binary on upstream's runtime `root` with `redis`'s variables and `extra` ones.
fn start(root: &Path, redis: &RedisUnderTest, extra: &[(&str, &str)]) -> Service {
    let root = root.to_string_lossy().into_owned();
    let mut env = redis.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.push(("RUNTIME_ROOT".into(), root));
    env.push(("RUNTIME_SUBDIRECTORY".into(), "ratelimit".into()));
    env.push(("RUNTIME_APPDIRECTORY".into(), "config".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Service::start_upstream(&env)
}

/// Upstream's `newDescriptorStatus`: `duration_until_reset` is copied from the answer (it
/// depends on the clock), after checking that it is there and within the unit.
fn expect_status(
    got: &DescriptorStatus,
    code: Code,
    limit: u32,
    unit: grpc::Unit,
    remaining: u32,
    unit_secs: i64,
) {
    let reset = got
        .duration_until_reset
        .as_ref()
        .unwrap_or_else(|| panic!("no duration_until_reset: {got:?}"));
    assert!(
        (0..=unit_secs).contains(&reset.seconds),
        "duration_until_reset outside the unit: {got:?}"
    );
    let expected = DescriptorStatus {
        code: code as i32,
        current_limit: Some(grpc::RateLimit {
            requests_per_unit: limit,
            unit: unit as i32,
            ..Default::default()
        }),
        limit_remaining: remaining,
        duration_until_reset: got.duration_until_reset,
        ..Default::default()
    };
    assert_eq!(got, &expected);
}

async fn ask(
    client: &mut RlsClient,
    domain: &str,
    descriptors: &[&[(&str, &str)]],
) -> RateLimitResponse {
    let descriptors = descriptors.iter().map(|d| descriptor(d)).collect();
    grpc::should_rate_limit(client, request(domain, descriptors)).await
}

/// Upstream's per-rule stats `total_hits` and `over_limit` of `rule` (`domain.key`), from
/// one scrape; 0 before the first hit.
fn upstream_stats(service: &Service, domain: &str, key: &str) -> (f64, f64) {
    let rule = format!("{domain}.{key}");
    let text = service.metrics();
    let stat = |name: &str| {
        sample(
            &text,
            &format!("ratelimit_service_rate_limit_{name}"),
            &[("domain", domain), ("key1", key), ("rule", &rule)],
        )
        .unwrap_or(0.0)
    };
    (stat("total_hits"), stat("over_limit"))
}

/// A value no earlier run used (upstream draws a random int).
fn fresh_value() -> String {
    unique_prefix("v").replace(':', "-")
}

/// `testBasicBaseConfig`; `stop_increment`: with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
async fn run_basic_config(redis: RedisUnderTest, stop_increment: bool) {
    let root = runtime_root();
    // key2 is per minute: the 40 requests below stay in one minute, as upstream's fixed
    // window assumes.
    support::avoid_window_boundary(MINUTE, Duration::from_secs(15));
    let stop = if stop_increment { "true" } else { "false" };
    let service = start(
        root.path(),
        &redis,
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", stop)],
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;

    // An unknown domain: OK, one status without a limit.
    let r = ask(&mut client, "foo", &[&[("hello", "world")]]).await;
    assert_eq!(
        r,
        RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            }],
            ..Default::default()
        }
    );

    let r = ask(&mut client, "basic", &[&[("key1", "foo")]]).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    expect_status(&r.statuses[0], Code::Ok, 50, grpc::Unit::Second, 49, 1);
    assert_eq!(upstream_stats(&service, "basic", "key1"), (1.0, 0.0));

    // Over a minute limit with a fresh value.
    let value = fresh_value();
    for i in 0..25u32 {
        let r = ask(&mut client, "another", &[&[("key2", &value)]]).await;
        let (code, remaining) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        assert_eq!(r.overall_code, code as i32, "request {i}: {r:?}");
        expect_status(&r.statuses[0], code, 20, grpc::Unit::Minute, remaining, 60);
        assert_eq!(
            upstream_stats(&service, "another", "key2"),
            (f64::from(i + 1), f64::from(i.saturating_sub(19))),
            "request {i}: (total_hits, over_limit) of key2"
        );
    }

    // Two keys of one domain in one request: key3 (10 per hour) goes over; key2 (20 per
    // minute) is still charged for every request (upstream's default), or, with
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, not once the request is over.
    let value = fresh_value();
    for i in 0..15u32 {
        let r = ask(
            &mut client,
            "another",
            &[&[("key2", &value)], &[("key3", &value)]],
        )
        .await;
        let (code, remaining3) = if i >= 10 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 10 - (i + 1))
        };
        assert_eq!(r.overall_code, code as i32, "request {i}: {r:?}");
        assert_eq!(r.statuses.len(), 2, "{r:?}");
        let remaining2 = if stop_increment && i >= 10 {
            10
        } else {
            20 - (i + 1)
        };
        expect_status(
            &r.statuses[0],
            Code::Ok,
            20,
            grpc::Unit::Minute,
            remaining2,
            60,
        );
        expect_status(
            &r.statuses[1],
            code,
            10,
            grpc::Unit::Hour,
            remaining3,
            3_600,
        );
        assert_eq!(
            upstream_stats(&service, "another", "key2"),
            (f64::from(i + 26), 5.0),
            "request {i}: (total_hits, over_limit) of key2"
        );
        assert_eq!(
            upstream_stats(&service, "another", "key3"),
            (f64::from(i + 1), f64::from(i.saturating_sub(9))),
            "request {i}: (total_hits, over_limit) of key3"
        );
    }

    // duration_until_reset counts down.
    let value = fresh_value();
    let first = ask(&mut client, "another", &[&[("key4", &value)]]).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let second = ask(&mut client, "another", &[&[("key4", &value)]]).await;
    let seconds = |r: &RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds)
    };
    assert!(
        seconds(&second) < seconds(&first),
        "{first:?} then {second:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config() {
    run_basic_config(RedisUnderTest::Single(PlainRedis::start_or_fail()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_with_cache_key_prefix() {
    run_basic_config(
        RedisUnderTest::Prefixed(PlainRedis::start_or_fail(), "prefix:".into()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_with_redis_cluster() {
    run_basic_config(
        RedisUnderTest::Cluster(RedisCluster::start_or_fail(3)),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_with_stop_cache_key_increment_when_overlimit() {
    run_basic_config(RedisUnderTest::Single(PlainRedis::start_or_fail()), true).await;
}

/// `testConfigReload`: a file added to the runtime directory is loaded, one removed is
/// unloaded; each counts as a successful load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_reload_config() {
    let root = runtime_root();
    let redis = RedisUnderTest::Single(PlainRedis::start_or_fail());
    let service = start(root.path(), &redis, &[]);
    let mut client = grpc::rls_client(service.grpc_addr).await;

    let r = ask(&mut client, "reload", &[&[("block", "foo")]]).await;
    assert_eq!(
        r.statuses,
        vec![DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        }],
        "no domain `reload` yet: {r:?}"
    );

    let reload: PathBuf = root.path().join("ratelimit/config/reload.yaml");
    let before = service.config_reloads("ok");
    support::replace_file(
        &reload,
        &std::fs::read_to_string(root.path().join("ratelimit/reload.yaml"))
            .expect("read reload.yaml"),
    );
    let after = wait_for_config_reload(&service, before);

    let r = ask(&mut client, "reload", &[&[("key1", "foo")]]).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
    expect_status(&r.statuses[0], Code::Ok, 50, grpc::Unit::Second, 49, 1);
    // requests_per_unit 0: every request is over.
    let r = ask(&mut client, "reload", &[&[("block", "foo")]]).await;
    expect_status(&r.statuses[0], Code::OverLimit, 0, grpc::Unit::Second, 0, 1);

    std::fs::remove_file(&reload).expect("remove reload.yaml");
    wait_for_config_reload(&service, after);
    let r = ask(&mut client, "reload", &[&[("key1", "foo")]]).await;
    assert!(
        r.statuses[0].current_limit.is_none(),
        "the removed domain still limits: {r:?}"
    );
}

/// Upstream's `waitForConfigReload`: until the count of successful loads grows.
fn wait_for_config_reload(service: &Service, before: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = service.config_reloads("ok");
        if now > before {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "no successful config load within 10 s (still {now})\n{}",
            service.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `testShareThreshold`: values matching `files/*` share one counter with
/// `share_threshold: true`; under `files_no_share/*` each value has its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold() {
    let root = runtime_root();
    let redis = RedisUnderTest::Prefixed(PlainRedis::start_or_fail(), unique_prefix("share"));
    let service = start(root.path(), &redis, &[]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let domain = "share-threshold-test";

    // Ten within the shared limit of ten: every one passes, and the next value under
    // `files/*` finds the shared counter full.
    for i in 0..10 {
        let r = ask(&mut client, domain, &[&[("files", "files/a.pdf")]]).await;
        assert_eq!(r.overall_code, Code::Ok as i32, "request {i}: {r:?}");
    }
    let r = ask(&mut client, domain, &[&[("files", "files/b.csv")]]).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32, "{r:?}");
    expect_status(
        &r.statuses[0],
        Code::OverLimit,
        10,
        grpc::Unit::Hour,
        0,
        3_600,
    );

    for _ in 0..10 {
        let value = format!("files_no_share/{}", fresh_value());
        let r = ask(&mut client, domain, &[&[("files_no_share", &value)]]).await;
        assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
        expect_status(&r.statuses[0], Code::Ok, 10, grpc::Unit::Hour, 9, 3_600);
    }
}
