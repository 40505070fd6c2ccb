//! Which upstream variables each flag of the no-argument start comes from, so the start log
//! can name them (see [`crate::environment::Origin`]).

use crate::environment::Environment;

/// A flag `serve_argv` may write, the variables it is derived from (as the log names them),
/// and those variables one by one.
const FLAG_SOURCES: &[(&str, &str, &[&str])] = &[
    ("log-level", "LOG_LEVEL", &["LOG_LEVEL"]),
    ("log-format", "LOG_FORMAT", &["LOG_FORMAT"]),
    ("http-addr", "HOST and PORT", &["HOST", "PORT"]),
    (
        "grpc-addr",
        "GRPC_HOST and GRPC_PORT",
        &["GRPC_HOST", "GRPC_PORT"],
    ),
    (
        "debug-addr",
        "DEBUG_HOST and DEBUG_PORT",
        &["DEBUG_HOST", "DEBUG_PORT"],
    ),
    (
        "config",
        "RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY",
        &[
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
        ],
    ),
    (
        "response-headers",
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        &["LIMIT_RESPONSE_HEADERS_ENABLED"],
    ),
    (
        "limit-header",
        "LIMIT_LIMIT_HEADER",
        &["LIMIT_LIMIT_HEADER"],
    ),
    (
        "remaining-header",
        "LIMIT_REMAINING_HEADER",
        &["LIMIT_REMAINING_HEADER"],
    ),
    (
        "reset-header",
        "LIMIT_RESET_HEADER",
        &["LIMIT_RESET_HEADER"],
    ),
    ("redis-prefix", "CACHE_KEY_PREFIX", &["CACHE_KEY_PREFIX"]),
    ("redis-replay-timeout", "REDIS_TIMEOUT", &["REDIS_TIMEOUT"]),
    (
        "redis-url",
        "REDIS_URL, REDIS_AUTH, REDIS_TLS and REDIS_SOCKET_TYPE",
        &["REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_SOCKET_TYPE"],
    ),
    ("redis-cluster", "REDIS_TYPE", &["REDIS_TYPE"]),
    (
        "redis-sentinel-master",
        "REDIS_TYPE and REDIS_URL",
        &["REDIS_TYPE"],
    ),
    ("redis-sentinel-master-auth", "REDIS_AUTH", &["REDIS_AUTH"]),
    ("redis-tls-ca", "REDIS_TLS_CACERT", &["REDIS_TLS_CACERT"]),
    (
        "redis-tls-cert",
        "REDIS_TLS_CLIENT_CERT",
        &["REDIS_TLS_CLIENT_CERT"],
    ),
    (
        "redis-tls-key",
        "REDIS_TLS_CLIENT_KEY",
        &["REDIS_TLS_CLIENT_KEY"],
    ),
    (
        "redis-tls-skip-hostname-verification",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        &["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"],
    ),
    (
        "near-limit-ratio",
        "NEAR_LIMIT_RATIO",
        &["NEAR_LIMIT_RATIO"],
    ),
    (
        "metrics-addr",
        "USE_PROMETHEUS and PROMETHEUS_ADDR",
        &["PROMETHEUS_ADDR"],
    ),
    ("metrics-path", "PROMETHEUS_PATH", &["PROMETHEUS_PATH"]),
    (
        "max-connection-age",
        "GRPC_MAX_CONNECTION_AGE",
        &["GRPC_MAX_CONNECTION_AGE"],
    ),
    (
        "max-connection-age-grace",
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        &["GRPC_MAX_CONNECTION_AGE_GRACE"],
    ),
    (
        "config-xds-server",
        "CONFIG_GRPC_XDS_SERVER_URL",
        &["CONFIG_GRPC_XDS_SERVER_URL"],
    ),
    (
        "config-xds-tls",
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        &["CONFIG_GRPC_XDS_SERVER_USE_TLS"],
    ),
    (
        "force-start-without-initial-config",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        &["FORCE_START_WITHOUT_INITIAL_CONFIG"],
    ),
];

/// The other xDS flags: one upstream variable each, always set when written.
const XDS_FLAGS: &[(&str, &str)] = &[
    ("config-xds-node-id", "CONFIG_GRPC_XDS_NODE_ID"),
    ("config-xds-node-metadata", "CONFIG_GRPC_XDS_NODE_METADATA"),
    (
        "config-xds-headers",
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    ),
    ("config-xds-client-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
    ("config-xds-client-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
    ("config-xds-ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
    ("config-xds-san", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
    (
        "config-xds-connect-retry-interval",
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    ),
    (
        "config-xds-backoff-initial",
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    ),
    ("config-xds-backoff-max", "XDS_CLIENT_BACKOFF_MAX_INTERVAL"),
    (
        "config-xds-backoff-factor",
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    ),
    ("config-xds-backoff-jitter", "XDS_CLIENT_BACKOFF_JITTER"),
    (
        "config-xds-max-message-bytes",
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    ),
];

/// For each `--flag` in `args`: the flag, its upstream variables, and whether one of them is
/// set in `env` (else the flag carries upstream's default).
pub(super) fn of(args: &[String], env: &Environment) -> Vec<(String, &'static str, bool)> {
    let mut out = Vec::new();
    for flag in args.iter().filter_map(|a| a.strip_prefix("--")) {
        if let Some((_, variables, each)) = FLAG_SOURCES.iter().find(|(f, ..)| *f == flag) {
            let set = each
                .iter()
                .any(|v| env.get(v).is_some_and(|v| !v.is_empty()));
            out.push((flag.to_owned(), *variables, set));
        } else if let Some((_, variable)) = XDS_FLAGS.iter().find(|(f, _)| *f == flag) {
            out.push((flag.to_owned(), *variable, true));
        }
    }
    out
}
