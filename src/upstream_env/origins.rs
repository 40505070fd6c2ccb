//! Which upstream variables each flag of the no-argument start comes from, so the start log
//! can name them (see [`crate::environment::Origin`]).

use crate::environment::Environment;

/// A flag `serve_argv` may write from one upstream variable, named as the variable.
const ONE_VARIABLE: &[(&str, &str)] = &[
    ("log-level", "LOG_LEVEL"),
    ("log-format", "LOG_FORMAT"),
    ("response-headers", "LIMIT_RESPONSE_HEADERS_ENABLED"),
    ("limit-header", "LIMIT_LIMIT_HEADER"),
    ("remaining-header", "LIMIT_REMAINING_HEADER"),
    ("reset-header", "LIMIT_RESET_HEADER"),
    ("redis-prefix", "CACHE_KEY_PREFIX"),
    ("carry-over-key-prefix", "CACHE_KEY_PREFIX"),
    ("redis-replay-timeout", "REDIS_TIMEOUT"),
    ("redis-cluster", "REDIS_TYPE"),
    ("redis-sentinel-master-auth", "REDIS_AUTH"),
    ("redis-tls-ca", "REDIS_TLS_CACERT"),
    ("redis-tls-cert", "REDIS_TLS_CLIENT_CERT"),
    ("redis-tls-key", "REDIS_TLS_CLIENT_KEY"),
    (
        "redis-tls-skip-hostname-verification",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    ),
    ("near-limit-ratio", "NEAR_LIMIT_RATIO"),
    ("statsd-format", "USE_DOG_STATSD"),
    ("statsd-mogrifiers", "USE_DOG_STATSD_MOGRIFIERS"),
    ("statsd-protocol", "STATSD_PROTOCOL"),
    ("statsd-flush-interval", "STATS_FLUSH_INTERVAL"),
    ("statsd-tags", "EXTRA_TAGS"),
    ("metrics-path", "PROMETHEUS_PATH"),
    ("max-connection-age", "GRPC_MAX_CONNECTION_AGE"),
    ("max-connection-age-grace", "GRPC_MAX_CONNECTION_AGE_GRACE"),
    ("config-xds-server", "CONFIG_GRPC_XDS_SERVER_URL"),
    ("config-xds-tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS"),
    (
        "force-start-without-initial-config",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
    ),
];

/// A flag `serve_argv` may write from several variables: all of them, as the log names them.
const SEVERAL_VARIABLES: &[(&str, &[&str])] = &[
    ("http-addr", &["HOST", "PORT"]),
    ("grpc-addr", &["GRPC_HOST", "GRPC_PORT"]),
    ("debug-addr", &["DEBUG_HOST", "DEBUG_PORT"]),
    (
        "config",
        &[
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
        ],
    ),
    (
        "redis-url",
        &["REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_SOCKET_TYPE"],
    ),
    ("redis-sentinel-master", &["REDIS_TYPE", "REDIS_URL"]),
    ("metrics-addr", &["USE_PROMETHEUS", "PROMETHEUS_ADDR"]),
    (
        "statsd-addr",
        &["USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT"],
    ),
];

/// Flags the no-argument start always writes for upstream's behaviour, which no variable
/// of upstream's sets: what the start log says instead of a variable.
const BEHAVIOUR: &[(&str, &str)] = &[
    ("windows", "fixed windows"),
    ("count-denied", "counting of denied hits"),
];

/// Whether the no-argument start writes `flag` (long, without `--`) for upstream's
/// behaviour rather than from a variable.
pub fn is_behaviour(flag: &str) -> bool {
    BEHAVIOUR.iter().any(|(f, _)| *f == flag)
}

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

/// For each `--flag` in `args`: the flag, its upstream variables as the log names them, and
/// whether one of them is set in `env` (else the flag carries upstream's default). Of several
/// variables, those set are named, then those unset: `PORT (HOST unset: upstream's default)`.
pub(super) fn of(args: &[String], env: &Environment) -> Vec<(String, String, bool)> {
    let is_set = |variable: &str| env.get(variable).is_some_and(|v| !v.is_empty());
    let mut out = Vec::new();
    for flag in args.iter().filter_map(|a| a.strip_prefix("--")) {
        if let Some((_, variable)) = ONE_VARIABLE.iter().find(|(f, _)| *f == flag) {
            out.push((flag.to_owned(), (*variable).to_owned(), is_set(variable)));
        } else if let Some((_, each)) = SEVERAL_VARIABLES.iter().find(|(f, _)| *f == flag) {
            let (set, unset): (Vec<&str>, Vec<&str>) = each.iter().partition(|v| is_set(v));
            let label = match (set.is_empty(), unset.is_empty()) {
                (true, _) => joined(&unset),
                (false, true) => joined(&set),
                (false, false) => format!(
                    "{} ({} unset: upstream's default)",
                    joined(&set),
                    joined(&unset)
                ),
            };
            out.push((flag.to_owned(), label, !set.is_empty()));
        } else if let Some((_, variable)) = XDS_FLAGS.iter().find(|(f, _)| *f == flag) {
            out.push((flag.to_owned(), (*variable).to_owned(), true));
        } else if let Some((_, behaviour)) = BEHAVIOUR.iter().find(|(f, _)| *f == flag) {
            out.push((flag.to_owned(), (*behaviour).to_owned(), true));
        }
    }
    out
}

/// `A`, `A and B`, `A, B and C`.
fn joined(names: &[&str]) -> String {
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}
