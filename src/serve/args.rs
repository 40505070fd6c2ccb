//! `serve`'s command-line flags (and their `RLS_*` variables), as clap parses them. Nothing
//! here is checked beyond what clap's value parsers check: [`super::ServeSettings::from_args`]
//! validates them once into typed settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ReadLimits;
use crate::duration_arg::{DurationRange, hours, millis};
use crate::telemetry::MetricsSettings;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Limits config: a YAML file, or a directory whose every file (subdirectories too) is one
    /// (envoyproxy/ratelimit format, read as its runtime reads a directory).
    /// Required unless the limits come from an xDS server (--config-xds-server).
    #[arg(
        long,
        env = "RLS_CONFIG",
        required_unless_present = "config_xds_server"
    )]
    pub config: Option<PathBuf>,
    /// The xDS config source (instead of --config).
    #[command(flatten)]
    pub xds: crate::xds::XdsArgs,
    /// Bytes read from the limits config in one load, all files together; a bigger config is
    /// refused (at start, or on reload keeping the running one).
    #[arg(long, env = "RLS_MAX_CONFIG_BYTES", default_value_t = ReadLimits::DEFAULT_MAX_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_config_bytes: u64,
    /// In a config directory, skip files and subdirectories whose name starts with `.`
    /// (loaded by default, as upstream). Also read from `RUNTIME_IGNOREDOTFILES`.
    #[arg(long, env = "RLS_IGNORE_DOT_FILES")]
    pub ignore_dot_files: bool,
    /// The same domain in several files merges into one (its top-level descriptors must
    /// differ). Also read from `MERGE_DOMAIN_CONFIG`.
    #[arg(long, env = "RLS_MERGE_DOMAIN_CONFIG")]
    pub merge_domain_config: bool,
    /// `rls_descriptor_decisions_total` series one `detailed_metric` rule may create (one per
    /// request value and outcome); further values are counted in the rule's own series.
    #[arg(long, env = "RLS_MAX_METRIC_SERIES_PER_RULE", default_value_t = MetricsSettings::DEFAULT_MAX_SERIES_PER_RULE, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_metric_series_per_rule: u32,
    /// Measure how long the runtime's threads stall: a task wakes this often and
    /// `rls_runtime_stall_seconds` records how late (1 ms resolution). Off unless set.
    #[arg(long, env = "RLS_STALL_PROBE_INTERVAL", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub stall_probe_interval: Option<Duration>,
    /// Accepted hits above this share of a rule's limit count in upstream's `near_limit` stat
    /// (`ratelimit_service_rate_limit_near_limit`); upstream's `NEAR_LIMIT_RATIO`. In (0, 1].
    #[arg(long, env = "RLS_NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// gRPC listen address (RateLimitService and grpc.health.v1).
    #[arg(long, env = "RLS_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (/healthz, /rlconfig, /metrics).
    #[arg(long, env = "RLS_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// This process's region: the owner of its components in the global counters. Required
    /// with --database-url; `local` otherwise.
    #[arg(long, env = "RLS_REGION")]
    pub region: Option<String>,
    /// Global counters: a database URL (`mysql://`, `postgres://`, `sqlite:`) turns the
    /// multi-region layer on.
    #[arg(long, env = "RLS_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Apply the database migrations at start-up (else run `gcounter-rls migrate`).
    #[arg(long, env = "RLS_MIGRATE")]
    pub migrate: bool,
    /// How often this region's components are written to the global table (±20 % jitter).
    #[arg(long, env = "RLS_GLOBAL_FLUSH_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(24)).parser())]
    pub global_flush_interval: Duration,
    /// How often other regions' sums are read from the global table (±20 % jitter).
    #[arg(long, env = "RLS_GLOBAL_SYNC_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(24)).parser())]
    pub global_sync_interval: Duration,
    /// A cell is published once its count reaches this fraction of its limit (with R regions
    /// a limit can be exceeded by up to R × floor of it before regions hear of each other).
    #[arg(long, env = "RLS_PUBLISH_FLOOR", default_value_t = gcounter_engine::global::DEFAULT_PUBLISH_FLOOR)]
    pub publish_floor: f64,
    /// While limits another region also counts are offered far over their limit here, run
    /// the global flush and sync up to this many times as often (1 = never faster; never
    /// below 100 ms).
    #[arg(long, env = "RLS_GLOBAL_CONTENDED_SPEEDUP", default_value_t = gcounter_engine::global::DEFAULT_CONTENDED_SPEEDUP, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub global_contended_speedup: u32,
    /// Speed up from this many denials per admission on such limits over the last interval
    /// (2 ≈ offered 3× the limit); the speedup is that ratio rounded down, up to the one
    /// above.
    #[arg(long, env = "RLS_GLOBAL_CONTENDED_OVERLOAD", default_value_t = gcounter_engine::global::DEFAULT_CONTENDED_OVERLOAD)]
    pub global_contended_overload: f64,
    /// Bound on one global flush, sync or cleanup.
    #[arg(long, env = "RLS_GLOBAL_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub global_timeout: Duration,
    /// Delete expired global rows this often from `serve` (off: use `gcounter-rls cleanup`).
    #[arg(long, env = "RLS_GLOBAL_CLEANUP_INTERVAL", value_parser = DurationRange::new(millis(1_000), hours(24 * 30)).parser())]
    pub global_cleanup_interval: Option<Duration>,
    /// Cap on window cells held in memory; least recently used are evicted first. Cells
    /// protected from eviction (at or near their limit) come on top, bounded in bytes.
    #[arg(long, env = "RLS_MAX_CELLS", default_value_t = 1_000_000)]
    pub max_cells: usize,
    /// Cap on the bytes held by window cells and everything keyed by them (replay queue,
    /// strict mode), e.g. `256MiB`. Counters at or near their limit are evicted last.
    #[arg(long, env = "RLS_MAX_CELL_BYTES", default_value = "256MiB")]
    pub max_cell_bytes: bytesize::ByteSize,
    /// Bytes of one request descriptor (its keys and values together); larger ones are
    /// refused with InvalidArgument.
    #[arg(long, env = "RLS_MAX_DESCRIPTOR_BYTES", default_value = "16KiB")]
    pub max_descriptor_bytes: bytesize::ByteSize,
    /// Answer OK to everything while still counting and reporting over-limit decisions
    /// (descriptor statuses keep OVER_LIMIT). Also read from `SHADOW_MODE`.
    #[arg(long, env = "RLS_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Every descriptor is a quota: a request is OVER_LIMIT only when all its counted
    /// descriptors are over (as a rule's `quota_mode`). Also read from `QUOTA_MODE`.
    #[arg(long, env = "RLS_QUOTA_MODE")]
    pub quota_mode: bool,
    /// Answers carry `dynamic_metadata`: the domain, the request's descriptors and the passed
    /// rules' `metadata` (upstream's shape). Also read from `RESPONSE_DYNAMIC_METADATA`.
    #[arg(long, env = "RLS_RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,
    /// Add RateLimit-Limit/-Remaining/-Reset (and Retry-After when over) to responses.
    #[arg(long, env = "RLS_RESPONSE_HEADERS")]
    pub response_headers: bool,
    /// All-or-nothing across the descriptors of a request: an OVER_LIMIT request gives back
    /// what its passed descriptors consumed. Also read from upstream's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    #[arg(long, env = "RLS_ALL_OR_NOTHING")]
    pub all_or_nothing: bool,
    /// The form of those headers: `draft03` (RateLimit-Limit/-Remaining/-Reset, named by the
    /// three flags below, as upstream) or `structured` (the IETF draft's latest
    /// `RateLimit-Policy` and `RateLimit`; an extension).
    #[arg(
        long,
        env = "RLS_RESPONSE_HEADER_STYLE",
        value_enum,
        default_value = "draft03"
    )]
    pub response_header_style: HeaderStyleArg,
    #[arg(long, env = "RLS_LIMIT_HEADER", default_value = "RateLimit-Limit")]
    pub limit_header: String,
    #[arg(
        long,
        env = "RLS_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub remaining_header: String,
    #[arg(long, env = "RLS_RESET_HEADER", default_value = "RateLimit-Reset")]
    pub reset_header: String,
    /// Regional origin: a Redis URL (`redis://`, `rediss://` for TLS, user and password in
    /// the URL), or a comma-separated list of Redis Cluster nodes. Unset: in-process.
    #[arg(
        long,
        env = "RLS_REDIS_URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_url: Vec<String>,
    /// Treat --redis-url as a Redis Cluster even with a single seed node.
    #[arg(long, env = "RLS_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// Redis Sentinel: the name of the master set (`sentinel monitor <name> …`); --redis-url
    /// then lists the sentinels (`redis://[user:password@]host:port`, their own credentials).
    #[arg(
        long,
        env = "RLS_REDIS_SENTINEL_MASTER",
        conflicts_with = "redis_cluster"
    )]
    pub redis_sentinel_master: Option<String>,
    /// With --redis-sentinel-master: `password` or `user:password` of the master (and its
    /// replicas), not of the sentinels.
    #[arg(
        long,
        env = "RLS_REDIS_SENTINEL_MASTER_AUTH",
        requires = "redis_sentinel_master",
        hide_env_values = true
    )]
    pub redis_sentinel_master_auth: Option<String>,
    /// PEM file of the CA(s) that signed Redis's certificate, trusted for `rediss://` instead of
    /// the system's roots.
    #[arg(long, env = "RLS_REDIS_TLS_CA")]
    pub redis_tls_ca: Option<PathBuf>,
    /// PEM client certificate (chain) for a Redis with `tls-auth-clients yes`.
    #[arg(long, env = "RLS_REDIS_TLS_CERT", requires = "redis_tls_key")]
    pub redis_tls_cert: Option<PathBuf>,
    /// PEM private key of --redis-tls-cert.
    #[arg(long, env = "RLS_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    pub redis_tls_key: Option<PathBuf>,
    /// Check Redis's certificate chain but not that it names the host (a certificate issued
    /// for another name, e.g. GCP Memorystore's). One node only.
    #[arg(long, env = "RLS_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")]
    pub redis_tls_skip_hostname_verification: bool,
    /// Prefix of every Redis key, so deployments can share a Redis (no `{` or `}`).
    #[arg(long, env = "RLS_REDIS_PREFIX", default_value = "rls:")]
    pub redis_prefix: String,
    /// Deadline of a synchronous Redis read (cold, stale, strict).
    #[arg(long, env = "RLS_REDIS_READ_TIMEOUT", default_value = "50ms", value_parser = DurationRange::new(millis(1), millis(60_000)).parser())]
    pub redis_read_timeout: Duration,
    /// Deadline of one replay round trip.
    #[arg(long, env = "RLS_REDIS_REPLAY_TIMEOUT", default_value = "1s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub redis_replay_timeout: Duration,
    /// With Redis: how long a cell's count is trusted before a decision re-reads it.
    #[arg(long, env = "RLS_FRESHNESS", default_value = "3s", value_parser = DurationRange::new(millis(1), hours(24)).parser())]
    pub freshness: Duration,
    /// How often accepted work is replayed to the regional origin (also when a batch fills).
    #[arg(long, env = "RLS_REPLAY_INTERVAL", default_value = "100ms", value_parser = DurationRange::new(millis(1), hours(24)).parser())]
    pub replay_interval: Duration,
    /// Cap on cells waiting for replay; overflow stays in memory and is counted.
    #[arg(long, env = "RLS_MAX_PENDING_REPLAY", default_value_t = 100_000)]
    pub max_pending_replay: usize,
    /// On shutdown, how long in-flight requests may take before connections are cut
    /// (a half-open client must not keep the process, and its pending replay, hostage).
    #[arg(long, env = "RLS_DRAIN_TIMEOUT", default_value = "10s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub drain_timeout: Duration,
    /// On shutdown, after the drain: how long the final replay may keep trying Redis (through
    /// an open circuit breaker, retrying after failures) before the process gives up on it.
    #[arg(long, env = "RLS_FINAL_REPLAY_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub final_replay_timeout: Duration,
    /// A warning that repeats during an outage ("replay failed", a failed global flush or
    /// sync) is logged once per this interval, with the count of those suppressed.
    #[arg(long, env = "RLS_REPEATED_WARNING_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(1_000), hours(1)).parser())]
    pub repeated_warning_interval: Duration,
    /// Threads answering requests (default: the cores this process may run on). One worker
    /// runs a current-thread runtime, the fastest on one core; more, a multi-thread runtime.
    #[arg(long, env = "RLS_WORKERS", value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,
    /// Open gRPC connections; at the cap new ones wait in the kernel's backlog.
    #[arg(long, env = "RLS_MAX_CONNECTIONS", default_value_t = 1_024)]
    pub max_connections: usize,
    /// Open admin (HTTP) connections, a cap of their own so a gRPC flood cannot take /healthz.
    #[arg(long, env = "RLS_MAX_ADMIN_CONNECTIONS", default_value_t = 64)]
    pub max_admin_connections: usize,
    /// A connection that has not sent its first bytes (the HTTP/2 preface) by then is closed.
    #[arg(long, env = "RLS_PREFACE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub preface_timeout: Duration,
    /// Admin port: the deadline for a complete request head.
    #[arg(long, env = "RLS_ADMIN_HEADER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub admin_header_timeout: Duration,
    /// Longest pause of an accept loop after an accept error such as EMFILE (5 ms, doubling).
    #[arg(long, env = "RLS_MAX_ACCEPT_BACKOFF", default_value = "1s", value_parser = humantime::parse_duration)]
    pub max_accept_backoff: Duration,
    /// Concurrent HTTP/2 streams per gRPC connection.
    #[arg(long, env = "RLS_MAX_CONCURRENT_STREAMS", default_value_t = 100)]
    pub max_concurrent_streams: u32,
    /// Largest gRPC request message, in bytes (checked before it is buffered).
    #[arg(long, env = "RLS_MAX_REQUEST_BYTES", default_value_t = 256 << 10)]
    pub max_request_bytes: usize,
    /// Request bytes buffered by all connections together; past it requests are refused.
    #[arg(long, env = "RLS_MAX_BUFFERED_REQUEST_BYTES", default_value_t = 64 << 20)]
    pub max_buffered_request_bytes: usize,
    /// gRPC requests in flight in the whole process; more wait (within their deadline).
    #[arg(long, env = "RLS_MAX_INFLIGHT_REQUESTS", default_value_t = 4_096)]
    pub max_inflight_requests: usize,
    /// Deadline of one gRPC request, from its headers to its answer (body read included).
    #[arg(long, env = "RLS_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// HTTP/2 flow-control window per stream, in bytes.
    #[arg(long, env = "RLS_HTTP2_STREAM_WINDOW", default_value_t = 64 << 10)]
    pub http2_stream_window: u32,
    /// HTTP/2 flow-control window per connection, in bytes.
    #[arg(long, env = "RLS_HTTP2_CONNECTION_WINDOW", default_value_t = 128 << 10)]
    pub http2_connection_window: u32,
    /// HTTP/2 PING interval on gRPC connections.
    #[arg(long, env = "RLS_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub http2_keepalive_interval: Duration,
    /// How long an unanswered PING keeps a connection.
    #[arg(long, env = "RLS_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http2_keepalive_timeout: Duration,
    /// TLS on the gRPC listener: the PEM certificate chain (with --grpc-tls-key). Unset:
    /// upstream's GRPC_SERVER_USE_TLS + GRPC_SERVER_TLS_CERT apply.
    #[arg(long, env = "RLS_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert.
    #[arg(long, env = "RLS_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
    /// mTLS: PEM CA certificates; clients must present a certificate they signed.
    #[arg(long, env = "RLS_GRPC_TLS_CLIENT_CA", requires = "grpc_tls_cert")]
    pub grpc_tls_client_ca: Option<PathBuf>,
    /// mTLS: the client certificate must also carry this DNS name or IP address as a SAN.
    #[arg(long, env = "RLS_GRPC_TLS_CLIENT_SAN", requires = "grpc_tls_client_ca")]
    pub grpc_tls_client_san: Option<String>,
    /// A gRPC connection older than this gets GOAWAY and its client reconnects (off by default;
    /// upstream's GRPC_MAX_CONNECTION_AGE).
    #[arg(long, env = "RLS_MAX_CONNECTION_AGE", value_parser = DurationRange::new(millis(100), hours(24 * 30)).parser())]
    pub max_connection_age: Option<Duration>,
    /// After that GOAWAY, how long its requests may finish before it is closed.
    #[arg(long, env = "RLS_MAX_CONNECTION_AGE_GRACE", value_parser = DurationRange::new(millis(1), hours(24 * 30)).parser())]
    pub max_connection_age_grace: Option<Duration>,
    /// Also serve the metrics alone on this address (upstream's PROMETHEUS_ADDR with
    /// USE_PROMETHEUS=true); they stay at /metrics on --http-addr too.
    #[arg(long, env = "RLS_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The path of the metrics on --metrics-addr (upstream's PROMETHEUS_PATH).
    #[arg(long, env = "RLS_METRICS_PATH", default_value = "/metrics")]
    pub metrics_path: String,
    /// Also serve `/rlconfig` on this address (upstream's debug listener, DEBUG_HOST and
    /// DEBUG_PORT); it stays on --http-addr too.
    #[arg(long, env = "RLS_DEBUG_ADDR")]
    pub debug_addr: Option<SocketAddr>,
    /// `/healthcheck` fails (500) while the loaded limits have no domain (upstream's
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, read when this is off).
    #[arg(long, env = "RLS_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// How often the TLS files are re-read; changed files apply to new connections.
    #[arg(long, env = "RLS_GRPC_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(1)).parser())]
    pub grpc_tls_reload_interval: Duration,
}

/// `--response-header-style`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeaderStyleArg {
    Draft03,
    Structured,
}
