//! `gcounter-rls serve`, embeddable: [`run`] wires config, engine, origin, transport and
//! admin together on listeners it is given, and owns their lifecycle (start-up, hot reload,
//! graceful shutdown when the future it is given resolves).
//!
//! The flags (`args`) are validated once into [`ServeSettings`] (`settings`); [`bind`] binds
//! their addresses; `main` builds the shutdown future from SIGTERM/SIGINT. A test binds port 0
//! itself and passes any future. The backends are built in `backends`, health lives in
//! `health`, `POST /json` in `json_route`.
//!
//! `settings` is the one place flags and upstream's variables are validated (the Redis
//! settings through `RedisSettings::check`, the database URL through `gcounter_sql::check_url`,
//! both without connecting), into groups by concern (`Addresses`, `LimitsSettings`,
//! `EngineGroup`, `Regional`, `Region`, `GlobalGroup`, `RlsSettings`, `TlsGroup`,
//! `TransportSettings`) of typed values. `health` serves gRPC health (ours and upstream's
//! `ratelimit`, which mirrors `/healthcheck`) and `/healthz`'s flag; `config_source` holds the
//! limits' `ArcSwap` and the task that keeps it current (file watcher or `xds` client), and
//! for xDS the first config `run` waits for.

pub mod args;
mod backends;
mod config_source;
mod health;
mod json_route;
mod memory;
mod settings;
mod sources;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::admin::{self, AdminState};
use crate::rlqs::{self, QuotaService};
use crate::rls::{RateLimitRoute, RateLimitServiceServer, RateLimiter};
use crate::supervisor::{Stage, Supervisor};
use crate::telemetry::Metrics;
use crate::transport::{self, BindError, TlsReloader};
use gcounter_engine::recorder::Recorder;
use gcounter_engine::{Engine, SystemClock};

pub use args::ServeArgs;
pub use settings::{
    Addresses, ConfigSource, EngineGroup, GlobalGroup, LimitsSettings, MAX_REGION_BYTES,
    NonZeroDuration, RedisGroup, Region, Regional, ServeSettings, StartReport, TlsGroup,
};
pub use sources::SWITCHES;

use backends::{global_counters, regional_origin};
use health::Health;
use json_route::JsonRoute;

/// The listeners `serve` runs on, already bound: by [`bind`] from the settings' addresses, or
/// by an embedder (port 0 in tests; read the address back with `local_addr`).
#[derive(Debug)]
pub struct Listeners {
    /// RateLimitService and grpc.health.v1.
    pub grpc: TcpListener,
    /// `/healthz`, `/healthcheck`, `/rlconfig`, `/metrics`, `POST /json` (and counter
    /// inspection with `--inspection-on-http-addr`).
    pub http: TcpListener,
    /// The metrics alone (upstream's PROMETHEUS_ADDR).
    pub metrics: Option<TcpListener>,
    /// `/rlconfig` and counter inspection (upstream's debug listener).
    pub debug: Option<TcpListener>,
}

/// Raise the open-files limit the connection caps need, then bind every address of
/// `settings`. An address that cannot be bound is an error naming the setting that moves it.
pub async fn bind(settings: &ServeSettings) -> anyhow::Result<Listeners> {
    let addresses = &settings.addresses;
    let (grpc, http) = transport::bind(addresses.grpc, addresses.http, &settings.transport)
        .await
        .map_err(|e| with_hint(e, "--grpc-addr and --http-addr (RLS_GRPC_ADDR, RLS_HTTP_ADDR; upstream's GRPC_PORT, PORT)"))?;
    let metrics = match addresses.metrics {
        Some(addr) => Some(transport::bind_side("metrics", addr).await.map_err(|e| {
            with_hint(
                e,
                "--metrics-addr (RLS_METRICS_ADDR; upstream's PROMETHEUS_ADDR)",
            )
        })?),
        None => None,
    };
    let debug = match addresses.debug {
        Some(addr) => Some(transport::bind_side("debug", addr).await.map_err(|e| {
            with_hint(
                e,
                "--debug-addr (RLS_DEBUG_ADDR; upstream's DEBUG_PORT) to a free port, or \
                 --debug-addr off (RLS_DEBUG_ADDR=off) for no debug listener: a second \
                 process on this host needs one of them",
            )
        })?),
        None => None,
    };
    Ok(Listeners {
        grpc,
        http,
        metrics,
        debug,
    })
}

/// Serve on `listeners` until `shutdown` resolves, then stop in order and return.
///
/// Shutdown order (see `supervisor`): health turns NOT_SERVING, the listeners stop accepting
/// and in-flight requests drain (at most `--drain-timeout`); only then the final replay and
/// the final global flush run, so they carry every decision answered during the drain.
/// Errors are about the limits config, the TLS files and building the backends (a Redis or
/// database URL their client refuses), never about the flags `ServeSettings` checked.
pub async fn run(
    settings: ServeSettings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let limits_settings = &settings.limits;
    let planted = gcounter_engine::plant::planted_names();
    if !planted.is_empty() {
        // Only a debug build reads GCOUNTER_PLANT: the chaos checker's runs that must fail.
        tracing::warn!(
            ?planted,
            "planted defects active (GCOUNTER_PLANT): this process loses counts on purpose"
        );
    }
    memory::log_memory_plan(&settings.memory);
    let metrics = Arc::new(Metrics::with_settings(limits_settings.metrics));
    metrics.memory.set_plan(&settings.memory);
    metrics.set_near_limit_ratio(limits_settings.near_limit_ratio);
    let source = config_source::start(limits_settings, &metrics)?;
    let limits = Arc::clone(&source.limits);

    // The in-process origin keeps the counts of cells the table evicted, at most one per
    // evictable cell: what the cell budget reserves for them.
    let kept_cells =
        gcounter_engine::CellBudget::new(settings.engine.max_cells, settings.engine.max_cell_bytes)
            .with_origin(gcounter_engine::regional::IN_PROCESS_COMPONENT_BYTES, false)
            .evictable_cells();
    let (origin, freshness) = regional_origin(
        &settings.regional,
        usize::try_from(kept_cells).unwrap_or(usize::MAX),
    )?;
    let origin = match &settings.carry_over {
        Some(carry_over) => carry_over.wrap(origin, Arc::clone(&metrics) as Arc<dyn Recorder>)?,
        None => origin,
    };
    let engine = Arc::new(Engine::new(
        settings.engine.engine_settings(freshness),
        origin,
        Arc::new(SystemClock),
        Arc::clone(&metrics) as Arc<dyn Recorder>,
    ));

    let serving = Arc::new(AtomicBool::new(true));

    let tls = settings
        .tls
        .as_ref()
        .map(|tls| TlsReloader::load(tls.files.clone()))
        .transpose()
        .context("TLS on the gRPC listener")?;
    let transport = &settings.transport;
    let grpc_addr = local_addr(&listeners.grpc);
    let http_addr = local_addr(&listeners.http);
    let side_addr = |listener: &Option<TcpListener>| {
        listener
            .as_ref()
            .map_or_else(|| "off".to_owned(), |l| local_addr(l).to_string())
    };
    let (debug_addr, metrics_addr) = (side_addr(&listeners.debug), side_addr(&listeners.metrics));
    let transport::Listeners {
        grpc: grpc_listener,
        admin: http_listener,
    } = transport::bounded(listeners.grpc, listeners.http, transport, &metrics);
    let metrics_listener = listeners
        .metrics
        .map(|l| transport::bounded_side("metrics", l, transport, &metrics));
    let debug_listener = listeners
        .debug
        .map(|l| transport::bounded_side("debug", l, transport, &metrics));

    let mut supervisor = Supervisor::new();
    if let Some(interval) = limits_settings.metrics.stall_probe_interval {
        let stop = supervisor.stop_signal(Stage::Serving);
        let probe = crate::telemetry::stall::probe(interval, Arc::clone(&metrics));
        supervisor.spawn(Stage::Serving, "stall probe", async move {
            tokio::select! {
                () = probe => {}
                () = stop.cancelled() => {}
            }
            Ok(())
        });
    }
    if let Some(statsd) = settings.statsd.clone() {
        // Background: its last flush comes after the drain, with every request counted.
        let finish = supervisor.stop_signal(Stage::Background);
        let metrics = Arc::clone(&metrics);
        tracing::info!(collector = %statsd.target, protocol = ?statsd.protocol, format = ?statsd.format, interval = ?statsd.flush_interval, "pushing upstream's stats over statsd");
        supervisor.spawn(Stage::Background, "statsd", async move {
            crate::telemetry::statsd::run(statsd, metrics, finish.cancelled_owned()).await;
            Ok(())
        });
    }
    let finish = supervisor.stop_signal(Stage::Background);
    let background = Arc::clone(&engine);
    supervisor.spawn(Stage::Background, "replay and reaping", async move {
        background.run_background(finish.cancelled_owned()).await;
        Ok(())
    });
    if let Some(counters) = global_counters(
        settings.global.as_ref(),
        &settings.region,
        &engine,
        &metrics,
    )
    .await?
    {
        let finish = supervisor.stop_signal(Stage::Background);
        supervisor.spawn(Stage::Background, "global counters", async move {
            counters.run(finish.cancelled_owned()).await;
            Ok(())
        });
    }

    let stop = supervisor.stop_signal(Stage::Serving);
    let (updates, updates_name) = (source.task, source.task_name);
    supervisor.spawn(Stage::Serving, updates_name, async move {
        tokio::select! {
            () = updates => anyhow::bail!("{updates_name} stopped: limits no longer update"),
            () = stop.cancelled() => Ok(()),
        }
    });
    let mut shutdown = std::pin::pin!(shutdown);
    if let Some(mut first) = source.first_config {
        tracing::info!("waiting for a first limits config from the xDS server before serving");
        // The guard `wait_for` returns is not `Send`: drop it inside.
        let arrived = async move { first.wait_for(|accepted| *accepted > 0).await.is_ok() };
        tokio::select! {
            _ = arrived => {}
            () = shutdown.as_mut() => {
                let _report = supervisor.shutdown(settings.drain_timeout.get()).await;
                return Ok(());
            }
        }
    }

    metrics.set_switches(&[
        ("shadow_mode", settings.rls.shadow_mode),
        ("quota_mode", settings.rls.quota_mode),
        ("all_or_nothing", settings.rls.all_or_nothing),
        (
            "fixed_windows",
            settings.engine.windows == gcounter_engine::Windows::Fixed,
        ),
        ("count_denied", settings.engine.count_denied),
        ("response_headers", settings.rls.response_headers.is_some()),
        (
            "response_dynamic_metadata",
            settings.rls.response_dynamic_metadata,
        ),
    ]);
    let grpc_server = transport::GrpcServer::new(transport).stream_paths(&[rlqs::SERVICE_PATH]);
    let limiter = Arc::new(RateLimiter::new(
        Arc::clone(&limits),
        Arc::clone(&engine),
        Arc::clone(&metrics),
        settings.rls.clone(),
    ));
    let quota = QuotaService::new(
        Arc::clone(&limits),
        Arc::clone(&engine),
        Arc::clone(&metrics),
        settings.quota.clone(),
        &settings.rls,
        transport.max_request_bytes,
        supervisor.stop_signal(Stage::Serving),
    );
    let admin_state = AdminState {
        limits: Arc::clone(&limits),
        metrics: Arc::clone(&metrics),
        engine: Arc::clone(&engine),
        serving: Arc::clone(&serving),
        healthy_with_at_least_one_config_loaded: limits_settings
            .healthy_with_at_least_one_config_loaded,
        json: admin::JsonEndpoint {
            decisions: Arc::new(JsonRoute(Arc::clone(&limiter))),
            max_body_bytes: transport.max_request_bytes,
            timeout: transport.request_timeout,
        },
        counters: Some(Arc::new(json_route::CounterRoute(Arc::clone(&limiter)))),
        quota_shares: Some(Arc::clone(quota.board()) as Arc<dyn admin::QuotaShares>),
        memory_pools: vec![
            ("request_bytes", Arc::new(grpc_server.buffered_bytes())),
            ("rlqs_buckets", quota.bucket_bytes()),
        ],
        values: if settings.addresses.inspection_show_values {
            admin::ValueDisplay::Shown
        } else {
            admin::ValueDisplay::hashed()
        },
    };
    if let Some(listener) = metrics_listener {
        let router = admin::metrics_router(admin_state.clone(), &limits_settings.metrics_path);
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
    let admin = admin::router(admin_state, settings.addresses.inspection_on_http);
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
    if let (Some(tls), Some(group)) = (&tls, &settings.tls) {
        let stop = supervisor.stop_signal(Stage::Serving);
        let tls = Arc::clone(tls);
        let interval = group.reload_interval.get();
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
    let routes = RateLimitRoute::new(limiter, transport.max_request_bytes)
        .routes()
        .add_service(
            // A compressed check inflates within the bound every message has.
            transport::Compression::ALL.into_iter().fold(
                health_service.max_decoding_message_size(transport.max_request_bytes),
                |health, compression| health.accept_compressed(compression.tonic()),
            ),
        )
        .add_direct(Arc::new(quota));
    let grpc = grpc_server.serve(incoming, routes, stop.cancelled_owned());
    supervisor.spawn(Stage::Serving, "gRPC server", async move {
        grpc.await;
        Ok(())
    });
    tracing::info!(grpc = %grpc_addr, grpc_tls = tls_mode, http = %http_addr, debug = %debug_addr, metrics = %metrics_addr, region = settings.region.as_str(), "serving");

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
    // A task that stops before shutdown leaves the process up but unhealthy.
    supervisor
        .until(shutdown, |_| {
            let health = Arc::clone(&health);
            async move { health.not_serving().await }
        })
        .await;

    tracing::info!("shutting down: draining requests, then the final replay and flush");
    health.not_serving().await;
    let drain_timeout = settings.drain_timeout.get();
    let report = supervisor.shutdown(drain_timeout).await;
    if !report.aborted.is_empty() {
        tracing::warn!(timeout = ?drain_timeout, tasks = ?report.aborted, "connections still open after the drain timeout; closed them");
    }
    for failure in &report.failed {
        tracing::error!(task = failure.name, reason = %failure.reason, "task failed during shutdown");
    }
    tracing::info!("stopped");
    Ok(())
}

/// A listener that cannot be bound, with the setting that moves it.
fn with_hint(error: BindError, setting: &str) -> anyhow::Error {
    anyhow::anyhow!("{error}; set {setting}")
}

/// For the "serving" log line: the address a listener is bound to (what port 0 became).
fn local_addr(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}
