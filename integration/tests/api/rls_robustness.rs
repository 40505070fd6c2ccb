//! The process under abuse and in operation: oversized or malformed requests are refused
//! without taking the service down; health, admin endpoints and SIGTERM behave.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::Service;
use support::grpc::{
    self, Code, HealthCheckRequest, RateLimitDescriptor, ServingStatus, Unit, descriptor, request,
};
use support::metrics::{decisions, requests, sample};

const YAML: &str = "\
domain: robust
descriptors:
  - key: k
    value: v
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: ip
    rate_limit:
      unit: hour
      requests_per_unit: 100
";

#[tokio::test]
async fn bad_requests_are_refused_and_the_service_keeps_serving() {
    let (_dir, mut service) = support::serve_limits(YAML, &[]);
    let mut client = grpc::rls_client(service.grpc_addr).await;

    let cases: Vec<(&str, Vec<RateLimitDescriptor>, &str, &str)> = vec![
        (
            "5,000 descriptors",
            (0..5_000)
                .map(|i| descriptor(&[("k", &i.to_string())]))
                .collect(),
            "robust",
            "descriptors",
        ),
        // Over the 4 KiB entry bound, under the transport's message bound.
        (
            "an 8 KiB value",
            vec![descriptor(&[("k", &"x".repeat(8 << 10))])],
            "robust",
            "bytes",
        ),
        (
            "an 8 KiB key",
            vec![descriptor(&[(&"k".repeat(8 << 10), "v")])],
            "robust",
            "bytes",
        ),
        (
            "100 entries in one descriptor",
            vec![descriptor(
                &(0..100)
                    .map(|i| ("k", if i % 2 == 0 { "v" } else { "w" }))
                    .collect::<Vec<_>>(),
            )],
            "robust",
            "entries",
        ),
        (
            "an empty domain",
            vec![descriptor(&[("k", "v")])],
            "",
            "domain",
        ),
        ("no descriptors", vec![], "robust", "descriptor"),
    ];
    let rejected = cases.len();
    for (what, descriptors, domain, needle) in cases {
        let status = grpc::should_rate_limit_err(&mut client, request(domain, descriptors)).await;
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}\n--- service log ---\n{}",
            service.log_tail(20)
        );
        assert!(
            status.message().contains(needle),
            "{what}: the message should mention {needle:?}: {status:?}"
        );
        assert!(
            service.is_running(),
            "{what} killed the service:\n{}",
            service.log_tail(40)
        );
    }

    // A message over the transport's size limit is refused by the transport.
    let huge = vec![descriptor(&[("k", &"x".repeat(5 << 20))])];
    let status = grpc::should_rate_limit_err(&mut client, request("robust", huge)).await;
    assert!(
        matches!(
            status.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::InvalidArgument
        ),
        "5 MiB message: {status:?}"
    );
    assert!(
        service.is_running(),
        "a 5 MiB message killed the service:\n{}",
        service.log_tail(40)
    );

    // Odd but legal bytes in values are just values.
    for value in ["", "\0", "a\nb", "é😀", "%00", "../../etc/passwd", "*"] {
        let r = grpc::should_rate_limit(
            &mut client,
            request("robust", vec![descriptor(&[("ip", value)])]),
        )
        .await;
        assert_eq!(
            r.statuses[0].code,
            Code::Ok as i32,
            "value {value:?}: {r:?}"
        );
        assert!(
            r.statuses[0].current_limit.is_some(),
            "value {value:?}: {r:?}"
        );
    }

    // Still serving, on the same connection and on a new one.
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(3));
    let r = grpc::should_rate_limit(
        &mut client,
        request("robust", vec![descriptor(&[("k", "v")])]),
    )
    .await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
    let limit = r.statuses[0].current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (5, Unit::Minute as i32),
        "{r:?}"
    );
    assert_eq!(
        r.statuses[0].limit_remaining, 4,
        "refused requests counted nothing: {r:?}"
    );
    let mut fresh = grpc::rls_client(service.grpc_addr).await;
    let r = grpc::should_rate_limit(
        &mut fresh,
        request("robust", vec![descriptor(&[("k", "v")])]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 3, "{r:?}");
    assert!(service.is_running(), "{}", service.log_tail(40));

    let text = service.metrics();
    assert_eq!(
        requests(&text, "invalid_argument"),
        Some(rejected as f64),
        "{text}"
    );
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    let (_dir, service) = support::serve_limits(YAML, &[]);
    let mut health = grpc::health_client(service.grpc_addr).await;
    for name in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let response = health
            .check(HealthCheckRequest {
                service: name.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("Health/Check({name:?}) failed: {status:?}"))
            .into_inner();
        assert_eq!(
            ServingStatus::try_from(response.status),
            Ok(ServingStatus::Serving),
            "Health/Check({name:?}): {response:?}"
        );
    }
    let status = health
        .check(HealthCheckRequest {
            service: "no.such.Service".to_string(),
        })
        .await
        .expect_err("an unknown service has no health");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
}

#[tokio::test]
async fn admin_endpoints_answer() {
    let (_dir, service) = support::serve_limits(YAML, &[]);

    let r = service.admin_get("/healthz");
    assert_eq!(r.status, 200, "/healthz: {}", r.body_text());

    let r = service.admin_get("/rlconfig");
    assert_eq!(r.status, 200, "/rlconfig: {}", r.body_text());
    assert_eq!(
        r.body_text(),
        "robust.ip: unit=HOUR requests_per_unit=100, shadow_mode: false\n\
         robust.k_v: unit=MINUTE requests_per_unit=5, shadow_mode: false\n"
    );

    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::should_rate_limit(
        &mut client,
        request("robust", vec![descriptor(&[("k", "v")])]),
    )
    .await;

    let r = service.admin_get("/metrics");
    assert_eq!(r.status, 200, "/metrics: {}", r.body_text());
    let content_type = r.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain")
            || content_type.starts_with("application/openmetrics-text"),
        "/metrics content-type {content_type:?}"
    );
    let text = r.body_text();
    assert!(text.contains("# TYPE rls_requests counter"), "{text}");
    assert_eq!(requests(&text, "ok"), Some(1.0), "{text}");
    assert_eq!(
        decisions(&text, "robust", "robust.k_v", "within_limit"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "rls_config_reloads_total", &[("result", "ok")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "rls_config_rules", &[]), Some(2.0), "{text}");

    let r = service.admin_get("/no-such-page");
    assert_eq!(r.status, 404, "{}", r.body_text());
}

// Multi-threaded: the client's connection task must keep running (answer the server's
// GOAWAY and PING) while this thread blocks waiting for the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_promptly() {
    let (_dir, mut service) = support::serve_limits(YAML, &[]);
    // A client with an open HTTP/2 connection must not hold the shutdown up.
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::should_rate_limit(
        &mut client,
        request("robust", vec![descriptor(&[("k", "v")])]),
    )
    .await;

    let took = service.terminate_cleanly(Duration::from_secs(5));
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(client);
}

/// Connections that stop talking (a frozen client, a peer gone behind a partition, a
/// half-open TCP connection) must not hold the shutdown up forever: an orchestrator
/// would end up SIGKILLing the process, and pending work would be lost.
#[tokio::test]
async fn sigterm_exits_despite_unresponsive_connections() {
    use std::io::Write;
    use std::net::TcpStream;
    let (_dir, path) = support::limits_file(YAML);
    let mut service = Service::start(&path, &["--drain-timeout", "1s"]);
    let pid = service.pid();

    // gRPC port: a TCP connection that never sends a byte.
    let silent = TcpStream::connect(service.grpc_addr).expect("connect to the gRPC port");
    // gRPC port: an HTTP/2 connection that sent its preface and SETTINGS, then went
    // quiet; it never acknowledges the server's SETTINGS, GOAWAY or PING.
    let mut quiet = TcpStream::connect(service.grpc_addr).expect("connect to the gRPC port");
    quiet
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .expect("write the HTTP/2 preface");
    // Admin port: a request whose headers never end.
    let mut partial = TcpStream::connect(service.http_addr).expect("connect to the admin port");
    partial
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .expect("write half a request");
    // The service has accepted all three before the signal.
    let port_of = |s: &TcpStream| s.local_addr().expect("a bound client socket").port();
    let (silent_port, quiet_port, partial_port) =
        (port_of(&silent), port_of(&quiet), port_of(&partial));
    support::eventually("the three connections accepted", true, || {
        let grpc = support::process::accepted_peers(pid, service.grpc_addr.port());
        let admin = support::process::accepted_peers(pid, service.http_addr.port());
        grpc.is_some_and(|p| p.contains(&silent_port) && p.contains(&quiet_port))
            && admin.is_some_and(|p| p.contains(&partial_port))
    });

    // With a 1 s drain deadline the process must be gone well within 6 s.
    service.send_signal("TERM");
    let status = service.wait_exit(Duration::from_secs(6));
    let log = service.log_tail(30);
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running 6 s after SIGTERM (--drain-timeout 1s) while unresponsive \
             connections are open\n--- service log ---\n{log}"
        )
    });
    assert!(
        log.contains("drain timeout"),
        "the forced close should be logged\n--- service log ---\n{log}"
    );
    assert!(
        status.success(),
        "exit status after SIGTERM: {status}\n--- service log ---\n{log}"
    );
    drop((silent, quiet, partial));
}

/// `detailed_metric` labels series with request values: a client sending unique values must
/// not grow `/metrics` (and the process) without end. Past `--max-metric-series-per-rule`,
/// new values count in the rule's own series.
#[tokio::test]
async fn detailed_metric_series_are_capped_per_rule() {
    let (_dir, path) = support::limits_file(
        "domain: detailed\ndescriptors:\n  - key: api_key\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
    );
    let service = Service::start(&path, &["--max-metric-series-per-rule", "10"]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for i in 0..200 {
        let key = format!("secret-{i}");
        let r = grpc::should_rate_limit(
            &mut client,
            request("detailed", vec![descriptor(&[("api_key", &key)])]),
        )
        .await;
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    let text = service.metrics();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("rls_descriptor_decisions_total{domain=\"detailed\""))
        .collect();
    assert_eq!(
        series.len(),
        11,
        "10 detailed series and the rule's own: {series:#?}"
    );
    assert_eq!(
        decisions(&text, "detailed", "detailed.api_key", "within_limit"),
        Some(190.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "rls_detailed_series_capped_total", &[]),
        Some(190.0)
    );
    assert!(
        !text.contains("secret-150"),
        "a value past the cap is exposed"
    );
}
