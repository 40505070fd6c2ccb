//! The binary started as envoyproxy/ratelimit's image starts it — named `ratelimit`, no
//! arguments — configured by upstream's environment variables only: its limits directory
//! (RUNTIME_*), Redis (REDIS_*), response headers, logging; unsupported settings refused at
//! start naming the variable.

use gcounter_rls_integration as support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::grpc::{self, Code, descriptor, request};
use support::process::run_within;
use support::{Service, UpstreamRuntime};

const LIMITS: &str = "
domain: upstream
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 2 }
";

/// RUNTIME_ROOT/<sub>/config/limits.yaml, as upstream lays it out.
fn runtime_root() -> UpstreamRuntime {
    UpstreamRuntime::new(LIMITS)
}

fn unique_prefix() -> String {
    format!("upstream-env-{}-{}:", std::process::id(), support::now_ms())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_serve_from_upstreams_variables_alone() {
    // Covers the start as well as the requests.
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(60));
    let runtime = runtime_root();
    let prefix = unique_prefix();
    let prometheus = support::local_addr(support::free_port());
    let prometheus_text = prometheus.to_string();
    let debug_port = support::free_port();
    let debug_port_text = debug_port.to_string();
    let service = Service::start_upstream(&[
        ("DEBUG_PORT", &debug_port_text),
        ("RUNTIME_ROOT", &runtime.root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", &prometheus_text),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "info"),
        ("LOG_FORMAT", "json"),
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("NEAR_LIMIT_RATIO", "0.9"),
    ]);
    assert_eq!(service.admin_get("/healthcheck").status, 200);

    let mut client = grpc::rls_client(service.grpc_addr).await;
    let ask = || request("upstream", vec![descriptor(&[("k", "v")])]);
    for _ in 0..2 {
        let response = grpc::should_rate_limit(&mut client, ask()).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    let over = grpc::should_rate_limit(&mut client, ask()).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert!(
        over.response_headers_to_add
            .iter()
            .any(|h| h.key == "X-Left" && h.value == "0"),
        "LIMIT_REMAINING_HEADER not applied: {:?}",
        over.response_headers_to_add
    );

    // The counts went to the Redis named by REDIS_URL, under CACHE_KEY_PREFIX.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", "6379", "--scan", "--pattern"])
            .arg(format!("{prefix}*"))
            .output()
            .expect("run redis-cli");
        if !String::from_utf8_lossy(&keys.stdout).trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no key under {prefix} in Redis");
        std::thread::sleep(Duration::from_millis(50));
    }

    // DEBUG_HOST/DEBUG_PORT: upstream's debug listener with /rlconfig.
    let debug = support::local_addr(debug_port);
    let rlconfig =
        support::http_get(debug, "/rlconfig", &[]).expect("GET /rlconfig on the debug port");
    assert_eq!(rlconfig.status, 200);
    assert!(
        rlconfig.body_text().contains("upstream"),
        "{}",
        rlconfig.body_text()
    );

    // USE_PROMETHEUS: the metrics on PROMETHEUS_ADDR at PROMETHEUS_PATH.
    let scraped = support::http_get(prometheus, "/stats/prometheus", &[]).expect("scrape");
    assert_eq!(scraped.status, 200);
    let text = scraped.body_text();
    assert!(text.contains("rls_requests_total"), "{text}");

    // Upstream's per-rule stats under its Prometheus mapping's names, next to ours. Limit 2,
    // NEAR_LIMIT_RATIO=0.9: threshold floor(1.8) = 1, so the 2nd hit is near the limit.
    let labels = [
        ("domain", "upstream"),
        ("key1", "k"),
        ("rule", "upstream.k"),
    ];
    for (stat, expected) in [
        ("total_hits", 3.0),
        ("within_limit", 2.0),
        ("near_limit", 1.0),
        ("over_limit", 1.0),
        ("shadow_mode", 0.0),
    ] {
        let name = format!("ratelimit_service_rate_limit_{stat}");
        assert_eq!(
            support::metrics::sample(&text, &name, &labels),
            Some(expected),
            "{name}:\n{text}"
        );
    }

    let log = service.log_tail(200);
    let warned = log
        .lines()
        .any(|l| l.contains("\"WARN\"") && l.contains("NEAR_LIMIT_RATIO"));
    assert!(
        log.contains("\"level\":\"INFO\"") && !warned,
        "LOG_FORMAT=json, and NEAR_LIMIT_RATIO applied without a warning:\n{log}"
    );
    support::assert_mentions(
        &log,
        "setting --near-limit-ratio=0.9 from upstream's NEAR_LIMIT_RATIO",
        "the start log",
    );
}

/// The binary, without arguments, with only `env`, must stop at start naming `variable`,
/// with the exit code of an invalid setting.
fn assert_refused(env: &[(&str, &str)], variable: &str) {
    assert_stops(2, env, variable);
}

/// The binary, without arguments, with only `env`, must exit with `code` naming `needle`.
fn assert_stops(code: i32, env: &[(&str, &str)], needle: &str) {
    let (output, _, ended) = run_within(
        Command::new(support::binary())
            .env_clear()
            .envs(env.iter().copied())
            .env("HOST", "127.0.0.1")
            .env("PORT", "0")
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", "0")
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", "0"),
        Duration::from_secs(15),
    );
    assert!(ended, "{env:?} was not refused at start");
    let text = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{env:?}: {text}");
    support::assert_mentions(&text, needle, &format!("{env:?}: the error"));
}

#[test]
fn unsupported_or_bad_settings_stop_start_up_naming_the_variable() {
    let runtime = runtime_root();
    let base = [
        ("RUNTIME_ROOT", runtime.root.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut env: Vec<(&str, &str)> = base.to_vec();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k, v));
        }
        env
    };
    assert_refused(&with(&[("BACKEND_TYPE", "memcache")]), "BACKEND_TYPE");
    assert_refused(&with(&[("REDIS_PERSECOND", "true")]), "REDIS_PERSECOND");
    assert_refused(&with(&[("REDIS_TYPE", "ring")]), "REDIS_TYPE");
    assert_refused(
        &with(&[("REDIS_URL", "redis://127.0.0.1:6379")]),
        "REDIS_URL",
    );
    assert_refused(&with(&[("REDIS_SOCKET_TYPE", "udp")]), "REDIS_SOCKET_TYPE");
    assert_refused(&with(&[("REDIS_SOCKET_TYPE", "unix")]), "REDIS_URL");
    assert_refused(
        &with(&[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_PATH", "metrics{x}"),
        ]),
        "PROMETHEUS_PATH",
    );
    assert_refused(
        &with(&[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", "prometheus:9090"),
        ]),
        "PROMETHEUS_ADDR",
    );
    assert_refused(
        &with(&[("GRPC_SERVER_USE_TLS", "true")]),
        "GRPC_SERVER_TLS_CERT",
    );
    // Upstream's default runtime directory does not exist here: the config error names it
    // (a failure at start, not an invalid setting).
    assert_stops(
        1,
        &[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
        ],
        "/srv/runtime_data/current/config",
    );
}

/// mTLS, the connection age, `/json` and `/healthcheck`, from upstream's variables alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_connection_age_and_json_from_upstreams_variables_alone() {
    use support::metrics::sample;
    use support::tls::{UpstreamMtls, tls_rls_client};

    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(10));
    let mtls = UpstreamMtls::new();
    let runtime = runtime_root();
    let prefix = unique_prefix();
    let env = [
        &runtime.env(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("CACHE_KEY_PREFIX", &prefix),
        ])[..],
        &mtls.env(),
        &[
            ("GRPC_MAX_CONNECTION_AGE", "300ms"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "1s"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
    ]
    .concat();
    let service = Service::start_upstream(&env);
    assert_eq!(service.admin_get("/healthcheck").status, 200);

    let mut client = tls_rls_client(service.grpc_addr, mtls.client(Some(&[UpstreamMtls::SAN])))
        .await
        .unwrap_or_else(|e| panic!("mTLS connect: {e}\n{}", service.log_tail(30)));
    let ask = || request("upstream", vec![descriptor(&[("k", "age")])]);
    let response = client
        .should_rate_limit(ask())
        .await
        .unwrap_or_else(|e| panic!("mTLS call: {e:?}\n{}", service.log_tail(30)))
        .into_inner();
    assert_eq!(response.overall_code, Code::Ok as i32);
    // Without a certificate: refused in the handshake, seen at connect or at the first call.
    let anonymous = match tls_rls_client(service.grpc_addr, mtls.client(None)).await {
        Ok(mut anonymous) => anonymous
            .should_rate_limit(ask())
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:?}")),
        Err(error) => Err(error),
    };
    assert!(
        anonymous.is_err(),
        "a client without a certificate was served"
    );

    // GRPC_MAX_CONNECTION_AGE: the connection is aged out and the channel reconnects.
    let accepted = |service: &Service| {
        sample(
            &service.metrics(),
            "rls_connections_accepted_total",
            &[("listener", "grpc")],
        )
        .unwrap_or(0.0)
    };
    let before = accepted(&service);
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted(&service) < before + 1.0 {
        assert!(
            Instant::now() < deadline,
            "no reconnection 10 s into a 300 ms GRPC_MAX_CONNECTION_AGE"
        );
        // Calls keep the channel busy; each may open the next connection.
        let _ = client.should_rate_limit(ask()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let json = support::http_post(
        service.http_addr,
        "/json",
        "application/json",
        br#"{"domain":"upstream","descriptors":[{"entries":[{"key":"k","value":"json"}]}]}"#,
    )
    .expect("POST /json");
    assert_eq!(json.status, 200, "{}", json.body_text());
    assert!(
        json.body_text().contains("\"overallCode\":\"OK\""),
        "{}",
        json.body_text()
    );
}

/// Upstream's default Redis connection: a Unix socket (REDIS_SOCKET_TYPE unset, REDIS_URL a
/// path), against a real `redis-server` listening only on that socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_a_unix_socket_as_upstreams_default() {
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(10));
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("redis.sock");
    let socket_text = socket.to_string_lossy().into_owned();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
            "--unixsocket",
        ])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server (apt-get install redis-server)");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "redis-server made no socket");
        assert!(
            redis.try_wait().expect("wait").is_none(),
            "redis-server exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _redis = Kill(redis);

    let runtime = runtime_root();
    let service = Service::start_upstream(&runtime.env(&[("REDIS_URL", &socket_text)]));
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::assert_admitted(&mut client, 1, "upstream", &[("k", "unix")]).await;

    // The replay reached the Redis behind the socket.
    let what = format!("a key in the Redis behind {socket_text}");
    service.wait_until(Duration::from_secs(10), &what, || {
        let keys = Command::new("redis-cli")
            .arg("-s")
            .arg(&socket)
            .args(["--scan"])
            .output()
            .expect("run redis-cli");
        let keys = String::from_utf8_lossy(&keys.stdout);
        if keys.trim().is_empty() {
            Err("no key".to_owned())
        } else {
            Ok(())
        }
    });
}

/// The next status a `Health/Watch` stream sends, within 10 s.
async fn next_status(
    stream: &mut tonic::Streaming<grpc::HealthCheckResponse>,
    what: &str,
) -> grpc::ServingStatus {
    let message = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .unwrap_or_else(|_| panic!("no health update for {what} within 10 s"));
    let response = message
        .unwrap_or_else(|status| panic!("Health/Watch for {what} failed: {status:?}"))
        .unwrap_or_else(|| panic!("Health/Watch for {what} ended"));
    grpc::ServingStatus::try_from(response.status)
        .unwrap_or_else(|e| panic!("unknown status for {what}: {e:?}"))
}

/// gRPC health under upstream's name `ratelimit`, as its image is probed: SERVING like
/// `/healthcheck` (here with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED and a config loaded), and
/// NOT_SERVING at SIGTERM; `""` and ours turn NOT_SERVING at SIGTERM too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_under_upstreams_name_follows_healthcheck() {
    let runtime = runtime_root();
    let mut service = Service::start_upstream(&[
        ("RUNTIME_ROOT", &runtime.root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
    ]);
    assert_eq!(service.admin_get("/healthcheck").status, 200);

    let mut health = grpc::health_client(service.grpc_addr).await;
    let mut watch = async |name: &str| {
        health
            .watch(grpc::HealthCheckRequest {
                service: name.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("Health/Watch({name:?}): {status:?}"))
            .into_inner()
    };
    let mut upstream = watch("ratelimit").await;
    let mut overall = watch("").await;
    let mut ours = watch("envoy.service.ratelimit.v3.RateLimitService").await;
    let mut streams = [
        (&mut upstream, "ratelimit"),
        (&mut overall, "\"\""),
        (&mut ours, "ours"),
    ];
    for (stream, what) in &mut streams {
        assert_eq!(
            next_status(stream, what).await,
            grpc::ServingStatus::Serving,
            "{what} before SIGTERM"
        );
    }

    service.send_signal("TERM");
    for (stream, what) in &mut streams {
        assert_eq!(
            next_status(stream, what).await,
            grpc::ServingStatus::NotServing,
            "{what} after SIGTERM"
        );
    }
    // Open streams hold the drain; closing them lets the process exit now.
    drop((upstream, overall, ours, health));
    assert!(
        service.wait_exit(Duration::from_secs(30)).is_some(),
        "did not exit after SIGTERM"
    );
}

/// Upstream's stats for a `detailed_metric` rule in shadow mode: one series per request value,
/// capped by `--max-metric-series-per-rule` like ours (further values count under the rule's
/// own name), `shadow_mode` counted with `over_limit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_stats_for_detailed_rules_share_the_series_cap() {
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(10));
    let runtime = UpstreamRuntime::new(
        "domain: stats
descriptors:
  - key: user
    detailed_metric: true
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
",
    );
    let prefix = unique_prefix();
    let service = Service::start_upstream(&runtime.env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("RLS_MAX_METRIC_SERIES_PER_RULE", "1"),
    ]));
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for user in ["a", "a", "b"] {
        let response = grpc::should_rate_limit(
            &mut client,
            request("stats", vec![descriptor(&[("user", user)])]),
        )
        .await;
        assert_eq!(response.overall_code, Code::Ok as i32, "shadow mode");
    }
    let text = service.metrics();
    let stat = |stat: &str, rule: &str, key1: &str| {
        support::metrics::sample(
            &text,
            &format!("ratelimit_service_rate_limit_{stat}"),
            &[("domain", "stats"), ("key1", key1), ("rule", rule)],
        )
    };
    // The cap counts series of ours (one per value and outcome): user=a within the limit is
    // the one allowed; user=a over it (shadow) and user=b count under the rule's own name.
    // Limit 1 and the default ratio 0.8: every accepted hit is near the limit.
    for (name, a, rule) in [
        ("total_hits", 1.0, 2.0),
        ("within_limit", 1.0, 1.0),
        ("near_limit", 1.0, 1.0),
        ("over_limit", 0.0, 1.0),
        ("shadow_mode", 0.0, 1.0),
    ] {
        assert_eq!(
            stat(name, "stats.user_a", "user_a"),
            Some(a),
            "{name}\n{text}"
        );
        assert_eq!(
            stat(name, "stats.user", "user"),
            Some(rule),
            "{name}\n{text}"
        );
    }
    assert_eq!(stat("total_hits", "stats.user_b", "user_b"), None, "{text}");
}
