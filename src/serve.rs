//! `gcounter-rls serve`: wires config, engine, origin, transport and admin together, and
//! owns their lifecycle (start-up, hot reload, graceful shutdown).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, AdminState};
use crate::config;
use crate::engine::{CELL_OVERHEAD_BYTES, Engine, EngineSettings, SystemClock};
use crate::global::{GlobalCounters, GlobalSettings, GlobalStore, SqlStore};
use crate::regional::{
    GuardSettings, GuardedOrigin, InProcessOrigin, RedisOrigin, RedisSettings, RegionalOrigin,
    install_tls_provider,
};
use crate::rls::{HeaderNames, RateLimitServiceServer, RateLimiter, RequestLimits, RlsSettings};
use crate::telemetry::Metrics;

/// `--max-cell-bytes` must hold at least this many cells of the largest descriptor: below
/// it the table's shards could not admit such a cell at all.
const MIN_LARGEST_CELLS_IN_BUDGET: u64 = 1_024;

/// The longest region name the global counters table holds.
pub const MAX_REGION_BYTES: usize = 48;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Limits config: a YAML file or a directory of *.yaml files (envoyproxy/ratelimit format).
    #[arg(long, env = "RLS_CONFIG")]
    pub config: PathBuf,
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
    #[arg(long, env = "RLS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Apply the database migrations at start-up (else run `gcounter-rls migrate`).
    #[arg(long, env = "RLS_MIGRATE")]
    pub migrate: bool,
    /// How often this region's components are written to the global table (±20 % jitter).
    #[arg(long, env = "RLS_GLOBAL_FLUSH_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub global_flush_interval: Duration,
    /// How often other regions' sums are read from the global table (±20 % jitter).
    #[arg(long, env = "RLS_GLOBAL_SYNC_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub global_sync_interval: Duration,
    /// A cell is published once its count reaches this fraction of its limit.
    #[arg(long, env = "RLS_PUBLISH_FLOOR", default_value_t = 0.5)]
    pub publish_floor: f64,
    /// Bound on one global flush, sync or cleanup.
    #[arg(long, env = "RLS_GLOBAL_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub global_timeout: Duration,
    /// Delete expired global rows this often from `serve` (off: use `gcounter-rls cleanup`).
    #[arg(long, env = "RLS_GLOBAL_CLEANUP_INTERVAL", value_parser = humantime::parse_duration)]
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
    /// Answer OK to everything while still counting and reporting over-limit decisions.
    #[arg(long, env = "RLS_SHADOW_MODE")]
    pub shadow_mode: bool,
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
    #[arg(long, env = "RLS_REDIS_URL", value_delimiter = ',')]
    pub redis_url: Vec<String>,
    /// Treat --redis-url as a Redis Cluster even with a single seed node.
    #[arg(long, env = "RLS_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// Prefix of every Redis key, so deployments can share a Redis (no `{` or `}`).
    #[arg(long, env = "RLS_REDIS_PREFIX", default_value = "rls:")]
    pub redis_prefix: String,
    /// Deadline of a synchronous Redis read (cold, stale, strict).
    #[arg(long, env = "RLS_REDIS_READ_TIMEOUT", default_value = "50ms", value_parser = humantime::parse_duration)]
    pub redis_read_timeout: Duration,
    /// Deadline of one replay round trip.
    #[arg(long, env = "RLS_REDIS_REPLAY_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub redis_replay_timeout: Duration,
    /// With Redis: how long a cell's count is trusted before a decision re-reads it.
    #[arg(long, env = "RLS_FRESHNESS", default_value = "3s", value_parser = humantime::parse_duration)]
    pub freshness: Duration,
    /// How often accepted work is replayed to the regional origin (also when a batch fills).
    #[arg(long, env = "RLS_REPLAY_INTERVAL", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub replay_interval: Duration,
    /// Cap on cells waiting for replay; overflow stays in memory and is counted.
    #[arg(long, env = "RLS_MAX_PENDING_REPLAY", default_value_t = 100_000)]
    pub max_pending_replay: usize,
    /// On shutdown, how long in-flight requests may take before connections are cut
    /// (a half-open client must not keep the process, and its pending replay, hostage).
    #[arg(long, env = "RLS_DRAIN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Threads answering requests (default: the cores this process may run on). One worker
    /// runs a current-thread runtime, the fastest on one core; more, a multi-thread runtime.
    #[arg(long, env = "RLS_WORKERS", value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,
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

    fn validate(&self) -> anyhow::Result<()> {
        self.region()?;
        if !(0.0..=1.0).contains(&self.publish_floor) {
            anyhow::bail!(
                "--publish-floor must be between 0 and 1, got {}",
                self.publish_floor
            );
        }
        if self.max_cells == 0 {
            anyhow::bail!("--max-cells must be at least 1");
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
        Ok(())
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

    fn rls_settings(&self) -> RlsSettings {
        RlsSettings {
            request_limits: RequestLimits {
                max_descriptor_bytes: usize::try_from(self.max_descriptor_bytes.as_u64())
                    .unwrap_or(usize::MAX),
                ..RequestLimits::default()
            },
            shadow_mode: self.shadow_mode,
            response_headers: self.response_headers.then(|| HeaderNames {
                limit: self.limit_header.clone(),
                remaining: self.remaining_header.clone(),
                reset: self.reset_header.clone(),
            }),
        }
    }
}

/// Run until SIGTERM or SIGINT.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    args.validate()?;
    let loaded = config::load_path(&args.config)
        .map_err(|errors| anyhow::anyhow!("invalid limits config:\n{errors}"))?;
    let metrics = Arc::new(Metrics::new());
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
        ..EngineSettings::default()
    };
    let engine = Arc::new(Engine::new(
        settings,
        origin,
        Arc::new(SystemClock),
        Arc::clone(&metrics),
    ));

    let _watcher = config::watch(&args.config, Arc::clone(&limits), Arc::clone(&metrics))
        .with_context(|| format!("cannot watch {}", args.config.display()))?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let serving = Arc::new(AtomicBool::new(true));

    let grpc_listener = TcpListener::bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on --grpc-addr {}", args.grpc_addr))?;
    let http_listener = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("cannot listen on --http-addr {}", args.http_addr))?;

    let background =
        tokio::spawn(Arc::clone(&engine).run_background(shutdown_signal(shutdown_rx.clone())));
    let global = global_counters(&args, &engine, &metrics)
        .await?
        .map(|counters| tokio::spawn(counters.run(shutdown_signal(shutdown_rx.clone()))));

    let admin = admin::router(AdminState {
        limits: Arc::clone(&limits),
        metrics: Arc::clone(&metrics),
        engine: Arc::clone(&engine),
        serving: Arc::clone(&serving),
    });
    let http = tokio::spawn(
        axum::serve(http_listener, admin)
            .with_graceful_shutdown(shutdown_signal(shutdown_rx.clone()))
            .into_future(),
    );

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;
    let limiter = RateLimiter::new(
        Arc::clone(&limits),
        Arc::clone(&engine),
        Arc::clone(&metrics),
        args.rls_settings(),
    );
    let grpc = tokio::spawn(
        tonic::transport::Server::builder()
            // Drop peers that vanished without closing (a dead Envoy, a partition).
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(health_service)
            .add_service(RateLimitServiceServer::new(limiter))
            .serve_with_incoming_shutdown(
                // The builder's TCP options apply only to listeners it binds itself.
                tonic::transport::server::TcpIncoming::from(grpc_listener)
                    .with_nodelay(Some(true))
                    .with_keepalive(Some(Duration::from_secs(60))),
                shutdown_signal(shutdown_rx.clone()),
            ),
    );
    tracing::info!(grpc = %args.grpc_addr, http = %args.http_addr, region = args.region()?, "serving");

    wait_for_signal().await?;
    tracing::info!("shutting down: draining requests and replaying pending work");
    serving.store(false, Ordering::Release);
    health
        .set_not_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;
    // Receivers only stop waiting; a send error means they are all gone already.
    let _ = shutdown_tx.send(true);

    let (grpc_abort, http_abort) = (grpc.abort_handle(), http.abort_handle());
    let drained = tokio::time::timeout(args.drain_timeout, async {
        let grpc = grpc.await;
        let http = http.await;
        (grpc, http)
    })
    .await;
    match drained {
        Ok((grpc, http)) => {
            grpc.context("gRPC server task failed")?
                .context("gRPC server failed")?;
            http.context("HTTP server task failed")?
                .context("HTTP server failed")?;
        }
        Err(_) => {
            tracing::warn!(timeout = ?args.drain_timeout, "connections still open after the drain timeout; closing them");
            grpc_abort.abort();
            http_abort.abort();
        }
    }
    // The final replay and flush run whatever happened to the listeners.
    background.await.context("engine background task failed")?;
    if let Some(global) = global {
        global.await.context("global counters task failed")?;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The global layer, when --database-url is set: connect (the database may be down: the
/// loops retry), migrate if asked, and build the flush/sync driver.
async fn global_counters(
    args: &ServeArgs,
    engine: &Arc<Engine>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<Arc<GlobalCounters>>> {
    let Some(url) = &args.database_url else {
        return Ok(None);
    };
    let store = SqlStore::connect(url)
        .await
        .context("cannot connect to --database-url")?;
    if args.migrate {
        store.migrate().await.context("database migration failed")?;
        tracing::info!("database migrations applied");
    }
    let settings = GlobalSettings {
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
        Arc::clone(metrics),
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

async fn shutdown_signal(mut rx: watch::Receiver<bool>) {
    // An error means the sender is gone: shut down too.
    let _ = rx.wait_for(|stop| *stop).await;
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
