//! envoyproxy/ratelimit's HTTP endpoints on the real binary's admin port: `/healthcheck`
//! (with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, upstream's variable alone) and `POST /json`
//! (upstream's JSON form of a decision, its statuses, a clear 400, a bounded body).

use gcounter_rls_integration as support;

use std::time::Duration;

use serde_json::{Value, json};
use support::metrics::requests;
use support::{HttpResponse, Launch, Service, http_post};

const LIMITS: &str = "
domain: dummy
descriptors:
  - key: perday
    rate_limit: { unit: day, requests_per_unit: 2 }
";

fn post_json(service: &Service, body: &str) -> HttpResponse {
    http_post(
        service.http_addr,
        "/json",
        "application/json",
        body.as_bytes(),
    )
    .unwrap_or_else(|e| panic!("POST /json: {e}\n{}", service.log_tail(30)))
}

fn body_json(response: &HttpResponse) -> Value {
    serde_json::from_slice(&response.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", response.body_text()))
}

#[test]
fn healthcheck_answers_ok_like_upstream() {
    let (_dir, limits) = support::limits_file(LIMITS);
    let service = Service::start(&limits, &[]);
    let response = service.admin_get("/healthcheck");
    assert_eq!(response.status, 200);
    assert_eq!(response.body_text(), "OK");
}

/// The service refuses to start without a limits config that declares a domain, and a reload
/// that would leave none keeps the running config, so with upstream's variable the check is
/// healthy from the first answer on; a value that is not a boolean stops start-up.
#[test]
fn healthcheck_with_upstreams_config_loaded_variable() {
    let (_dir, limits) = support::limits_file(LIMITS);
    let service = Service::start_with(
        &limits,
        &[],
        Launch::env(&[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")]),
    );
    let response = service.admin_get("/healthcheck");
    assert_eq!(response.status, 200, "{}", response.body_text());
    assert_eq!(response.body_text(), "OK");

    let output = std::process::Command::new(support::binary())
        .arg("serve")
        .arg("--config")
        .arg(&limits)
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .env("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "maybe")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run gcounter-rls");
    let text = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a bad boolean is an invalid setting: {text}"
    );
    support::assert_mentions(
        &text,
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "the error",
    );
}

#[test]
fn json_decides_like_should_rate_limit_with_upstreams_statuses() {
    // Covers the start as well as the requests.
    support::avoid_window_boundary(Duration::from_secs(86_400), Duration::from_secs(60));
    let (_dir, limits) = support::limits_file(LIMITS);
    let service = Service::start(&limits, &[]);
    // Upstream's README example, verbatim.
    let example = r#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday"}]}]}"#;

    let first = post_json(&service, example);
    assert_eq!(first.status, 200, "{}", first.body_text());
    assert_eq!(first.header("content-type"), Some("application/json"));
    let first = body_json(&first);
    assert_eq!(first["overallCode"], "OK");
    assert_eq!(first["statuses"][0]["code"], "OK");
    assert_eq!(
        first["statuses"][0]["currentLimit"],
        json!({"requestsPerUnit": 2, "unit": "DAY"})
    );
    assert_eq!(first["statuses"][0]["limitRemaining"], 1);
    let reset = first["statuses"][0]["durationUntilReset"]
        .as_str()
        .expect("durationUntilReset is a string");
    assert!(reset.ends_with('s'), "durationUntilReset {reset:?}");

    let second = body_json(&post_json(&service, example));
    // limitRemaining 0 is omitted, as protojson omits zero values.
    assert_eq!(second["statuses"][0].get("limitRemaining"), None);

    let over = post_json(&service, example);
    assert_eq!(over.status, 429, "{}", over.body_text());
    let over = body_json(&over);
    assert_eq!(over["overallCode"], "OVER_LIMIT");
    assert_eq!(over["statuses"][0]["code"], "OVER_LIMIT");

    // Unknown domain: OK, a status without a limit.
    let unknown = post_json(
        &service,
        r#"{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
    );
    assert_eq!(unknown.status, 200);
    assert_eq!(
        body_json(&unknown),
        json!({"overallCode": "OK", "statuses": [{"code": "OK"}]})
    );

    // The same counter as gRPC: the decisions are counted in the usual series.
    let metrics = service.metrics();
    assert_eq!(requests(&metrics, "over_limit"), Some(1.0), "{metrics}");
}

#[test]
fn json_refuses_bad_bodies_clearly() {
    let (_dir, limits) = support::limits_file(LIMITS);
    let service = Service::start(&limits, &["--max-request-bytes", "1024"]);

    for (body, reason) in [
        ("{not json", "not a JSON RateLimitRequest"),
        (r#"{"domain":"dummy","descriptorz":[]}"#, "descriptorz"),
        (
            r#"{"domain":"dummy","hitsAddend":-1}"#,
            "not a JSON RateLimitRequest",
        ),
        // Valid JSON, invalid request: as gRPC's INVALID_ARGUMENT.
        (r#"{"domain":"","descriptors":[]}"#, "domain"),
    ] {
        let response = post_json(&service, body);
        assert_eq!(response.status, 400, "{body}: {}", response.body_text());
        assert!(
            response.body_text().contains(reason),
            "{body}: the 400 does not say {reason:?}: {}",
            response.body_text()
        );
    }

    let big = format!(
        r#"{{"domain":"dummy","descriptors":[{{"entries":[{{"key":"perday","value":"{}"}}]}}]}}"#,
        "x".repeat(2_000)
    );
    let response = post_json(&service, &big);
    assert_eq!(response.status, 413, "{}", response.body_text());

    let get = service.admin_get("/json");
    assert_eq!(get.status, 405, "GET /json");
}
