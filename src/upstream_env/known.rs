//! Every envoyproxy/ratelimit variable, and what this binary does with it: read (however it
//! is started, or only when started without arguments), refused, or accepted with one warning
//! saying why it has no effect here. Nothing upstream reads is ignored in silence; the walk
//! test holds this list against upstream's own (`known/upstream_settings.txt`).

use super::go_value::GoKind::{self, Bool, Duration, Float, Int, List, Map, Text};
use super::{Lookup, UpstreamEnvError, non_empty, problem};

/// What this binary does with one of upstream's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Read however the binary is started (beside our flags).
    Always,
    /// Read when the binary is started without arguments (upstream's image).
    NoArguments,
    /// Refused at start when set (a boolean: when true), with what to do instead.
    Refused(&'static str),
    /// Accepted with one warning at start: why it has no effect here.
    NoEffect(&'static str),
}

/// One of upstream's variables.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    pub name: &'static str,
    /// Its Go type: a value upstream's loader refuses is refused here too.
    pub kind: GoKind,
    pub treatment: Treatment,
}

const fn var(name: &'static str, kind: GoKind, treatment: Treatment) -> Variable {
    Variable {
        name,
        kind,
        treatment,
    }
}

use Treatment::{Always, NoArguments, NoEffect, Refused};

const POOL: &str = "there is no connection pool: one multiplexed connection per Redis node";
const PIPELINE: &str = "writes to Redis are batched by the replay (--replay-interval)";
const PER_SECOND: &str = "read only with REDIS_PERSECOND=true, which is refused: one Redis \
                          (REDIS_URL) serves every unit";
const STARTUP: &str = "the service starts without waiting for Redis: decisions are local and \
                       what Redis has not yet received is replayed once it answers";
const MEMCACHE: &str = "read only with BACKEND_TYPE=memcache, which is refused: Redis \
                        (REDIS_URL) is the regional origin";
const GOSTATS: &str = "upstream's statsd library reads it but upstream's service does not use it \
                       (STATS_FLUSH_INTERVAL sets the flush)";

/// Upstream's variables (its `settings.go`, the statsd library's own, and the OpenTelemetry
/// SDK's that its tracing reads), sorted by how they are treated.
pub const VARIABLES: &[Variable] = &[
    // Read by `serve` however it is started (beside our flags).
    var("GRPC_CLIENT_TLS_CACERT", Text, Always),
    var("GRPC_CLIENT_TLS_SAN", Text, Always),
    var("GRPC_SERVER_TLS_CERT", Text, Always),
    var("GRPC_SERVER_TLS_KEY", Text, Always),
    var("GRPC_SERVER_USE_TLS", Bool, Always),
    var("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Bool, Always),
    var("MERGE_DOMAIN_CONFIG", Bool, Always),
    var("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Bool, Always),
    var("QUOTA_MODE", Bool, Always),
    var("RESPONSE_DYNAMIC_METADATA", Bool, Always),
    var("RUNTIME_IGNOREDOTFILES", Bool, Always),
    var("SHADOW_MODE", Bool, Always),
    var("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Bool, Always),
    var("TRACING_ENABLED", Bool, Always),
    var("TRACING_EXPORTER_PROTOCOL", Text, Always),
    var("TRACING_SAMPLING_RATE", Float, Always),
    var("TRACING_SERVICE_INSTANCE_ID", Text, Always),
    var("TRACING_SERVICE_NAME", Text, Always),
    var("TRACING_SERVICE_NAMESPACE", Text, Always),
    // OpenTelemetry's standard variables, read with tracing on (as upstream's SDK reads
    // them): these by `serve` (which refuses any compression: none is built in), ...
    var("OTEL_EXPORTER_OTLP_ENDPOINT", Text, Always),
    var("OTEL_EXPORTER_OTLP_PROTOCOL", Text, Always),
    var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Text, Always),
    var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Text, Always),
    var("OTEL_RESOURCE_ATTRIBUTES", Text, Always),
    var("OTEL_SERVICE_NAME", Text, Always),
    var("OTEL_EXPORTER_OTLP_COMPRESSION", Text, Always),
    var("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", Text, Always),
    // ... these by the exporter itself.
    var("OTEL_EXPORTER_OTLP_HEADERS", Text, Always),
    var("OTEL_EXPORTER_OTLP_TIMEOUT", Text, Always),
    var("OTEL_EXPORTER_OTLP_TRACES_HEADERS", Text, Always),
    var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", Text, Always),
    // Read when the binary is started with no arguments (upstream's image).
    var("BACKEND_TYPE", Text, NoArguments),
    var("CACHE_KEY_PREFIX", Text, NoArguments),
    var(
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        Map,
        NoArguments,
    ),
    var("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Text, NoArguments),
    var("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Text, NoArguments),
    var("CONFIG_GRPC_XDS_NODE_ID", Text, NoArguments),
    var("CONFIG_GRPC_XDS_NODE_METADATA", Text, NoArguments),
    var(
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        Duration,
        NoArguments,
    ),
    var("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Text, NoArguments),
    var("CONFIG_GRPC_XDS_SERVER_TLS_SAN", Text, NoArguments),
    var("CONFIG_GRPC_XDS_SERVER_URL", Text, NoArguments),
    var("CONFIG_GRPC_XDS_SERVER_USE_TLS", Bool, NoArguments),
    var("CONFIG_TYPE", Text, NoArguments),
    var("DEBUG_HOST", Text, NoArguments),
    var("DEBUG_PORT", Int, NoArguments),
    var("FORCE_START_WITHOUT_INITIAL_CONFIG", Bool, NoArguments),
    var("GRPC_HOST", Text, NoArguments),
    var("GRPC_MAX_CONNECTION_AGE", Duration, NoArguments),
    var("GRPC_MAX_CONNECTION_AGE_GRACE", Duration, NoArguments),
    var("GRPC_PORT", Int, NoArguments),
    var("HOST", Text, NoArguments),
    var("LIMIT_LIMIT_HEADER", Text, NoArguments),
    var("LIMIT_REMAINING_HEADER", Text, NoArguments),
    var("LIMIT_RESET_HEADER", Text, NoArguments),
    var("LIMIT_RESPONSE_HEADERS_ENABLED", Bool, NoArguments),
    var("LOG_FORMAT", Text, NoArguments),
    var("LOG_LEVEL", Text, NoArguments),
    var("NEAR_LIMIT_RATIO", Float, NoArguments),
    var("PORT", Int, NoArguments),
    var("PROMETHEUS_ADDR", Text, NoArguments),
    var("PROMETHEUS_PATH", Text, NoArguments),
    var("REDIS_AUTH", Text, NoArguments),
    var("REDIS_POOL_ON_EMPTY_BEHAVIOR", Text, NoArguments),
    var("REDIS_SENTINEL_AUTH", Text, NoArguments),
    var("REDIS_SOCKET_TYPE", Text, NoArguments),
    var("REDIS_TIMEOUT", Duration, NoArguments),
    var("REDIS_TLS", Bool, NoArguments),
    var("REDIS_TLS_CACERT", Text, NoArguments),
    var("REDIS_TLS_CLIENT_CERT", Text, NoArguments),
    var("REDIS_TLS_CLIENT_KEY", Text, NoArguments),
    var("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Bool, NoArguments),
    var("REDIS_TYPE", Text, NoArguments),
    var("REDIS_URL", Text, NoArguments),
    var("RUNTIME_APPDIRECTORY", Text, NoArguments),
    var("RUNTIME_ROOT", Text, NoArguments),
    var("RUNTIME_SUBDIRECTORY", Text, NoArguments),
    var("RUNTIME_WATCH_ROOT", Bool, NoArguments),
    var("USE_PROMETHEUS", Bool, NoArguments),
    var("USE_STATSD", Bool, NoArguments),
    var("USE_DOG_STATSD", Bool, NoArguments),
    var("USE_DOG_STATSD_MOGRIFIERS", List, NoArguments),
    var("DISABLE_STATS", Bool, NoArguments),
    var("STATSD_HOST", Text, NoArguments),
    var("STATSD_PORT", Int, NoArguments),
    var("STATSD_PROTOCOL", Text, NoArguments),
    var("EXTRA_TAGS", Map, NoArguments),
    var("STATS_FLUSH_INTERVAL", Duration, NoArguments),
    var("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Duration, NoArguments),
    var("XDS_CLIENT_BACKOFF_JITTER", Bool, NoArguments),
    var("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Duration, NoArguments),
    var("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Float, NoArguments),
    var("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Int, NoArguments),
    // Refused at start (a feature this binary does not have), naming what to do instead.
    var(
        "GRPC_UDS",
        Text,
        Refused("gRPC on a Unix socket is not supported: use GRPC_HOST and GRPC_PORT"),
    ),
    var(
        "REDIS_PERSECOND",
        Bool,
        Refused(
            "a second Redis for per-second limits is not supported: one Redis (REDIS_URL) \
             serves every unit; unset it",
        ),
    ),
    // Accepted, with one warning: they tune parts that do not exist here.
    var(
        "PROMETHEUS_MAPPER_YAML",
        Text,
        NoEffect(
            "upstream's stats are exported under its default mapping's names and labels \
             (domain, key1, key2), which Envoy Gateway's mapping uses too",
        ),
    ),
    var("GOSTATS_FLUSH_INTERVAL_SECONDS", Int, NoEffect(GOSTATS)),
    var("GOSTATS_LOGGING_SINK_DISABLED", Bool, NoEffect(GOSTATS)),
    var(
        "EXPIRATION_JITTER_MAX_SECONDS",
        Int,
        NoEffect(
            "each key expires a fixed time after its window ends; processes replay at \
             different moments, so expiries are spread already",
        ),
    ),
    var(
        "LOCAL_CACHE_SIZE_IN_BYTES",
        Int,
        NoEffect(
            "every decision is taken from memory (bounded by --max-cell-bytes): there is no \
             separate over-limit cache",
        ),
    ),
    var(
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        Bool,
        NoEffect(
            "/healthcheck does not follow Redis: decisions go on from local counts while \
             Redis is down (rls_origin_circuit_state shows it)",
        ),
    ),
    var("REDIS_POOL_SIZE", Int, NoEffect(POOL)),
    var("REDIS_CLUSTER_PIPELINE_PARALLELISM", Int, NoEffect(POOL)),
    var("REDIS_PIPELINE_WINDOW", Duration, NoEffect(PIPELINE)),
    var("REDIS_PIPELINE_LIMIT", Int, NoEffect(PIPELINE)),
    var(
        "REDIS_STARTUP_INITIAL_INTERVAL",
        Duration,
        NoEffect(STARTUP),
    ),
    var("REDIS_STARTUP_MAX_INTERVAL", Duration, NoEffect(STARTUP)),
    var(
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        Duration,
        NoEffect(STARTUP),
    ),
    var("REDIS_PERSECOND_AUTH", Text, NoEffect(PER_SECOND)),
    var(
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        Int,
        NoEffect(PER_SECOND),
    ),
    var("REDIS_PERSECOND_PIPELINE_LIMIT", Int, NoEffect(PER_SECOND)),
    var(
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        Duration,
        NoEffect(PER_SECOND),
    ),
    var(
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        Text,
        NoEffect(PER_SECOND),
    ),
    var("REDIS_PERSECOND_POOL_SIZE", Int, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_SENTINEL_AUTH", Text, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_SOCKET_TYPE", Text, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_TIMEOUT", Duration, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_TLS", Bool, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_TYPE", Text, NoEffect(PER_SECOND)),
    var("REDIS_PERSECOND_URL", Text, NoEffect(PER_SECOND)),
    var("MEMCACHE_HOST_PORT", List, NoEffect(MEMCACHE)),
    var("MEMCACHE_MAX_IDLE_CONNS", Int, NoEffect(MEMCACHE)),
    var("MEMCACHE_SRV", Text, NoEffect(MEMCACHE)),
    var("MEMCACHE_SRV_REFRESH", Duration, NoEffect(MEMCACHE)),
    var("MEMCACHE_TLS", Bool, NoEffect(MEMCACHE)),
    var("MEMCACHE_TLS_CACERT", Text, NoEffect(MEMCACHE)),
    var("MEMCACHE_TLS_CLIENT_CERT", Text, NoEffect(MEMCACHE)),
    var("MEMCACHE_TLS_CLIENT_KEY", Text, NoEffect(MEMCACHE)),
    var(
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        Bool,
        NoEffect(MEMCACHE),
    ),
];

/// Whether `name` is one of upstream's variables this binary knows.
pub fn is_known(name: &str) -> bool {
    VARIABLES.iter().any(|v| v.name == name)
}

/// The names of every variable in [`VARIABLES`].
pub fn known_names() -> impl Iterator<Item = &'static str> {
    VARIABLES.iter().map(|v| v.name)
}

/// Every upstream variable set in `env` checked as upstream's loader checks it (its Go type),
/// the refused ones refused; the warnings for those accepted without effect, one each.
pub(super) fn check(env: Lookup<'_>) -> Result<Vec<String>, UpstreamEnvError> {
    let mut warnings = Vec::new();
    for variable in VARIABLES {
        let Some(value) = non_empty(env, variable.name) else {
            continue;
        };
        variable
            .kind
            .check(&value)
            .map_err(|why| problem(variable.name, why))?;
        match variable.treatment {
            Refused(instead) => {
                let on =
                    variable.kind != Bool || super::go_value::parse_bool(&value).unwrap_or(true);
                if on {
                    return Err(problem(variable.name, instead));
                }
            }
            // The value is not shown: some hold passwords.
            NoEffect(why) => warnings.push(format!(
                "{} is set but has no effect here: {why}",
                variable.name
            )),
            Always | NoArguments => {}
        }
    }
    Ok(warnings)
}

/// With arguments, upstream's variables only a no-argument start reads: one warning naming
/// those set, so none is ignored in silence.
pub fn unread_with_arguments(env: Lookup<'_>) -> Option<String> {
    let unread: Vec<&str> = VARIABLES
        .iter()
        .filter(|v| v.treatment != Always && non_empty(env, v.name).is_some())
        .map(|v| v.name)
        .collect();
    if unread.is_empty() {
        return None;
    }
    Some(format!(
        "upstream's {} set but not read: with arguments only our flags and RLS_* variables \
         apply (and upstream's switches); start without arguments to read upstream's variables",
        unread.join(", ")
    ))
}

#[cfg(test)]
mod tests;
