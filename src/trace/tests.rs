use clap::Parser;

use super::settings::{Protocol, TracingSettings, resolve};
use crate::environment::Environment;
use crate::serve::args::TelemetryArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

/// The settings from `flags` and the variables `vars`: `Ok(None)` when tracing is off.
fn settings(flags: &[&str], vars: &[(&str, &str)]) -> Result<Option<TracingSettings>, String> {
    let argv = std::iter::once("serve").chain(flags.iter().copied());
    let args = Cli::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .telemetry;
    let env = Environment::from_pairs(vars.iter().copied());
    resolve(&args, &env).map_err(|e| e.to_string())
}

fn on(flags: &[&str], vars: &[(&str, &str)]) -> TracingSettings {
    match settings(flags, vars) {
        Ok(Some(settings)) => settings,
        other => panic!("{flags:?} {vars:?}: tracing should be on, got {other:?}"),
    }
}

fn refused(flags: &[&str], vars: &[(&str, &str)]) -> String {
    match settings(flags, vars) {
        Err(message) => message,
        Ok(other) => panic!("{flags:?} {vars:?}: should be refused, got {other:?}"),
    }
}

#[test]
fn off_unless_the_flag_or_upstreams_variable_turns_it_on() {
    assert_eq!(settings(&[], &[]), Ok(None));
    assert_eq!(settings(&[], &[("TRACING_ENABLED", "false")]), Ok(None));
    // The standard variables alone do not turn it on.
    assert_eq!(
        settings(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
        Ok(None)
    );
    assert_eq!(
        settings(&["--tracing", "off"], &[("TRACING_ENABLED", "true")]),
        Ok(None)
    );
    let defaults = on(&["--tracing"], &[]);
    assert_eq!(defaults.protocol, Protocol::HttpProtobuf);
    assert_eq!(defaults.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(defaults.sampling_rate, 1.0);
    assert_eq!(defaults.service_name, "gcounter-rls");
    assert_eq!(defaults.queue_size, 2048);
    assert!(!defaults.descriptor_values);
    assert_eq!(on(&[], &[("TRACING_ENABLED", "true")]), defaults);
    assert_eq!(on(&["--tracing", "on"], &[]), defaults);
    assert!(refused(&[], &[("TRACING_ENABLED", "yes")]).contains("TRACING_ENABLED"));
}

/// What Envoy Gateway sets on its rate-limit Deployment when tracing is on.
#[test]
fn envoy_gateways_variables_are_read_as_upstream_reads_them() {
    let settings = on(
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-5d9c7-abcde"),
            ("TRACING_SAMPLING_RATE", "0.5"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.monitoring:4318",
            ),
        ],
    );
    assert_eq!(settings.protocol, Protocol::HttpProtobuf);
    assert_eq!(
        settings.endpoint,
        "http://otel-collector.monitoring:4318/v1/traces"
    );
    assert_eq!(settings.service_name, "envoy-ratelimit");
    assert_eq!(
        settings.service_namespace.as_deref(),
        Some("envoy-gateway-system")
    );
    assert_eq!(
        settings.service_instance_id.as_deref(),
        Some("envoy-ratelimit-5d9c7-abcde")
    );
    assert_eq!(settings.sampling_rate, 0.5);
}

#[test]
fn our_flags_win_over_upstreams_variables_which_win_over_the_standard_ones() {
    let vars = [
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("TRACING_SERVICE_NAME", "upstream"),
        ("TRACING_SAMPLING_RATE", "0.25"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "standard"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=resource,service.instance.id=i%2D1",
        ),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
    ];
    let upstream = on(&[], &vars);
    assert_eq!(upstream.protocol, Protocol::Grpc);
    assert_eq!(upstream.service_name, "upstream");
    assert_eq!(upstream.sampling_rate, 0.25);
    assert_eq!(upstream.endpoint, "http://generic:4317");
    assert_eq!(upstream.service_instance_id.as_deref(), Some("i-1"));

    let ours = on(
        &[
            "--tracing-protocol",
            "http",
            "--tracing-service-name",
            "ours",
            "--tracing-sampling-rate",
            "0.01",
            "--tracing-endpoint",
            "http://flag:4318",
        ],
        &vars,
    );
    assert_eq!(ours.protocol, Protocol::HttpProtobuf);
    assert_eq!(ours.service_name, "ours");
    assert_eq!(ours.sampling_rate, 0.01);
    assert_eq!(ours.endpoint, "http://flag:4318/v1/traces");

    let standard = on(
        &["--tracing"],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=resource"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
        ],
    );
    assert_eq!(standard.protocol, Protocol::Grpc);
    assert_eq!(standard.service_name, "resource");
    assert_eq!(standard.endpoint, "http://traces:4317");
}

#[test]
fn http_endpoints_get_the_traces_path_as_the_specification_says() {
    let http = |flags: &[&str], vars: &[(&str, &str)]| on(flags, vars).endpoint;
    assert_eq!(
        http(&["--tracing", "--tracing-endpoint", "http://c:4318/"], &[]),
        "http://c:4318/v1/traces"
    );
    assert_eq!(
        http(
            &["--tracing", "--tracing-endpoint", "http://c:4318/custom"],
            &[]
        ),
        "http://c:4318/custom"
    );
    // The signal's own variable is used as it is; the generic one gets the path.
    assert_eq!(
        http(
            &["--tracing"],
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318")]
        ),
        "http://c:4318"
    );
    assert_eq!(
        http(
            &["--tracing"],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/")]
        ),
        "http://c:4318/base/v1/traces"
    );
    assert_eq!(
        http(&["--tracing", "--tracing-protocol", "grpc"], &[]),
        "http://localhost:4317"
    );
}

#[test]
fn values_that_cannot_be_used_are_refused_naming_them() {
    for (flags, named) in [
        (
            &["--tracing", "--tracing-sampling-rate", "1.5"][..],
            "--tracing-sampling-rate",
        ),
        // Checked even while tracing is off.
        (&["--tracing-sampling-rate=-0.1"], "--tracing-sampling-rate"),
        (
            &["--tracing", "--tracing-endpoint", "https://c:4318"],
            "--tracing-endpoint",
        ),
    ] {
        let message = refused(flags, &[]);
        assert!(message.contains(named), "{flags:?}: {message}");
    }
    // A variable with tracing on: the message names the variable.
    for (var, value) in [
        ("TRACING_SAMPLING_RATE", "2"),
        ("TRACING_SAMPLING_RATE", "half"),
        ("TRACING_EXPORTER_PROTOCOL", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
    ] {
        let message = refused(&["--tracing"], &[(var, value)]);
        assert!(message.contains(var), "{var}={value}: {message}");
    }
    // clap's range.
    assert!(settings(&["--tracing-queue-size", "0"], &[]).is_err());
}

#[test]
fn the_random_instance_id_is_a_version_4_uuid() {
    let id = super::random_uuid();
    let parts: Vec<&str> = id.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12]
    );
    assert!(parts[2].starts_with('4'), "{id}");
    assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
    assert_ne!(id, super::random_uuid());
}
