//! `gcounter-rls serve`: wires config, engine, origin, transport and admin together, and
//! owns their lifecycle (start-up, hot reload, graceful shutdown).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;

use crate::admin::{self, AdminState};
use crate::config::{self, LoadOptions, ReadLimits};
use crate::duration_arg::{DurationRange, hours, millis};
use crate::rls::{
    HeaderNames, RateLimitRoute, RateLimitServiceServer, RateLimiter, RequestLimits, RlsSettings,
};
use crate::supervisor::{Stage, Supervisor};
use crate::telemetry::{Metrics, MetricsSettings};
use crate::transport::{self, TlsFiles, TlsReloader, TransportSettings};
use crate::upstream_env::{self, Lookup};
use gcounter_engine::engine::{CELL_OVERHEAD_BYTES, Engine, EngineSettings, SystemClock};
use gcounter_engine::global::{GlobalCounters, GlobalSettings, GlobalStore};
use gcounter_engine::recorder::Recorder;
use gcounter_engine::regional::{GuardSettings, GuardedOrigin, InProcessOrigin, RegionalOrigin};
use gcounter_redis::{RedisOrigin, RedisSettings, install_tls_provider};
use gcounter_sql::SqlStore;

/// `--max-cell-bytes` must hold at least this many cells of the largest descriptor: below
/// it the table's shards could not admit such a cell at all.
const MIN_LARGEST_CELLS_IN_BUDGET: u64 = 1_024;

/// Above these, a count is a typo, not a plan: the byte cap would bind long before.
const MAX_CELLS_CEILING: usize = 1_000_000_000;
const MAX_PENDING_REPLAY_CEILING: usize = 100_000_000;

/// The longest region name the global counters table holds.
pub const MAX_REGION_BYTES: usize = 48;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Limits config: a YAML file, or a directory whose every file (subdirectories too) is one
    /// (envoyproxy/ratelimit format, read as its runtime reads a directory).
    #[arg(long, env = "RLS_CONFIG")]
    pub config: PathBuf,
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
    /// A cell is published once its count reaches this fraction of its limit.
    #[arg(long, env = "RLS_PUBLISH_FLOOR", default_value_t = 0.5)]
    pub publish_floor: f64,
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

impl ServeArgs {
    /// The region, checked: required with a database, at most the column's size.
    fn region(&self) -> anyhow::Result<&str> {
        let region = match (&self.region, &self.database_url) {
            (Some(region), _) => region.as_str(),
            (None, Some(_)) => anyhow::bail!(
                "--region (RLS_REGION) is required with --database-url: it names this region's \
                 components in the global counters"
            ),
            (None, None) => "local",
        };
        if region.is_empty() || region.len() > MAX_REGION_BYTES {
            anyhow::bail!(
                "--region must be 1 to {MAX_REGION_BYTES} bytes, got {} bytes",
                region.len()
            );
        }
        Ok(region)
    }

    /// Turns on the switches named by envoyproxy/ratelimit's own environment variables, so
    /// its deployments keep their environment (see `upstream_env`).
    fn apply_upstream_env(&mut self) -> anyhow::Result<()> {
        self.shadow_mode |= upstream_env::flag("SHADOW_MODE")?;
        self.quota_mode |= upstream_env::flag("QUOTA_MODE")?;
        self.ignore_dot_files |= upstream_env::flag("RUNTIME_IGNOREDOTFILES")?;
        self.response_dynamic_metadata |= upstream_env::flag("RESPONSE_DYNAMIC_METADATA")?;
        self.merge_domain_config |= upstream_env::flag("MERGE_DOMAIN_CONFIG")?;
        Ok(())
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.region()?;
        if !(self.near_limit_ratio > 0.0 && self.near_limit_ratio <= 1.0) {
            anyhow::bail!(
                "--near-limit-ratio (NEAR_LIMIT_RATIO) must be in (0, 1], got {}",
                self.near_limit_ratio
            );
        }
        if !(0.0..=1.0).contains(&self.publish_floor) {
            anyhow::bail!(
                "--publish-floor must be between 0 and 1, got {}",
                self.publish_floor
            );
        }
        if !(1..=MAX_CELLS_CEILING).contains(&self.max_cells) {
            anyhow::bail!(
                "--max-cells must be 1 to {MAX_CELLS_CEILING}, got {}",
                self.max_cells
            );
        }
        if !(1..=MAX_PENDING_REPLAY_CEILING).contains(&self.max_pending_replay) {
            anyhow::bail!(
                "--max-pending-replay must be 1 to {MAX_PENDING_REPLAY_CEILING}, got {}",
                self.max_pending_replay
            );
        }
        if self.max_descriptor_bytes.as_u64() == 0 {
            anyhow::bail!("--max-descriptor-bytes must be at least 1 byte");
        }
        let floor = MIN_LARGEST_CELLS_IN_BUDGET.saturating_mul(self.largest_cell_bytes());
        if self.max_cell_bytes.as_u64() < floor {
            anyhow::bail!(
                "--max-cell-bytes {} is too small: it must hold at least {MIN_LARGEST_CELLS_IN_BUDGET} \
                 cells of the largest descriptor (--max-descriptor-bytes {}), i.e. {}",
                self.max_cell_bytes,
                self.max_descriptor_bytes,
                bytesize::ByteSize::b(floor)
            );
        }
        self.transport_settings().validate()?;
        if !admin::valid_metrics_path(&self.metrics_path) {
            anyhow::bail!(
                "--metrics-path (PROMETHEUS_PATH) must start with / and hold only letters, \
                 digits and /_.- (at most 256 bytes), got {:?}",
                self.metrics_path
            );
        }
        Ok(())
    }

    /// The gRPC listener's TLS files: our flags, else upstream's variables, else plaintext.
    fn grpc_tls_files(&self, env: Lookup<'_>) -> anyhow::Result<Option<TlsFiles>> {
        match (&self.grpc_tls_cert, &self.grpc_tls_key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.grpc_tls_client_ca.clone(),
                client_san: self.grpc_tls_client_san.clone(),
            })),
            // clap's `requires` makes cert and key come together.
            _ => Ok(upstream_env::grpc_tls(env)?),
        }
    }

    fn healthy_with_at_least_one_config_loaded(&self, env: Lookup<'_>) -> anyhow::Result<bool> {
        Ok(self.healthy_with_at_least_one_config_loaded
            || upstream_env::healthy_with_at_least_one_config_loaded(env)?)
    }

    fn config_load_options(&self) -> LoadOptions {
        LoadOptions {
            limits: ReadLimits {
                max_bytes: self.max_config_bytes,
                ..ReadLimits::default()
            },
            ignore_dot_files: self.ignore_dot_files,
            merge_domains: self.merge_domain_config,
        }
    }

    /// The weight of the largest cell a request can make: its descriptor's keys and values,
    /// their length prefixes (at most 6 bytes per key and per value), the override prefix and
    /// the domain (bounded by the config), and a cell's fixed overhead.
    fn largest_cell_bytes(&self) -> u64 {
        let entries = RequestLimits::default().max_entries as u64;
        CELL_OVERHEAD_BYTES
            .saturating_add(self.max_descriptor_bytes.as_u64())
            .saturating_add(entries * 12 + 1_024)
    }

    fn transport_settings(&self) -> TransportSettings {
        TransportSettings {
            max_connections: self.max_connections,
            max_admin_connections: self.max_admin_connections,
            preface_timeout: self.preface_timeout,
            admin_header_timeout: self.admin_header_timeout,
            max_accept_backoff: self.max_accept_backoff,
            max_concurrent_streams: self.max_concurrent_streams,
            max_request_bytes: self.max_request_bytes,
            max_buffered_request_bytes: self.max_buffered_request_bytes,
            max_inflight_requests: self.max_inflight_requests,
            request_timeout: self.request_timeout,
            http2_stream_window: self.http2_stream_window,
            http2_connection_window: self.http2_connection_window,
            http2_keepalive_interval: self.http2_keepalive_interval,
            http2_keepalive_timeout: self.http2_keepalive_timeout,
            max_connection_age: self.max_connection_age,
            max_connection_age_grace: self.max_connection_age_grace,
            ..TransportSettings::default()
        }
    }

    fn rls_settings(&self) -> RlsSettings {
        RlsSettings {
            request_limits: RequestLimits {
                max_descriptor_bytes: usize::try_from(self.max_descriptor_bytes.as_u64())
                    .unwrap_or(usize::MAX),
                ..RequestLimits::default()
            },
            shadow_mode: self.shadow_mode,
            quota_mode: self.quota_mode,
            response_dynamic_metadata: self.response_dynamic_metadata,
            response_headers: self.response_headers.then(|| HeaderNames {
                limit: self.limit_header.clone(),
                remaining: self.remaining_header.clone(),
                reset: self.reset_header.clone(),
            }),
        }
    }
}

/// Run until SIGTERM or SIGINT.
///
/// Shutdown order (see `supervisor`): health turns NOT_SERVING, the listeners stop accepting
/// and in-flight requests drain (at most `--drain-timeout`); only then the final replay and
/// the final global flush run, so they carry every decision answered during the drain.
pub async fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    args.apply_upstream_env()?;
    args.validate()?;
    let load_options = args.config_load_options();
    let loaded = config::load_path(&args.config, &load_options)
        .map_err(|errors| anyhow::anyhow!("invalid limits config:\n{errors}"))?;
    let metrics = Arc::new(Metrics::with_settings(MetricsSettings {
        max_series_per_rule: args.max_metric_series_per_rule,
    }));
    metrics.set_near_limit_ratio(args.near_limit_ratio);
    metrics.config_loaded(loaded.rule_count());
    tracing::info!(path = %args.config.display(), rules = loaded.rule_count(), "limits config loaded");
    let limits = Arc::new(ArcSwap::from_pointee(loaded));

    let (origin, freshness) = regional_origin(&args)?;
    let settings = EngineSettings {
        max_cells: args.max_cells,
        max_cell_bytes: args.max_cell_bytes.as_u64(),
        largest_cell_bytes: args.largest_cell_bytes(),
        replay_interval: args.replay_interval,
        max_pending_replay: args.max_pending_replay,
        freshness,
        final_replay_timeout: args.final_replay_timeout,
        repeated_warning_interval: args.repeated_warning_interval,
        ..EngineSettings::default()
    };
    let engine = Arc::new(Engine::new(
        settings,
        origin,
        Arc::new(SystemClock),
        Arc::clone(&metrics) as Arc<dyn Recorder>,
    ));

    let reloads = config::watch(
        &args.config,
        load_options,
        Arc::clone(&limits),
        Arc::clone(&metrics),
    )
    .with_context(|| format!("cannot watch {}", args.config.display()))?;

    let serving = Arc::new(AtomicBool::new(true));

    let tls = args
        .grpc_tls_files(&upstream_env::process_env)?
        .map(TlsReloader::load)
        .transpose()
        .context("TLS on the gRPC listener")?;
    let transport = args.transport_settings();
    let transport::Listeners {
        grpc: grpc_listener,
        admin: http_listener,
    } = transport::bind(args.grpc_addr, args.http_addr, &transport, &metrics).await?;

    let metrics_listener = match args.metrics_addr {
        Some(addr) => Some(transport::bind_side("metrics", addr, &transport, &metrics).await?),
        None => None,
    };
    let debug_listener = match args.debug_addr {
        Some(addr) => Some(transport::bind_side("debug", addr, &transport, &metrics).await?),
        None => None,
    };

    let mut supervisor = Supervisor::new();
    let finish = supervisor.stop_signal(Stage::Background);
    let background = Arc::clone(&engine);
    supervisor.spawn(Stage::Background, "replay and reaping", async move {
        background.run_background(finish.cancelled_owned()).await;
        Ok(())
    });
    if let Some(counters) = global_counters(&args, &engine, &metrics).await? {
        let finish = supervisor.stop_signal(Stage::Background);
        supervisor.spawn(Stage::Background, "global counters", async move {
            counters.run(finish.cancelled_owned()).await;
            Ok(())
        });
    }

    let stop = supervisor.stop_signal(Stage::Serving);
    supervisor.spawn(Stage::Serving, "config reload", async move {
        tokio::select! {
            () = reloads => anyhow::bail!("the config watcher stopped: limits no longer reload"),
            () = stop.cancelled() => Ok(()),
        }
    });

    let limiter = Arc::new(RateLimiter::new(
        Arc::clone(&limits),
        Arc::clone(&engine),
        Arc::clone(&metrics),
        args.rls_settings(),
    ));
    let admin_state = AdminState {
        limits: Arc::clone(&limits),
        metrics: Arc::clone(&metrics),
        engine: Arc::clone(&engine),
        serving: Arc::clone(&serving),
        healthy_with_at_least_one_config_loaded: args
            .healthy_with_at_least_one_config_loaded(&upstream_env::process_env)?,
        json: admin::JsonEndpoint {
            decisions: Arc::new(JsonRoute(Arc::clone(&limiter))),
            max_body_bytes: transport.max_request_bytes,
            timeout: transport.request_timeout,
        },
    };
    if let Some(listener) = metrics_listener {
        let router = admin::metrics_router(admin_state.clone(), &args.metrics_path);
        let stop = supervisor.stop_signal(Stage::Serving);
        let header_timeout = transport.admin_header_timeout;
        supervisor.spawn(Stage::Serving, "metrics server", async move {
            transport::serve_http1(listener, router, header_timeout, stop.cancelled_owned()).await;
            Ok(())
        });
    }
    if let Some(listener) = debug_listener {
        let router = admin::debug_router(admin_state.clone());
        let stop = supervisor.stop_signal(Stage::Serving);
        let header_timeout = transport.admin_header_timeout;
        supervisor.spawn(Stage::Serving, "debug server", async move {
            transport::serve_http1(listener, router, header_timeout, stop.cancelled_owned()).await;
            Ok(())
        });
    }
    let upstream_health = admin_state.clone();
    let admin = admin::router(admin_state);
    let stop = supervisor.stop_signal(Stage::Serving);
    let admin_header_timeout = transport.admin_header_timeout;
    supervisor.spawn(Stage::Serving, "HTTP server", async move {
        transport::serve_http1(
            http_listener,
            admin,
            admin_header_timeout,
            stop.cancelled_owned(),
        )
        .await;
        Ok(())
    });

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;
    if let Some(tls) = &tls {
        let stop = supervisor.stop_signal(Stage::Serving);
        let tls = Arc::clone(tls);
        let interval = args.grpc_tls_reload_interval;
        supervisor.spawn(Stage::Serving, "TLS certificate reload", async move {
            tls.watch(interval, stop).await;
            Ok(())
        });
    }
    let tls_mode = match &tls {
        Some(tls) if tls.mutual() => "mtls",
        Some(_) => "tls",
        None => "plaintext",
    };
    let incoming = transport::grpc_incoming(grpc_listener, tls, transport.preface_timeout);
    let stop = supervisor.stop_signal(Stage::Serving);
    let grpc = transport::grpc_server(&transport)
        .add_service(health_service)
        .add_service(RateLimitRoute::new(limiter, transport.max_request_bytes))
        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned());
    supervisor.spawn(Stage::Serving, "gRPC server", async move {
        grpc.await.context("gRPC server failed")
    });
    tracing::info!(grpc = %args.grpc_addr, grpc_tls = tls_mode, http = %args.http_addr, region = args.region()?, "serving");

    let health = Arc::new(Health {
        serving: Arc::clone(&serving),
        reporter: health,
        upstream: Some((upstream_health, tokio::sync::Mutex::new(None))),
    });
    health.refresh_upstream().await;
    let follower = Arc::clone(&health);
    let stop = supervisor.stop_signal(Stage::Serving);
    supervisor.spawn(Stage::Serving, "gRPC health (ratelimit)", async move {
        follower.follow_upstream(stop).await;
        Ok(())
    });
    until_signal(&mut supervisor, &health, wait_for_signal()).await?;

    tracing::info!("shutting down: draining requests, then the final replay and flush");
    health.not_serving().await;
    let report = supervisor.shutdown(args.drain_timeout).await;
    if !report.aborted.is_empty() {
        tracing::warn!(timeout = ?args.drain_timeout, tasks = ?report.aborted, "connections still open after the drain timeout; closed them");
    }
    for failure in &report.failed {
        tracing::error!(task = failure.name, reason = %failure.reason, "task failed during shutdown");
    }
    tracing::info!("stopped");
    Ok(())
}

/// `POST /json` on the admin port, answered by the gRPC service's limiter.
struct JsonRoute(Arc<RateLimiter>);

impl admin::JsonDecisions for JsonRoute {
    fn decide<'a>(
        &'a self,
        body: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = admin::JsonAnswer> + Send + 'a>> {
        Box::pin(async move {
            let reply = crate::rls::should_rate_limit_json(&self.0, body).await;
            admin::JsonAnswer {
                status: reply.status,
                body: reply.body,
            }
        })
    }
}

/// The global layer, when --database-url is set: the store (the database may be down: the
/// loops connect, and migrate if asked, when it answers) and the flush/sync driver.
async fn global_counters(
    args: &ServeArgs,
    engine: &Arc<Engine>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<Arc<GlobalCounters>>> {
    let Some(url) = &args.database_url else {
        return Ok(None);
    };
    // Only a URL that cannot be used fails here: the pool connects lazily, and the loops
    // (and the migration, with --migrate) retry until the database answers.
    let store = SqlStore::connect(url)
        .await
        .context("invalid --database-url")?;
    let settings = GlobalSettings {
        migrate: args.migrate,
        repeated_warning_interval: args.repeated_warning_interval,
        flush_interval: args.global_flush_interval,
        sync_interval: args.global_sync_interval,
        publish_floor: args.publish_floor,
        timeout: args.global_timeout,
        cleanup_interval: args.global_cleanup_interval,
        ..GlobalSettings::default()
    };
    tracing::info!(
        store = store.name(),
        region = args.region()?,
        "global counters on"
    );
    Ok(Some(Arc::new(GlobalCounters::new(
        Arc::new(store),
        Arc::clone(engine),
        args.region()?.to_owned(),
        settings,
        Arc::clone(metrics) as Arc<dyn Recorder>,
    ))))
}

/// The in-process origin, or Redis behind timeouts and a circuit breaker. Returns the
/// freshness the engine must apply: none when this process is the whole region.
fn regional_origin(
    args: &ServeArgs,
) -> anyhow::Result<(Arc<dyn RegionalOrigin>, Option<Duration>)> {
    if args.redis_url.is_empty() {
        let origin: Arc<dyn RegionalOrigin> = Arc::new(InProcessOrigin::new(args.max_cells));
        return Ok((origin, None));
    }
    install_tls_provider();
    let redis = RedisOrigin::connect(RedisSettings {
        urls: args.redis_url.clone(),
        cluster: args.redis_cluster,
        key_prefix: args.redis_prefix.clone(),
    })
    .context("invalid --redis-url / --redis-prefix")?;
    tracing::info!(
        cluster = redis.is_cluster(),
        nodes = args.redis_url.len(),
        "regional origin: Redis (connecting in the background)"
    );
    let guarded = GuardedOrigin::new(
        Arc::new(redis),
        GuardSettings {
            read_timeout: args.redis_read_timeout,
            replay_timeout: args.redis_replay_timeout,
            ..GuardSettings::default()
        },
    );
    Ok((Arc::new(guarded), Some(args.freshness)))
}

/// gRPC health's service name for upstream's health (envoyproxy/ratelimit registers its
/// checker under this name), probed by its image's users: `grpc_health_probe -service=ratelimit`.
const UPSTREAM_HEALTH_NAME: &str = "ratelimit";

/// How often gRPC health for [`UPSTREAM_HEALTH_NAME`] follows a config reload (shutdown and a
/// stopped task change it at once).
const UPSTREAM_HEALTH_INTERVAL: Duration = Duration::from_millis(250);

/// What the process says about itself: `/healthz` and gRPC health for `""` and the
/// RateLimitService's name (ours), `/healthcheck` and gRPC health for `ratelimit` (upstream's).
struct Health {
    serving: Arc<AtomicBool>,
    reporter: tonic_health::server::HealthReporter,
    /// Upstream's health inputs (`AdminState::upstream_unhealthy`) and the status last set for
    /// `ratelimit`. The lock makes "compute, then set" one step, so a poll that read `serving`
    /// just before shutdown cannot set SERVING after shutdown set NOT_SERVING.
    upstream: Option<(admin::AdminState, tokio::sync::Mutex<Option<bool>>)>,
}

impl Health {
    async fn not_serving(&self) {
        self.serving.store(false, Ordering::Release);
        self.reporter
            .set_not_serving::<RateLimitServiceServer<RateLimiter>>()
            .await;
        self.reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        self.refresh_upstream().await;
    }

    /// Set gRPC health for `ratelimit` to what `/healthcheck` answers, when it changed.
    async fn refresh_upstream(&self) {
        let Some((state, last)) = &self.upstream else {
            return;
        };
        let mut last = last.lock().await;
        let healthy = state.upstream_unhealthy().is_none();
        if *last != Some(healthy) {
            let status = if healthy {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            self.reporter
                .set_service_status(UPSTREAM_HEALTH_NAME, status)
                .await;
            *last = Some(healthy);
        }
    }

    /// Follow config reloads (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) until `stop`.
    async fn follow_upstream(&self, stop: tokio_util::sync::CancellationToken) {
        let mut ticks = tokio::time::interval(UPSTREAM_HEALTH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.refresh_upstream().await,
                () = stop.cancelled() => return,
            }
        }
    }
}

/// Wait for `signal`. A task that stops meanwhile leaves the process up (its in-memory counts
/// are still worth the final replay) but unhealthy, so the orchestrator replaces it, instead
/// of a process that answers while nothing reaches Redis.
async fn until_signal(
    supervisor: &mut Supervisor,
    health: &Health,
    signal: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tokio::pin!(signal);
    loop {
        tokio::select! {
            received = &mut signal => return received,
            failure = supervisor.next_failure() => {
                tracing::error!(task = failure.name, reason = %failure.reason, "a task stopped before shutdown; health is now NOT_SERVING");
                health.not_serving().await;
            }
        }
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tonic_health::pb::health_server::Health as _;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    use tonic_health::server::HealthService;

    use super::*;

    /// Issue 15, break 11: a background task that dies (here: panics) must turn `/healthz`
    /// and gRPC health to NOT_SERVING, and the process must still shut down cleanly.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_dies_makes_the_process_unhealthy_and_shutdown_still_works() {
        let (reporter, _service) = tonic_health::server::health_reporter();
        reporter
            .set_serving::<RateLimitServiceServer<RateLimiter>>()
            .await;
        let health = Health {
            serving: Arc::new(AtomicBool::new(true)),
            reporter: reporter.clone(),
            upstream: None,
        };
        let mut supervisor = Supervisor::new();
        supervisor.spawn(Stage::Background, "replay and reaping", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("replay interval of zero");
        });
        let finish = supervisor.stop_signal(Stage::Background);
        supervisor.spawn(Stage::Background, "global counters", async move {
            finish.cancelled().await;
            Ok(())
        });
        let signal = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(())
        };
        until_signal(&mut supervisor, &health, signal)
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        assert!(
            !health.serving.load(Ordering::Acquire),
            "/healthz must fail"
        );
        let name = <RateLimitServiceServer<RateLimiter> as tonic::server::NamedService>::NAME;
        let status = HealthService::from_health_reporter(reporter)
            .check(tonic::Request::new(HealthCheckRequest {
                service: name.to_owned(),
            }))
            .await
            .map(|r| r.into_inner().status);
        assert_eq!(status.ok(), Some(ServingStatus::NotServing as i32));
        let report = supervisor.shutdown(Duration::from_secs(1)).await;
        assert!(
            report.failed.is_empty() && report.aborted.is_empty(),
            "{report:?}"
        );
    }

    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// The flags' defaults are the transport's documented defaults (they are written twice).
    #[test]
    fn transport_flag_defaults_match_the_transport_defaults() {
        let cli = Cli::try_parse_from(["serve", "--config", "x.yaml"]).expect("parse");
        assert_eq!(
            format!("{:?}", cli.serve.transport_settings()),
            format!("{:?}", TransportSettings::default())
        );
    }

    #[test]
    fn a_zero_transport_bound_is_refused_at_start() {
        let cli = Cli::try_parse_from(["serve", "--config", "x.yaml", "--max-connections", "0"])
            .expect("parse");
        let error = cli.serve.validate().expect_err("refused").to_string();
        assert!(error.contains("--max-connections"), "{error}");
    }

    #[test]
    fn zero_or_absurd_counts_are_refused_at_start() {
        for (flag, value) in [
            ("--max-cells", "0"),
            ("--max-cells", "1000000000000"),
            ("--max-pending-replay", "0"),
            ("--max-pending-replay", "1000000000000"),
        ] {
            let cli =
                Cli::try_parse_from(["serve", "--config", "x.yaml", flag, value]).expect("parse");
            let error = cli.serve.validate().expect_err("refused").to_string();
            assert!(error.contains(flag), "{flag} {value}: {error}");
        }
    }
}
