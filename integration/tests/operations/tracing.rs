//! OpenTelemetry tracing end to end: the real binary exporting to a test collector
//! (`support::otlp`) over OTLP/gRPC and OTLP/HTTP; its decision span a child of the trace
//! the caller sent (Envoy's own tracer, B3 headers, W3C `traceparent`); upstream's
//! `TRACING_*` variables as Envoy Gateway sets them; sampling decided on the caller's headers
//! (an unsampled request exports nothing, nor do its Redis calls); descriptor values kept out of spans
//! unless asked for; a collector that is down or never answers costs no request anything.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{self, Code, descriptor, request};
use support::otlp::{Collector, ReceivedSpan, Silent};
use support::{Envoy, Service, UpstreamRuntime};
use tonic::metadata::MetadataValue;

/// Spans are exported at least once a second; Envoy's tracer every 5 s.
const EXPORTED: Duration = Duration::from_secs(20);

const LIMITS: &str = "
domain: traced
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
  - key: strict
    rate_limit: { unit: hour, requests_per_unit: 1, name: strict_rule }
";

fn limits() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), LIMITS).expect("write limits");
    file
}

fn decisions(spans: &[ReceivedSpan]) -> Vec<&ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.name == "should_rate_limit")
        .collect()
}

/// A gRPC request with `metadata`, answered OK.
async fn ask(service: &Service, user: &str, metadata: &[(&'static str, &str)]) {
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let mut call = tonic::Request::new(request("traced", vec![descriptor(&[("user", user)])]));
    for (name, value) in metadata {
        let value: MetadataValue<_> = value.parse().expect("metadata value");
        call.metadata_mut().insert(*name, value);
    }
    let response = client
        .should_rate_limit(call)
        .await
        .unwrap_or_else(|e| panic!("call: {e:?}\n{}", service.log_tail(30)))
        .into_inner();
    assert_eq!(grpc::overall(&response), Code::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_and_w3c_headers_make_the_decision_a_child_of_the_callers_trace() {
    let collector = Collector::start();
    let limits = limits();
    let endpoint = collector.grpc_endpoint();
    let service = Service::start(
        limits.path(),
        &[
            "--tracing",
            "--tracing-protocol",
            "grpc",
            "--tracing-endpoint",
            &endpoint,
        ],
    );
    let (b3_trace, b3_parent) = ("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1");
    let single = format!("{b3_trace}-{b3_parent}-1");
    ask(&service, "single", &[("b3", &single)]).await;
    let (multi_trace, multi_parent) = ("463ac35c9f6413ad48485a3953bb6124", "0020000000000001");
    ask(
        &service,
        "multi",
        &[
            ("x-b3-traceid", multi_trace),
            ("x-b3-spanid", multi_parent),
            ("x-b3-sampled", "1"),
        ],
    )
    .await;
    // `POST /json` reads the same headers.
    let (w3c_trace, w3c_parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let traceparent = format!("00-{w3c_trace}-{w3c_parent}-01");
    let body = r#"{"domain":"traced","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}"#;
    let answer = support::http_post_with(
        service.http_addr,
        "/json",
        &[
            ("Content-Type", "application/json"),
            ("traceparent", traceparent.as_str()),
        ],
        body.as_bytes(),
    )
    .expect("POST /json");
    assert_eq!(answer.status, 200, "{}", answer.body_text());

    let spans = collector.wait_for(EXPORTED, "three decision spans", |spans| {
        decisions(spans).len() >= 3
    });
    for (trace, parent, via) in [
        (b3_trace, b3_parent, "b3 single header"),
        (multi_trace, multi_parent, "b3 multi-header"),
        (w3c_trace, w3c_parent, "traceparent on /json"),
    ] {
        let span = decisions(&spans)
            .into_iter()
            .find(|s| s.trace_id == trace)
            .unwrap_or_else(|| panic!("no decision span in trace {trace} ({via}): {spans:#?}"));
        assert_eq!(span.parent_span_id, parent, "{via}");
        assert_eq!(span.service, "gcounter-rls");
        assert_eq!(span.attribute("rls.domain"), Some("traced"));
        assert_eq!(span.attribute("rls.descriptors"), Some("1"));
        assert_eq!(span.attribute("rls.overall_code"), Some("OK"));
        assert!(
            matches!(span.attribute("rls.decided"), Some("warm" | "cold")),
            "{span:#?}"
        );
        assert_eq!(span.via, "grpc");
    }
}

/// Sampling is decided on the caller's headers. At a rate of 0: what the caller sampled is
/// exported (W3C with its trace state, B3 debug in the single header, B3 debug in the multi
/// headers, a lone `b3: 1`), each span as it was before sampling moved ahead of it (its parent,
/// trace state, kind, flags, attributes); what the caller did not sample, what it left to this
/// service (B3 deferred) and what starts here (no context, a malformed one) exports nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_sampling_decision_is_followed_before_anything_is_built() {
    let collector = Collector::start();
    let limits = limits();
    let endpoint = collector.http_endpoint();
    let service = Service::start(
        limits.path(),
        &[
            "--tracing",
            "--tracing-sampling-rate",
            "0",
            "--tracing-endpoint",
            &endpoint,
        ],
    );
    let span = "b7ad6b7169203331";
    let trace = |n: u8| format!("{n:x}af7651916cd43dd8448eb211c80319c");
    let unsampled: [Vec<(&'static str, String)>; 7] = [
        vec![("traceparent", format!("00-{}-{span}-00", trace(1)))],
        vec![("b3", format!("{}-{span}-0", trace(2)))],
        vec![
            ("x-b3-traceid", trace(3)),
            ("x-b3-spanid", span.to_owned()),
            ("x-b3-sampled", "0".to_owned()),
        ],
        // Deferred to this service: sampled at the rate.
        vec![("b3", format!("{}-{span}", trace(4)))],
        vec![("b3", "0".to_owned())],
        vec![("traceparent", format!("00-{}-{span}-1", trace(5)))],
        vec![],
    ];
    for (n, headers) in unsampled.iter().enumerate() {
        let metadata: Vec<(&'static str, &str)> =
            headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ask(&service, &format!("unsampled-{n}"), &metadata).await;
    }
    let tracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
    let w3c = format!("00-{}-{span}-01", trace(6));
    ask(
        &service,
        "w3c",
        &[("traceparent", &w3c), ("tracestate", tracestate)],
    )
    .await;
    ask(
        &service,
        "b3-debug",
        &[("b3", &format!("{}-{span}-d", trace(7)))],
    )
    .await;
    let multi = trace(8);
    ask(
        &service,
        "b3-flags",
        &[
            ("x-b3-traceid", &multi),
            ("x-b3-spanid", span),
            ("x-b3-flags", "1"),
        ],
    )
    .await;
    // Exported in the order they ended: once the last is in, any before it would be.
    ask(&service, "b3-lone", &[("b3", "1")]).await;

    let spans = collector.wait_for(EXPORTED, "four decision spans", |spans| {
        decisions(spans).len() >= 4
    });
    let decided = decisions(&spans);
    assert_eq!(decided.len(), 4, "{spans:#?}");
    for (n, via) in [(6, "traceparent"), (7, "b3 debug"), (8, "x-b3-flags")] {
        let exported = decided
            .iter()
            .find(|s| s.trace_id == trace(n))
            .unwrap_or_else(|| panic!("{via}: no span in its trace: {spans:#?}"));
        assert_eq!(exported.parent_span_id, span, "{via}");
        // A server span, sampled, its parent remote.
        assert_eq!(exported.kind, 2, "{via}");
        assert_eq!(exported.flags, 0x301, "{via}");
        assert_eq!(exported.attribute("rls.domain"), Some("traced"), "{via}");
        assert_eq!(exported.attribute("rls.overall_code"), Some("OK"), "{via}");
        assert_eq!(
            exported.attribute("rpc.method"),
            Some("ShouldRateLimit"),
            "{via}"
        );
        let expected_state = if n == 6 { tracestate } else { "" };
        assert_eq!(exported.trace_state, expected_state, "{via}");
    }
    let lone = decided
        .iter()
        .find(|s| !(6..=8).any(|n| s.trace_id == trace(n)))
        .expect("the span of the lone b3: 1");
    assert_eq!(
        lone.parent_span_id, "",
        "a trace that starts here: {lone:#?}"
    );
    assert_eq!(lone.flags, 0x101, "{lone:#?}");
}

/// An unsampled request that waits for Redis: the spans of its calls are not sampled either
/// (at a rate of 1 they would otherwise start traces of their own); a sampled one's Redis read
/// is its child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_request_s_redis_calls_are_not_sampled() {
    support::redis_admin::require_local_redis();
    let collector = Collector::start();
    let limits = limits();
    let endpoint = collector.http_endpoint();
    let prefix = format!(
        "tracing-unsampled-{}-{}:",
        std::process::id(),
        support::now_ms()
    );
    let service = Service::start(
        limits.path(),
        &[
            "--tracing",
            "--tracing-sampling-rate",
            "1",
            "--tracing-endpoint",
            &endpoint,
            "--redis-url",
            support::redis_admin::LOCAL_REDIS_URL,
            "--redis-prefix",
            &prefix,
        ],
    );
    let span = "b7ad6b7169203331";
    let unsampled_trace = "1af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("00-{unsampled_trace}-{span}-00");
    let b3 = format!("{unsampled_trace}-{span}-0");
    let unsampled: [&[(&'static str, &str)]; 3] = [
        &[("traceparent", &traceparent)],
        &[("b3", &b3)],
        &[
            ("x-b3-traceid", unsampled_trace),
            ("x-b3-spanid", span),
            ("x-b3-sampled", "0"),
        ],
    ];
    for (n, metadata) in unsampled.iter().enumerate() {
        ask(&service, &format!("cold-unsampled-{n}"), metadata).await;
    }
    let sampled_trace = "2af7651916cd43dd8448eb211c80319c";
    let sampled = format!("00-{sampled_trace}-{span}-01");
    ask(&service, "cold-sampled", &[("traceparent", &sampled)]).await;

    let spans = collector.wait_for(
        EXPORTED,
        "the sampled decision and its Redis read",
        |spans| {
            !decisions(spans).is_empty()
                && spans
                    .iter()
                    .any(|s| s.name == "regional.read" && s.trace_id == sampled_trace)
        },
    );
    let decided = decisions(&spans);
    assert_eq!(decided.len(), 1, "{spans:#?}");
    assert_eq!(decided[0].trace_id, sampled_trace);
    assert_eq!(decided[0].attribute("rls.decided"), Some("cold"));
    // Its reads (a cold decision reads the current and the previous window), and no other.
    let reads: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "regional.read").collect();
    assert!(
        reads
            .iter()
            .all(|read| read.trace_id == sampled_trace && read.parent_span_id == decided[0].span_id),
        "only the sampled request's reads: {spans:#?}"
    );
    assert!(
        !spans.iter().any(|s| s.trace_id == unsampled_trace),
        "{spans:#?}"
    );
}

/// An OVER_LIMIT decision's span names the rule that refused it; an OK one names none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_s_span_names_the_rule() {
    let collector = Collector::start();
    let limits = limits();
    let endpoint = collector.http_endpoint();
    let service = Service::start(
        limits.path(),
        &["--tracing", "--tracing-endpoint", &endpoint],
    );
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let strict = || request("traced", vec![descriptor(&[("strict", "s")])]);
    let codes = [
        grpc::should_rate_limit(&mut client, strict()).await,
        grpc::should_rate_limit(&mut client, strict()).await,
    ]
    .map(|r| grpc::overall(&r));
    assert_eq!(codes, [Code::Ok, Code::OverLimit]);
    let spans = collector.wait_for(EXPORTED, "two decision spans", |spans| {
        decisions(spans).len() >= 2
    });
    let named: Vec<(Option<&str>, Option<&str>)> = decisions(&spans)
        .iter()
        .map(|s| {
            (
                s.attribute("rls.overall_code"),
                s.attribute("rls.limited_by"),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            (Some("OK"), None),
            (Some("OVER_LIMIT"), Some("strict_rule"))
        ],
        "{spans:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_values_stay_out_of_spans_unless_asked_for() {
    let collector = Collector::start();
    let limits = limits();
    let endpoint = collector.http_endpoint();
    for (flags, user) in [
        (vec![], "secret-by-default"),
        (vec!["--tracing-descriptor-values"], "shown-on-request"),
    ] {
        let mut args = vec!["--tracing", "--tracing-endpoint", endpoint.as_str()];
        args.extend(flags.iter().copied());
        let service = Service::start(limits.path(), &args);
        ask(&service, user, &[]).await;
        let spans = collector.wait_for(EXPORTED, "the decision span", |spans| {
            decisions(spans)
                .iter()
                .any(|s| s.attribute("rls.descriptors").is_some() && s.via == "http")
                && spans.len() >= if user == "secret-by-default" { 1 } else { 2 }
        });
        let mentions = |span: &ReceivedSpan| {
            span.attributes
                .iter()
                .any(|(_, value)| value.contains(user))
        };
        let span = decisions(&spans)
            .into_iter()
            .next_back()
            .expect("a decision span");
        if flags.is_empty() {
            assert!(
                !spans.iter().any(mentions),
                "a descriptor value was exported: {spans:#?}"
            );
        } else {
            assert_eq!(
                span.attribute("rls.descriptor_entries"),
                Some(format!("user={user}").as_str()),
                "{span:#?}"
            );
        }
    }
}

/// As Envoy Gateway's rate-limit Deployment sets them (internal/infrastructure/kubernetes/
/// ratelimit/resource.go), with upstream's Redis: the decision span and the Redis read it
/// made, its child, over OTLP/HTTP (upstream's default protocol).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_tracing_variables_start_the_service_and_export_spans() {
    let collector = Collector::start();
    let runtime = UpstreamRuntime::new(
        "domain: upstream\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n",
    );
    let endpoint = collector.http_endpoint();
    let prefix = format!("tracing-{}-{}:", std::process::id(), support::now_ms());
    let service = Service::start_upstream(&runtime.env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
        ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-7d4b9-x2x7q"),
        ("TRACING_SAMPLING_RATE", "1.0"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
    ]));
    let mut client = grpc::rls_client(service.grpc_addr).await;
    grpc::assert_admitted(&mut client, 1, "upstream", &[("k", "gateway")]).await;

    let spans = collector.wait_for(EXPORTED, "the decision and its Redis read", |spans| {
        !decisions(spans).is_empty() && spans.iter().any(|s| s.name == "regional.read")
    });
    let decision = decisions(&spans)[0];
    assert_eq!(decision.service, "envoy-ratelimit");
    assert_eq!(
        decision.resource_attribute("service.namespace"),
        Some("envoy-gateway-system")
    );
    assert_eq!(
        decision.resource_attribute("service.instance.id"),
        Some("envoy-ratelimit-7d4b9-x2x7q")
    );
    assert_eq!(decision.via, "http");
    assert_eq!(decision.attribute("rls.decided"), Some("cold"));
    let read = spans
        .iter()
        .find(|s| s.name == "regional.read")
        .expect("a Redis read");
    assert_eq!(read.trace_id, decision.trace_id, "{spans:#?}");
    assert_eq!(read.parent_span_id, decision.span_id, "{spans:#?}");
    assert_eq!(read.attribute("rls.origin"), Some("redis"));
}

/// Tracing on, the collector a closed port (gRPC) or a listener that never answers (HTTP),
/// with a small queue: every request is still answered, and correctly (the 4th of a limit of
/// 3 is denied); the spans that found no room are counted as dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_silent_costs_requests_nothing() {
    let silent = Silent::start();
    let closed = format!("http://{}", support::local_addr(support::free_port()));
    let limits = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        limits.path(),
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n",
    )
    .expect("write limits");
    for (protocol, endpoint) in [("grpc", closed.clone()), ("http", silent.endpoint())] {
        let service = Service::start(
            limits.path(),
            &[
                "--tracing",
                "--tracing-protocol",
                protocol,
                "--tracing-endpoint",
                &endpoint,
                "--tracing-queue-size",
                "4",
            ],
        );
        let mut client = grpc::rls_client(service.grpc_addr).await;
        for user in 0..50 {
            let user = user.to_string();
            let mut codes = Vec::new();
            for _ in 0..4 {
                let ask = request("d", vec![descriptor(&[("user", &user)])]);
                codes.push(grpc::overall(
                    &grpc::should_rate_limit(&mut client, ask).await,
                ));
            }
            assert_eq!(
                codes,
                [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
                "{protocol} collector at {endpoint}\n{}",
                service.log_tail(20)
            );
        }
        // The spans that found no room were dropped; those taken for export fail (a closed
        // port, after the exporter's retries) or wait on a collector that never answers.
        let lost = |metrics: &str| {
            let count = |name| support::metrics::count(metrics, name, &[]);
            (
                count("rls_tracing_spans_dropped_total"),
                count("rls_tracing_spans_export_failed_total"),
                count("rls_tracing_spans_exported_total"),
            )
        };
        service.wait_until(Duration::from_secs(15), "spans dropped", || {
            let metrics = service.metrics();
            match lost(&metrics) {
                (dropped, _, _) if dropped > 0.0 => Ok(()),
                counts => Err(format!(
                    "{protocol}: (dropped, failed, exported) {counts:?}"
                )),
            }
        });
        let (_, _, exported) = lost(&service.metrics());
        assert_eq!(exported, 0.0, "{protocol}: nothing can be exported");
    }
}

/// Envoy 1.40's OpenTelemetry tracer, exporting to the same collector over gRPC, in front of
/// the service: the service's decision span is in Envoy's trace, its parent one of Envoy's
/// spans (the ratelimit filter's gRPC call), whichever protocol the service exports with.
#[test]
fn the_decision_span_is_a_child_of_envoys_span() {
    for protocol in ["grpc", "http"] {
        let collector = Collector::start();
        let endpoint = match protocol {
            "grpc" => collector.grpc_endpoint(),
            _ => collector.http_endpoint(),
        };
        let service = Service::start(
            support::repo_path("config/per-client-ip.yaml"),
            &[
                "--tracing",
                "--tracing-protocol",
                protocol,
                "--tracing-endpoint",
                &endpoint,
            ],
        );
        let envoy = Envoy::start_with_ports(
            "envoy/per-client-ip.yaml",
            service.grpc_addr.port(),
            &[(COLLECTOR_PORT, collector.grpc_addr.port())],
            &[
                ("use_remote_address: true\n", ENVOY_TRACING),
                ("  clusters:\n", ENVOY_COLLECTOR_CLUSTER),
            ],
        );
        let response = support::http_get(envoy.listen_addr, "/", &[]).expect("GET through Envoy");
        assert_eq!(response.status, 200, "{}", envoy.log_tail(30));

        let spans = collector.wait_for(EXPORTED, "Envoy's spans and the decision", |spans| {
            !decisions(spans).is_empty() && spans.iter().any(|s| s.service == "envoy")
        });
        let decision = decisions(&spans)[0];
        let envoys: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.service == "envoy").collect();
        let parent = envoys
            .iter()
            .find(|s| s.span_id == decision.parent_span_id)
            .unwrap_or_else(|| {
                panic!("{protocol}: the decision's parent is not an Envoy span: {spans:#?}")
            });
        assert_eq!(decision.trace_id, parent.trace_id, "{protocol}");
        assert_eq!(decision.attribute("rls.domain"), Some("per-client-ip"));
        assert_eq!(decision.service, "gcounter-rls");
        assert_eq!(
            decision.via, protocol,
            "the service exported over {protocol}"
        );
    }
}

/// The collector's port in the edits below (rewritten to the test collector's).
const COLLECTOR_PORT: u16 = 4317;

/// Envoy's OpenTelemetry tracer on the example's listener, every request sampled.
const ENVOY_TRACING: &str = "use_remote_address: true
                tracing:
                  random_sampling: { value: 100 }
                  provider:
                    name: envoy.tracers.opentelemetry
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                      service_name: envoy
                      grpc_service:
                        envoy_grpc: { cluster_name: otel_collector }
                        timeout: 1s
";

const ENVOY_COLLECTOR_CLUSTER: &str = "  clusters:
    - name: otel_collector
      type: STATIC
      connect_timeout: 1s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {}
      load_assignment:
        cluster_name: otel_collector
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: { address: 127.0.0.1, port_value: 4317 }
";
