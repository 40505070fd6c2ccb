use super::*;

#[test]
fn decisions_show_up_in_the_exposition() {
    let metrics = Metrics::new();
    metrics.decision(
        &"d".into(),
        &"d.key_v".into(),
        DecisionOutcome::ShadowOverLimit,
    );
    metrics.request(RequestOutcome::Ok);
    let text = metrics.encode();
    assert!(
            text.contains(
                r#"rls_descriptor_decisions_total{domain="d",rule="d.key_v",outcome="shadow_over_limit"} 1"#
            ),
            "{text}"
        );
    assert!(
        text.contains(r#"rls_requests_total{outcome="ok"} 1"#),
        "{text}"
    );
}

#[test]
fn a_detailed_rule_creates_at_most_its_cap_of_series() {
    let metrics = Metrics::with_settings(MetricsSettings {
        max_series_per_rule: 3,
        ..MetricsSettings::default()
    });
    let (domain, rule): (Arc<str>, Arc<str>) = ("d".into(), "d.key".into());
    for value in 0..50 {
        let label: Arc<str> = format!("d.key_{value}").into();
        metrics.detailed_decision(&domain, &rule, &label, DecisionOutcome::WithinLimit);
    }
    // An existing series keeps counting after the cap.
    metrics.detailed_decision(
        &domain,
        &rule,
        &"d.key_0".into(),
        DecisionOutcome::WithinLimit,
    );
    let text = metrics.encode();
    let series = text
        .lines()
        .filter(|l| l.starts_with("rls_descriptor_decisions_total{"))
        .count();
    assert_eq!(series, 4, "3 detailed series and the rule's own\n{text}");
    assert!(
        text.contains(r#"rule="d.key_0",outcome="within_limit"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"rule="d.key",outcome="within_limit"} 47"#),
        "{text}"
    );
    assert!(
        text.contains("rls_detailed_series_capped_total 47"),
        "{text}"
    );
    // Another rule has its own cap.
    metrics.detailed_decision(
        &domain,
        &"d.other".into(),
        &"d.other_x".into(),
        DecisionOutcome::OverLimit,
    );
    assert!(metrics.encode().contains(r#"rule="d.other_x""#));
}

/// The value of the sample that starts with `prefix` (name and labels, as encoded).
/// A series of upstream's gRPC response-time histogram: `part` is the suffix and the start of
/// the labels (`_sum{`, `_bucket{le="5.0",`), the method label follows.
fn upstream_response_time(text: &str, part: &str) -> Option<f64> {
    value(
        text,
        &format!(r#"ratelimit_service_response_time_seconds{part}grpc_method="ShouldRateLimit"}}"#),
    )
}

fn value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
}

#[test]
fn request_durations_are_a_histogram_per_method_and_upstreams_response_time() {
    let metrics = Metrics::new();
    metrics.request_duration(RequestMethod::ShouldRateLimit, Duration::from_micros(40));
    metrics.request_duration(RequestMethod::ShouldRateLimit, Duration::from_millis(30));
    metrics.request_duration(RequestMethod::Json, Duration::from_micros(200));
    let text = metrics.encode();
    let ours = "rls_request_duration_seconds";
    assert_eq!(
        value(
            &text,
            &format!(r#"{ours}_count{{method="should_rate_limit"}}"#)
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            &format!(r#"{ours}_bucket{{le="0.00005",method="should_rate_limit"}}"#)
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &format!(r#"{ours}_count{{method="json"}}"#)),
        Some(1.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE rls_request_duration_seconds histogram"),
        "{text}"
    );
    // Upstream's name: gRPC only, the Prometheus client's default buckets, seconds.
    let upstream = "ratelimit_service_response_time_seconds";
    assert!(
        text.contains(&format!("# TYPE {upstream} histogram")),
        "{text}"
    );
    assert_eq!(
        upstream_response_time(&text, "_count{"),
        Some(2.0),
        "{text}"
    );
    let bucket = |le: &str| upstream_response_time(&text, &format!("_bucket{{le=\"{le}\","));
    assert_eq!(bucket("0.005"), Some(1.0), "{text}");
    assert_eq!(bucket("0.05"), Some(2.0), "{text}");
    assert_eq!(bucket("+Inf"), Some(2.0), "{text}");
    let sum = upstream_response_time(&text, "_sum{");
    assert!(
        sum.is_some_and(|sum| (sum - 0.030_04).abs() < 1e-9),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}"#
        ),
        Some(2.0),
        "{text}"
    );
}

#[test]
fn upstreams_response_time_can_be_in_milliseconds() {
    let metrics = Metrics::with_settings(MetricsSettings {
        response_time_in_milliseconds: true,
        ..MetricsSettings::default()
    });
    // 3 ms: above upstream's 2.5 bucket once in milliseconds, below 5 ms in seconds.
    metrics.request_duration(RequestMethod::ShouldRateLimit, Duration::from_millis(3));
    let text = metrics.encode();
    let bucket = |le: &str| upstream_response_time(&text, &format!("_bucket{{le=\"{le}\","));
    assert_eq!(bucket("2.5"), Some(0.0), "{text}");
    assert_eq!(bucket("5.0"), Some(1.0), "{text}");
    let sum = upstream_response_time(&text, "_sum{");
    assert!(sum.is_some_and(|sum| (sum - 3.0).abs() < 1e-9), "{text}");
    // Ours stays in seconds.
    assert!(
        text.contains(r#"rls_request_duration_seconds_sum{method="should_rate_limit"} 0.003"#),
        "{text}"
    );
}

#[test]
fn build_info_names_the_version_and_commit() {
    let text = Metrics::new().encode();
    let line = format!(
        r#"rls_build_info{{version="{}",commit="{BUILD_COMMIT}"}} 1"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&line), "{line} missing from\n{text}");
    assert!(!BUILD_COMMIT.is_empty());
}

/// Checks the generation and whether the last attempt succeeded; the attempt's time.
fn last_reload(text: &str, generation: f64, success: f64) -> Option<f64> {
    assert_eq!(
        value(text, "rls_config_generation "),
        Some(generation),
        "{text}"
    );
    assert_eq!(
        value(text, "rls_config_last_reload_success "),
        Some(success),
        "{text}"
    );
    value(text, "rls_config_last_reload_timestamp_seconds ")
}

#[test]
fn config_loads_count_generations_and_the_last_attempt() {
    let metrics = Metrics::new();
    let text = metrics.encode();
    assert_eq!(value(&text, "rls_config_generation "), Some(0.0), "{text}");
    metrics.config_loaded(3);
    metrics.config_loaded(4);
    let text = metrics.encode();
    let first = last_reload(&text, 2.0, 1.0);
    assert!(first.is_some_and(|t| t > 1.6e9), "{text}");
    metrics.config_rejected();
    let text = metrics.encode();
    // A refused reload leaves the generation, and says the last attempt failed.
    let last = last_reload(&text, 2.0, 0.0);
    assert!(last >= first, "{text}");
    assert!(
        text.contains(r#"rls_config_reloads_total{result="error"} 1"#),
        "{text}"
    );
}

#[test]
fn switches_and_memory_pools_are_gauges_by_name() {
    let metrics = Metrics::new();
    metrics.set_switches(&[("shadow_mode", true), ("quota_mode", false)]);
    metrics.set_memory(&[MemoryPool {
        pool: "cells",
        bytes: 1_024,
        budget: 4_096,
    }]);
    let text = metrics.encode();
    for line in [
        r#"rls_switch_enabled{switch="shadow_mode"} 1"#,
        r#"rls_switch_enabled{switch="quota_mode"} 0"#,
        r#"rls_memory_bytes{pool="cells"} 1024"#,
        r#"rls_memory_budget_bytes{pool="cells"} 4096"#,
        "rls_origin_circuit_state 0",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}
