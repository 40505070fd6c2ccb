use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use tonic_health::pb::health_server::Health as _;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tonic_health::server::HealthService;

use super::health::Health;
use super::*;
use crate::environment::{Environment, Origins};
use crate::transport::TransportSettings;

mod precedence;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `serve --config x.yaml extra…` parsed as the binary parses it: the arguments and where
/// clap found each (the process's own `RLS_*` variables are not expected to be set).
fn args(extra: &[&str]) -> (ServeArgs, Origins) {
    parse_argv(["serve", "--config", "x.yaml"].iter().chain(extra))
}

fn parse_argv<'a>(argv: impl IntoIterator<Item = &'a &'a str>) -> (ServeArgs, Origins) {
    let mut command = Cli::command();
    command.build();
    let matches = command.clone().try_get_matches_from(argv).expect("parse");
    let origins = Origins::from_matches(&command, &matches, &[]);
    let args = Cli::from_arg_matches(&matches).expect("arguments").serve;
    (args, origins)
}

/// `ServeSettings::from_args` with no variable set.
fn settings((args, origins): (ServeArgs, Origins)) -> anyhow::Result<ServeSettings> {
    ServeSettings::from_args(args, origins, &Environment::default())
}

/// A background task that dies (here: panics) must turn `/healthz` and gRPC health to
/// NOT_SERVING, or an orchestrator keeps sending traffic to a process that no longer replays,
/// flushes or syncs; and the process must still shut down cleanly.
#[tokio::test(start_paused = true)]
async fn a_task_that_dies_makes_the_process_unhealthy_and_shutdown_still_works() {
    let (reporter, _service) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;
    let health = Health {
        serving: Arc::new(AtomicBool::new(true)),
        reporter: reporter.clone(),
        upstream: None,
    };
    let mut supervisor = Supervisor::new();
    supervisor.spawn(Stage::Background, "replay and reaping", async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        panic!("replay interval of zero");
    });
    let finish = supervisor.stop_signal(Stage::Background);
    supervisor.spawn(Stage::Background, "global counters", async move {
        finish.cancelled().await;
        Ok(())
    });
    supervisor
        .until(tokio::time::sleep(Duration::from_secs(1)), |_| {
            health.not_serving()
        })
        .await;

    assert!(
        !health.serving.load(Ordering::Acquire),
        "/healthz must fail"
    );
    let name = <RateLimitServiceServer<RateLimiter> as tonic::server::NamedService>::NAME;
    let status = HealthService::from_health_reporter(reporter)
        .check(tonic::Request::new(HealthCheckRequest {
            service: name.to_owned(),
        }))
        .await
        .map(|r| r.into_inner().status);
    assert_eq!(status.ok(), Some(ServingStatus::NotServing as i32));
    let report = supervisor.shutdown(Duration::from_secs(1)).await;
    assert!(
        report.failed.is_empty() && report.aborted.is_empty(),
        "{report:?}"
    );
}

/// The flags' defaults are the transport's documented defaults (they are written twice).
#[test]
fn transport_flag_defaults_match_the_transport_defaults() {
    let settings = settings(args(&[])).expect("valid");
    assert_eq!(
        format!("{:?}", settings.transport),
        format!("{:?}", TransportSettings::default())
    );
}

#[test]
fn a_zero_transport_bound_is_refused_at_start() {
    let error = settings(args(&["--max-connections", "0"]))
        .expect_err("refused")
        .to_string();
    assert!(error.contains("--max-connections"), "{error}");
}

#[test]
fn zero_or_absurd_counts_are_refused_at_start() {
    for (flag, value) in [
        ("--max-cells", "0"),
        ("--max-cells", "1000000000000"),
        ("--max-pending-replay", "0"),
        ("--max-pending-replay", "1000000000000"),
    ] {
        let error = settings(args(&[flag, value]))
            .expect_err("refused")
            .to_string();
        assert!(error.contains(flag), "{flag} {value}: {error}");
    }
}

#[test]
fn the_region_is_checked_once_into_its_type() {
    let local = settings(args(&[])).expect("valid");
    assert_eq!(local.region, Region::local());
    assert!(matches!(local.regional, Regional::InProcess));
    assert!(local.global.is_none());
    let named = settings(args(&["--region", "eu-west"])).expect("valid");
    assert_eq!(named.region.as_str(), "eu-west");
    let long = "r".repeat(MAX_REGION_BYTES + 1);
    for bad in ["", long.as_str()] {
        let error = settings(args(&["--region", bad]))
            .expect_err("refused")
            .to_string();
        assert!(error.contains("--region"), "{error}");
    }
    let error = settings(args(&["--database-url", "sqlite::memory:"]))
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("--region (RLS_REGION) is required"),
        "{error}"
    );
    assert!(NonZeroDuration::new(Duration::ZERO).is_none());
}

/// The embedded default in process: `run` on port-0 listeners, one ShouldRateLimit call
/// through tonic's client, then the shutdown future resolves and `run` returns.
#[tokio::test]
async fn run_serves_on_given_listeners_and_returns_on_shutdown() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("limits.yaml");
    std::fs::write(
        &config,
        "domain: embedded\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n",
    )
    .expect("write config");
    let config = config.to_str().expect("utf-8 path");
    let argv = ["serve", "--config", config, "--drain-timeout", "2s"];
    let settings = settings(parse_argv(&argv)).expect("valid");
    let loopback = |_| TcpListener::bind("127.0.0.1:0");
    let listeners = Listeners {
        grpc: loopback(()).await.expect("bind gRPC"),
        http: loopback(()).await.expect("bind HTTP"),
        metrics: None,
        debug: None,
    };
    let grpc_addr = listeners.grpc.local_addr().expect("gRPC address");

    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(run(settings, listeners, stop.clone().cancelled_owned()));

    let mut client = RateLimitServiceClient::connect(format!("http://{grpc_addr}"))
        .await
        .expect("connect");
    let request = || RateLimitRequest {
        domain: "embedded".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: "alice".to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let first = client.should_rate_limit(request()).await.expect("call");
    assert_eq!(first.into_inner().overall_code, Code::Ok as i32);
    let second = client.should_rate_limit(request()).await.expect("call");
    assert_eq!(second.into_inner().overall_code, Code::OverLimit as i32);
    drop(client);

    stop.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("run returns after the shutdown future resolves")
        .expect("run did not panic");
    outcome.expect("run succeeded");
}

/// A Redis URL or prefix that can never work is refused with the other settings errors,
/// before any runtime or task starts (no runtime here).
#[test]
fn a_bad_redis_url_or_prefix_is_refused_with_the_settings() {
    for (flag, value) in [
        ("--redis-url", "http://127.0.0.1:6379"),
        ("--redis-url", "not a url"),
        ("--redis-prefix", "{rl}:"),
    ] {
        let mut extra = vec![flag, value];
        if flag != "--redis-url" {
            extra.extend(["--redis-url", "redis://127.0.0.1:6379"]);
        }
        let error = settings(args(&extra)).expect_err("refused").to_string();
        assert!(
            error.contains("invalid --redis-url"),
            "{flag} {value}: {error}"
        );
    }
    let taken = settings(args(&["--redis-url", "redis://127.0.0.1:6379"]))
        .expect("a usable URL, Redis need not answer");
    assert!(matches!(taken.regional, Regional::Redis(_)));
}

#[test]
fn redis_flags_without_a_redis_url_are_refused() {
    for extra in [
        &["--redis-sentinel-master", "m"][..],
        &["--redis-tls-ca", "/ca.pem"][..],
        &["--redis-tls-skip-hostname-verification"][..],
    ] {
        let error = settings(args(extra)).expect_err("no --redis-url");
        assert!(
            error.to_string().contains(&extra[0][2..]),
            "{extra:?}: {error}"
        );
    }
    // A TLS file is read at start: a missing one names the flag and the path.
    let error = settings(args(&[
        "--redis-url",
        "rediss://127.0.0.1:6380",
        "--redis-tls-ca",
        "/nonexistent/ca.pem",
    ]))
    .expect_err("missing CA file");
    let text = error.to_string();
    assert!(
        text.contains("--redis-tls-ca") && text.contains("/nonexistent/ca.pem"),
        "{text}"
    );
}

/// `--clock-skew` holds `never_above` windows to twice it only where decisions spend rights
/// (Redis or the global counters); one process alone decides them exactly whatever its clock.
#[test]
fn the_clock_margin_binds_never_above_windows_only_where_rights_are_spent() {
    let skew = ["--clock-skew", "600ms"];
    let margin = |extra: &[&str]| {
        let mut all = skew.to_vec();
        all.extend_from_slice(extra);
        settings(args(&all))
            .expect("settings")
            .limits
            .load
            .never_above_clock_skew
    };
    assert_eq!(margin(&[]), Duration::ZERO);
    assert_eq!(
        margin(&["--redis-url", "redis://127.0.0.1:6379"]),
        Duration::from_millis(600)
    );
    assert_eq!(
        margin(&["--database-url", "sqlite::memory:", "--region", "r"]),
        Duration::from_millis(600)
    );
}
