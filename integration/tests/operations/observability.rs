//! What an operator watches, checked on the real binary: the series `/metrics` exports after
//! a few requests, and the operations kit in `deploy/monitoring/` against real tools.
//!
//! - `promtool check rules` and `promtool test rules` pass on `alerts.yaml` and
//!   `alerts_test.yaml`, and the tests cover every rule.
//! - A real Prometheus scrapes the service every second; then every query of every panel of
//!   `grafana-dashboard.json` (its variables substituted) returns at least one series, and
//!   every metric selector of every alert rule (`name{matchers}`, as the rule writes it)
//!   returns at least one series. The service runs with a Redis URL on a closed port (the
//!   origin's series, its circuit opens) and SQLite global counters (the global series), and
//!   its config is broken once loaded (a refused reload): so the expressions of the
//!   config-reload and circuit alerts are also checked to fire. Alerts on events not caused
//!   here (a full replay queue, failing global syncs) are checked at the level of their
//!   selectors: each series exists, at 0.
//!
//! Prometheus and promtool come from Debian's `prometheus` package, installed on first use
//! by `integration/install-prometheus.sh`; a missing tool fails the test, never skips it.

use gcounter_rls_integration as support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::grpc::{hit, rls_client, should_rate_limit};
use support::metrics::sample;
use support::prometheus::{Prometheus, promtool};
use support::{Service, http_post, repo_path};

/// Prometheus's job name in the test's scrape config.
const JOB: &str = "gcounter-rls";
/// What `$__rate_interval` becomes (Grafana: at least 4 scrape intervals).
const RATE_INTERVAL: &str = "15s";

/// One request of ten per minute per key passes: the rest are OVER_LIMIT.
const LIMITS: &str = "
domain: observability
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 10 }
";

fn monitoring(file: &str) -> PathBuf {
    repo_path("deploy/monitoring").join(file)
}

/// Sends `n` gRPC requests on key `client=value` and one `POST /json`.
async fn drive(service: &Service, value: &str, n: usize) {
    let mut client = rls_client(service.grpc_addr).await;
    for _ in 0..n {
        should_rate_limit(&mut client, hit("observability", "client", value)).await;
    }
    let body = format!(
        r#"{{"domain":"observability","descriptors":[{{"entries":[{{"key":"client","value":"{value}"}}]}}]}}"#
    );
    let response = http_post(
        service.http_addr,
        "/json",
        "application/json",
        body.as_bytes(),
    )
    .unwrap_or_else(|e| panic!("POST /json: {e}"));
    assert!(
        [200, 429].contains(&response.status),
        "{}",
        response.body_text()
    );
}

#[tokio::test]
async fn new_series_appear_on_metrics_after_a_few_requests() {
    let (_dir, service) = support::serve_limits(LIMITS, &["--all-or-nothing"]);
    drive(&service, "a", 15).await;
    let text = service.metrics();
    let value = |name: &str, labels: &[(&str, &str)]| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"))
    };
    let grpc = [("method", "should_rate_limit")];
    assert_eq!(value("rls_request_duration_seconds_count", &grpc), 15.0);
    assert_eq!(
        value("rls_request_duration_seconds_count", &[("method", "json")]),
        1.0
    );
    let within_a_second = value(
        "rls_request_duration_seconds_bucket",
        &[("method", "should_rate_limit"), ("le", "1.0")],
    );
    assert_eq!(within_a_second, 15.0, "{text}");
    assert_eq!(
        value(
            "ratelimit_service_response_time_seconds_count",
            &[("grpc_method", "ShouldRateLimit")]
        ),
        15.0
    );
    assert_eq!(
        value(
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")]
        ),
        15.0
    );
    assert!(
        text.lines().any(|l| l.starts_with("rls_build_info{")
            && l.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && l.contains("commit=\"")
            && l.ends_with(" 1")),
        "{text}"
    );
    assert_eq!(value("rls_config_generation", &[]), 1.0);
    assert_eq!(value("rls_config_last_reload_success", &[]), 1.0);
    assert!(value("rls_config_last_reload_timestamp_seconds", &[]) > 1.6e9);
    for (switch, on) in [
        ("shadow_mode", 0.0),
        ("quota_mode", 0.0),
        ("all_or_nothing", 1.0),
        ("response_headers", 0.0),
    ] {
        assert_eq!(
            value("rls_switch_enabled", &[("switch", switch)]),
            on,
            "{switch}"
        );
    }
    assert_eq!(value("rls_origin_circuit_state", &[]), 0.0);
    let cells = [("pool", "cells")];
    let held = value("rls_memory_bytes", &cells);
    assert!(
        held > 0.0 && held < value("rls_memory_budget_bytes", &cells),
        "{text}"
    );
    for pool in [
        "replay_queue",
        "strict_mode",
        "penalty_box",
        "rights",
        "foreign_components",
        "request_bytes",
    ] {
        assert!(
            value("rls_memory_budget_bytes", &[("pool", pool)]) > 0.0,
            "{pool}"
        );
        value("rls_memory_bytes", &[("pool", pool)]);
    }
}

/// Upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` puts its response time in
/// milliseconds, as upstream's legacy mapping; ignored, as upstream, with
/// `PROMETHEUS_MAPPER_YAML`.
#[tokio::test]
async fn upstreams_response_time_follows_prometheus_response_time_as_milliseconds() {
    let (_dir, limits) = support::limits_file(LIMITS);
    for (env, scale) in [
        (
            &[("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true")][..],
            1_000.0,
        ),
        (
            &[
                ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
                ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
            ][..],
            1.0,
        ),
        (&[][..], 1.0),
    ] {
        let service = Service::start_with(&limits, &[], support::Launch::env(env));
        drive(&service, "ms", 5).await;
        let text = service.metrics();
        let ours = sample(
            &text,
            "rls_request_duration_seconds_sum",
            &[("method", "should_rate_limit")],
        );
        let upstream = sample(
            &text,
            "ratelimit_service_response_time_seconds_sum",
            &[("grpc_method", "ShouldRateLimit")],
        );
        let (Some(ours), Some(upstream)) = (ours, upstream) else {
            panic!("{env:?}: no response time sums in\n{text}");
        };
        assert!(ours > 0.0, "{text}");
        assert!(
            (upstream - ours * scale).abs() <= ours * scale * 1e-6,
            "{env:?}: upstream's sum {upstream}, ours {ours} (x{scale} expected)"
        );
    }
}

#[test]
fn alert_rules_pass_promtool_and_their_tests_cover_every_rule() {
    let dir = repo_path("deploy/monitoring");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts_test.yaml"],
    ] {
        let (output, text, ended) = support::process::run_within(
            std::process::Command::new(promtool())
                .args(args)
                .current_dir(&dir),
            Duration::from_secs(60),
        );
        assert!(ended, "promtool {args:?} did not end within 60 s:\n{text}");
        assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    }
    let rules: BTreeSet<String> = alert_rules().into_iter().map(|(name, _)| name).collect();
    let tests = read_yaml(&monitoring("alerts_test.yaml"));
    let tested: BTreeSet<String> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|test| test["alert_rule_test"].as_array().into_iter().flatten())
        .filter_map(|case| case["alertname"].as_str().map(str::to_owned))
        .collect();
    let untested: Vec<_> = rules.difference(&tested).collect();
    assert!(untested.is_empty(), "rules without a test: {untested:?}");
    // Every rule is tested both firing and not firing (another series, or another moment).
    for rule in &rules {
        let cases: Vec<&Value> = tests["tests"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|test| test["alert_rule_test"].as_array().into_iter().flatten())
            .filter(|case| case["alertname"] == rule.as_str())
            .collect();
        assert!(
            cases
                .iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty())),
            "{rule}: no case where it fires"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_and_alert_selector_returns_series_from_prometheus() {
    let (dir, limits) = support::limits_file(LIMITS);
    let database = dir.path().join("global.db");
    let database_url = format!("sqlite://{}?mode=rwc", database.display());
    // Nothing listens there: every origin call fails and the circuit opens.
    let closed = format!("redis://127.0.0.1:{}", support::free_port());
    let service = Service::start(
        &limits,
        &[
            "--redis-url",
            &closed,
            "--database-url",
            &database_url,
            "--migrate",
            "--region",
            "here",
            "--global-flush-interval",
            "200ms",
            "--global-sync-interval",
            "200ms",
            "--stall-probe-interval",
            "10ms",
        ],
    );
    let prometheus = Prometheus::start(JOB, service.http_addr, "/metrics", Duration::from_secs(1));
    for round in 0..3 {
        drive(&service, &format!("k{round}"), 15).await;
    }
    // A refused reload: the previous config stays, rls_config_last_reload_success is 0.
    support::replace_file(&limits, "domain: [\n");
    support::eventually("a refused reload", true, || {
        service.config_reloads("error") >= 1.0
    });
    prometheus.wait_scraped(JOB, 6, Duration::from_secs(30));

    let mut failures = Vec::new();
    for (panel, expr) in dashboard_queries() {
        let query = expr
            .replace("$__rate_interval", RATE_INTERVAL)
            .replace("$job", JOB)
            .replace("$instance", ".*");
        match prometheus.query(&query) {
            Ok(samples) if !samples.is_empty() => {}
            Ok(_) => failures.push(format!(
                "panel {panel:?}: {query} returned nothing{}",
                missing_names(&prometheus, &query)
            )),
            Err(error) => failures.push(format!("panel {panel:?}: {query}: {error}")),
        }
    }
    for (rule, expr) in alert_rules() {
        if let Err(error) = prometheus.query(&expr) {
            failures.push(format!("rule {rule}: {expr}: {error}"));
        }
        for selector in selectors(&expr) {
            match prometheus.query(&selector) {
                Ok(samples) if !samples.is_empty() => {}
                Ok(_) => failures.push(format!("rule {rule}: {selector} returned nothing")),
                Err(error) => failures.push(format!("rule {rule}: {selector}: {error}")),
            }
        }
    }
    // The events caused here fire their rules' expressions (without their `for:`).
    for rule in ["RateLimitConfigReloadFailing", "RateLimitOriginCircuitOpen"] {
        let expr = alert_rules()
            .into_iter()
            .find_map(|(name, expr)| (name == rule).then_some(expr))
            .unwrap_or_else(|| panic!("no rule {rule} in alerts.yaml"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if prometheus.query(&expr).is_ok_and(|s| !s.is_empty()) {
                break;
            }
            if Instant::now() >= deadline {
                failures.push(format!("rule {rule}: {expr} does not fire"));
                break;
            }
            // Cold cells keep calling the origin (and the breaker open).
            drive(&service, "fresh", 1).await;
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n--- service log (tail) ---\n{}",
        failures.len(),
        failures.join("\n"),
        service.log_tail(20)
    );
}

/// `(panel title, expression)` of every query of the dashboard.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = monitoring("grafana-dashboard.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let dashboard: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or("untitled").to_owned();
                queries.push((title, expr.to_owned()));
            }
        }
    }
    assert!(queries.len() >= 10, "only {} queries found", queries.len());
    queries
}

/// `(alert name, expression)` of every rule of `alerts.yaml`.
fn alert_rules() -> Vec<(String, String)> {
    let rules = read_yaml(&monitoring("alerts.yaml"));
    let found: Vec<(String, String)> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .filter_map(|rule| {
            Some((
                rule["alert"].as_str()?.to_owned(),
                rule["expr"].as_str()?.trim().to_owned(),
            ))
        })
        .collect();
    assert!(!found.is_empty(), "no alert rules in alerts.yaml");
    found
}

fn read_yaml(path: &std::path::Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The vector selectors of `expr` whose metric is the service's (`rls_*`), with their
/// matchers: `rls_requests_total{outcome="over_limit"}`.
fn selectors(expr: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find("rls_") {
        let tail = &rest[start..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Preceded by a name character: part of another word (e.g. a label value).
        let word_start = start == 0
            || !rest[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '"');
        let mut end = name_len;
        if tail[name_len..].starts_with('{')
            && let Some(close) = tail[name_len..].find('}')
        {
            end = name_len + close + 1;
        }
        if word_start {
            found.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    found
}

/// For a query that returned nothing: which of its `rls_*` metrics Prometheus has no series of.
fn missing_names(prometheus: &Prometheus, query: &str) -> String {
    let missing: Vec<String> = selectors(query)
        .into_iter()
        .map(|selector| selector.split('{').next().unwrap_or_default().to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|name| prometheus.query(name).map_or(true, |s| s.is_empty()))
        .collect();
    if missing.is_empty() {
        String::new()
    } else {
        format!(" (no series of {})", missing.join(", "))
    }
}

#[test]
fn selectors_are_read_with_their_matchers() {
    let found = selectors(
        r#"sum(rate(rls_requests_total{outcome="ok"}[5m])) / rls_memory_bytes > 0 and x_rls_y"#,
    );
    let want: BTreeSet<String> = [r#"rls_requests_total{outcome="ok"}"#, "rls_memory_bytes"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(found, want);
}
