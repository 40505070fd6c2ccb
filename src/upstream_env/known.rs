//! Every envoyproxy/ratelimit variable the binary reads or refuses, in one list (for the
//! documentation's checks and for operators auditing an environment).

/// Upstream's variables this binary knows: read (always, or only when started with no
/// arguments), checked, warned about, or refused with what to use instead. Any other upstream
/// variable is ignored.
pub const KNOWN_VARIABLES: &[&str] = &[
    // Read by `serve` however it is started (beside our flags).
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_SERVER_USE_TLS",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "MERGE_DOMAIN_CONFIG",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "RUNTIME_IGNOREDOTFILES",
    "SHADOW_MODE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "TRACING_ENABLED",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    // OpenTelemetry's standard variables, read with tracing on (as upstream's SDK reads
    // them): these by `serve` (which refuses any compression: none is built in), ...
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    // ... these by the exporter itself.
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    // Read when the binary is started with no arguments (upstream's image).
    "CACHE_KEY_PREFIX",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_TYPE",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "GRPC_HOST",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_PORT",
    "HOST",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "NEAR_LIMIT_RATIO",
    "PORT",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_PATH",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_SOCKET_TYPE",
    "REDIS_TIMEOUT",
    "REDIS_TLS",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TYPE",
    "REDIS_URL",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_WATCH_ROOT",
    "USE_PROMETHEUS",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    // Refused at start (a feature this binary does not have), naming what to use instead.
    "BACKEND_TYPE",
    "GRPC_UDS",
    "REDIS_PERSECOND",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "USE_DOG_STATSD",
    "USE_STATSD",
];

#[cfg(test)]
mod tests {
    use super::KNOWN_VARIABLES;
    use std::collections::BTreeSet;

    /// Every upper-case string literal of the code that reads upstream's variables (and of
    /// the `serve` settings, which read its switches) is listed, unless it is a value.
    #[test]
    fn every_variable_the_code_names_is_listed() {
        const VALUES: &[&str] = &[
            "F",
            "FALSE",
            "FILE",
            "GRPC_XDS_SOTW",
            "SINGLE",
            "T",
            "TRUE",
            "WAIT",
            "WARN",
        ];
        let listed: BTreeSet<&str> = KNOWN_VARIABLES.iter().copied().collect();
        assert_eq!(listed.len(), KNOWN_VARIABLES.len(), "listed twice");
        for (file, source) in [
            ("upstream_env.rs", include_str!("../upstream_env.rs")),
            ("serve/settings.rs", include_str!("../serve/settings.rs")),
            ("cli/run.rs", include_str!("../cli/run.rs")),
            ("cli/mod.rs", include_str!("../cli/mod.rs")),
            ("trace/settings.rs", include_str!("../trace/settings.rs")),
        ] {
            let code = source.split("#[cfg(test)]").next().unwrap_or(source);
            for literal in code.split('"').skip(1).step_by(2) {
                let variable = !literal.is_empty()
                    && literal.starts_with(|c: char| c.is_ascii_uppercase())
                    && literal
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if variable && !literal.starts_with("RLS_") && !VALUES.contains(&literal) {
                    assert!(
                        listed.contains(literal),
                        "{file} names {literal}: add it to KNOWN_VARIABLES"
                    );
                }
            }
        }
    }
}
