//! Upstream's stats pushed over statsd and DogStatsD to a test-side collector that parses the
//! real line protocol: started as upstream's image (statsd over TCP, its default), with flags
//! (DogStatsD over UDP with a mogrifier), and behind a real Envoy. The names are upstream's
//! and the values are counted exactly: what the service counted, once.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{self, Code, descriptor, request};
use support::statsd::Collector;
use support::{Example, Service, UpstreamRuntime};

const LIMITS: &str = "
domain: stats
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 2 }
";

const WAIT: Duration = Duration::from_secs(15);

/// Upstream's image with statsd left to its default (on, over TCP), flushing every 200 ms:
/// five requests of a limit of two, one invalid request, a config loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_statsd_names_and_values_over_tcp() {
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(30));
    let collector = Collector::start();
    let runtime = UpstreamRuntime::new(LIMITS);
    let port = collector.addr.port().to_string();
    let mut service = Service::start_upstream(&[
        ("RUNTIME_ROOT", &runtime.root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        (
            "CACHE_KEY_PREFIX",
            &format!("statsd-{}:", support::now_ms()),
        ),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATS_FLUSH_INTERVAL", "200ms"),
        ("EXTRA_TAGS", "env:test,zone:eu.west"),
    ]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for i in 0..5 {
        let response = grpc::should_rate_limit(
            &mut client,
            request("stats", vec![descriptor(&[("k", "v")])]),
        )
        .await;
        let expected = if i < 2 { Code::Ok } else { Code::OverLimit };
        assert_eq!(response.overall_code, expected as i32, "request {i}");
    }
    let invalid = client
        .should_rate_limit(request("", vec![descriptor(&[("k", "v")])]))
        .await;
    assert!(invalid.is_err(), "an empty domain is refused");

    let tags = ".__env=test.__zone=eu_west";
    let rule = |stat: &str| format!("ratelimit.service.rate_limit.stats.k.{stat}{tags}");
    let expected = [
        (rule("total_hits"), 5.0),
        (rule("within_limit"), 2.0),
        (rule("near_limit"), 1.0),
        (rule("over_limit"), 3.0),
        (format!("ratelimit.service.config_load_success{tags}"), 1.0),
        (
            format!("ratelimit.service.call.should_rate_limit.service_error{tags}"),
            1.0,
        ),
        (
            format!("ratelimit_server.ShouldRateLimit.total_requests{tags}"),
            6.0,
        ),
    ];
    let matches = |counters: &std::collections::BTreeMap<(String, String), f64>| {
        expected
            .iter()
            .all(|(name, value)| counters.get(&(name.clone(), String::new())) == Some(value))
    };
    collector.wait_for(WAIT, "upstream's stats over statsd", matches);
    // The same counts on /metrics, under upstream's Prometheus mapping's names.
    let text = service.metrics();
    for (name, labels, value) in [
        ("ratelimit_service_config_load_success", &[][..], 1.0),
        ("ratelimit_service_config_load_error", &[], 0.0),
        (
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "service_error")],
            1.0,
        ),
        (
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")],
            0.0,
        ),
        (
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")],
            6.0,
        ),
    ] {
        assert_eq!(
            support::metrics::sample(&text, name, labels),
            Some(value),
            "{name}{labels:?}:\n{text}"
        );
    }
    // A flush sends only what grew: later flushes, and the last one at shutdown, add nothing.
    std::thread::sleep(Duration::from_millis(600));
    service.terminate_cleanly(WAIT);
    let counters = collector.counters();
    assert!(matches(&counters), "{counters:#?}");
    assert!(
        counters
            .keys()
            .all(|(name, _)| !name.contains("shadow_mode")),
        "a counter that never grew is not sent: {counters:#?}"
    );
    let lines = collector.lines();
    assert!(lines.iter().all(|l| !l.udp && l.kind == "c"), "{lines:?}");
    assert_eq!(collector.errors(), Vec::<String>::new());
}

/// DogStatsD over UDP from flags, with upstream's mogrifier renaming a rule's stats and
/// tagging them, and the extra tags after `|#`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dogstatsd_with_a_mogrifier_over_udp() {
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(30));
    let collector = Collector::start();
    let (_dir, limits) = support::limits_file(LIMITS);
    let addr = collector.addr.to_string();
    let env = [
        (
            "DOG_STATSD_MOGRIFIER_RL_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$",
        ),
        (
            "DOG_STATSD_MOGRIFIER_RL_NAME",
            "ratelimit.service.rate_limit.$3",
        ),
        ("DOG_STATSD_MOGRIFIER_RL_TAGS", "domain:$1,descriptor:$2"),
    ];
    let service = Service::start_with(
        &limits,
        &[
            "--statsd-addr",
            &addr,
            "--statsd-format",
            "dogstatsd",
            "--statsd-flush-interval",
            "200ms",
            "--statsd-tags",
            "env:test",
            "--statsd-mogrifiers",
            "RL",
        ],
        support::Launch::env(&env),
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for _ in 0..3 {
        grpc::should_rate_limit(
            &mut client,
            request("stats", vec![descriptor(&[("k", "v")])]),
        )
        .await;
    }
    let tagged = |name: &str| {
        (
            format!("ratelimit.service.rate_limit.{name}"),
            "descriptor:k,domain:stats,env:test".to_owned(),
        )
    };
    collector.wait_for(WAIT, "DogStatsD's mogrified stats", |counters| {
        counters.get(&tagged("total_hits")) == Some(&3.0)
            && counters.get(&tagged("within_limit")) == Some(&2.0)
            && counters.get(&tagged("over_limit")) == Some(&1.0)
            && counters.get(&(
                "ratelimit.service.config_load_success".to_owned(),
                "env:test".to_owned(),
            )) == Some(&1.0)
    });
    let lines = collector.lines();
    assert!(
        lines.iter().all(|l| l.udp),
        "DogStatsD goes over UDP: {lines:?}"
    );
    assert_eq!(collector.errors(), Vec::<String>::new());
}

/// A real Envoy → the service → statsd: the example's per-key limit of 3, five requests of one
/// key and two of another: upstream's names, exact values.
#[test]
fn through_a_real_envoy_the_stats_arrive_counted_exactly() {
    let collector = Collector::start();
    let addr = collector.addr.to_string();
    let example = Example::load("per-api-key");
    let service =
        example.start_service(&["--statsd-addr", &addr, "--statsd-flush-interval", "200ms"]);
    let envoy = example.start_envoy(&service);
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(20));
    let client = support::example::Client::new(&envoy, vec![service.log_path.clone()]);
    let mut codes = Vec::new();
    for key in ["alice", "alice", "alice", "alice", "alice", "bob", "bob"] {
        codes.push(client.get("/", &[("x-api-key", key)]).status);
    }
    assert_eq!(
        codes,
        [200, 200, 200, 429, 429, 200, 200],
        "{}",
        client.context()
    );
    let rule = |stat: &str| {
        (
            format!("ratelimit.service.rate_limit.per-api-key.api_key.{stat}"),
            String::new(),
        )
    };
    // Limit 3, NEAR_LIMIT_RATIO 0.8: floor(2.4) = 2, so each key's third hit is near.
    collector.wait_for(WAIT, "the per-key rule's stats", |counters| {
        counters.get(&rule("total_hits")) == Some(&7.0)
            && counters.get(&rule("within_limit")) == Some(&5.0)
            && counters.get(&rule("over_limit")) == Some(&2.0)
            && counters.get(&rule("near_limit")) == Some(&1.0)
            && counters.get(&(
                "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
                String::new(),
            )) == Some(&7.0)
    });
    assert_eq!(collector.errors(), Vec::<String>::new());
}
