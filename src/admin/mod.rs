//! The HTTP admin port: `/healthz`, `/healthcheck` (envoyproxy/ratelimit's), `/rlconfig` (the
//! loaded limits, one line per rule or `?format=yaml`), `/metrics` (Prometheus), `POST /json` (upstream's JSON form of a decision);
//! and the debug listener: `/rlconfig`, `/counters` and `/counters/top` (counter inspection,
//! `counters`, with request values hashed unless shown, `values`).

mod counters;
mod values;

pub use counters::{CounterLookup, EnvoyShare, QuotaShares};
pub use values::ValueDisplay;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::config::LimitsConfig;
use crate::telemetry::{MemoryPool, Metrics, RequestMethod};
use crate::transport::BufferedBytes;
use gcounter_engine::Engine;

#[derive(Clone)]
pub struct AdminState {
    pub limits: Arc<ArcSwap<LimitsConfig>>,
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    /// Cleared at shutdown so load balancers stop sending before the listener closes, and
    /// when a supervised task stopped (the process is then half-working: replace it).
    pub serving: Arc<AtomicBool>,
    /// Upstream's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: `/healthcheck` fails while the
    /// loaded limits have no domain.
    pub healthy_with_at_least_one_config_loaded: bool,
    pub json: JsonEndpoint,
    /// Answers which counter a descriptor counts on, for `/counters`; `None`: the endpoint
    /// says it is not wired in.
    pub counters: Option<Arc<dyn CounterLookup>>,
    /// The RLQS shares of a counter, for `/counters`; `None`: not shown.
    pub quota_shares: Option<Arc<dyn QuotaShares>>,
    /// Pools held outside the engine (the gRPC server's request bytes, the RLQS buckets),
    /// sampled by `/metrics` under their pool's name.
    pub memory_pools: Vec<(&'static str, Arc<dyn HeldBytes>)>,
    /// How counter inspection shows request values.
    pub values: ValueDisplay,
}

/// Bytes a pool holds now, against its budget, for `rls_memory_bytes{pool}`.
pub trait HeldBytes: Send + Sync {
    fn held(&self) -> u64;
    fn budget(&self) -> u64;
}

impl HeldBytes for BufferedBytes {
    fn held(&self) -> u64 {
        BufferedBytes::held(self)
    }

    fn budget(&self) -> u64 {
        BufferedBytes::budget(self)
    }
}

/// What answers `POST /json`: the decision lives in `rls`, which the admin port does not know.
pub trait JsonDecisions: Send + Sync {
    /// `headers`: the request's (they may carry the caller's trace context).
    fn decide<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
        body: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = JsonAnswer> + Send + 'a>>;
}

/// The HTTP status and body of one `POST /json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonAnswer {
    pub status: u16,
    /// JSON for 200, 429 and 500; a plain-text reason otherwise.
    pub body: String,
}

/// `POST /json` and its bounds.
#[derive(Clone)]
pub struct JsonEndpoint {
    pub decisions: Arc<dyn JsonDecisions>,
    /// A longer body is refused (413) without being buffered beyond this.
    pub max_body_bytes: usize,
    /// Reading the body and deciding must finish within this (408).
    pub timeout: Duration,
}

/// The HTTP listener's routes; counter inspection only with `inspection` (it lists which
/// clients are counted, and this listener usually listens on every address).
pub fn router(state: AdminState, inspection: bool) -> Router {
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/healthcheck", get(healthcheck))
        .route("/json", post(json))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics));
    let router = if inspection {
        router
            .route("/counters", get(counters::counter))
            .route("/counters/top", get(counters::top))
    } else {
        router
    };
    router.with_state(state)
}

/// Only `/metrics` at `path`, for a separate metrics listener (upstream's PROMETHEUS_ADDR and
/// PROMETHEUS_PATH). `path` must be checked with [`valid_metrics_path`] first.
pub fn metrics_router(state: AdminState, path: &str) -> Router {
    Router::new().route(path, get(metrics)).with_state(state)
}

/// upstream's debug listener (DEBUG_PORT): `/rlconfig`, the loaded limits; and counter
/// inspection (`/counters`, `/counters/top`).
pub fn debug_router(state: AdminState) -> Router {
    Router::new()
        .route("/rlconfig", get(rlconfig))
        .route("/counters", get(counters::counter))
        .route("/counters/top", get(counters::top))
        .with_state(state)
}

/// A literal path the router takes: `/` then letters, digits and `/_.-` (axum treats `{`,
/// `}` and `*` as captures).
pub fn valid_metrics_path(path: &str) -> bool {
    path.starts_with('/')
        && path.len() <= 256
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_.-".contains(&b))
}

async fn healthz(State(state): State<AdminState>) -> impl IntoResponse {
    if state.serving.load(Ordering::Acquire) {
        (StatusCode::OK, "OK\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not serving: shutting down, or a task stopped (see the log)\n",
        )
    }
}

/// envoyproxy/ratelimit's health check: 200 `OK`, or 500 while [`AdminState::upstream_unhealthy`]
/// gives a reason. Upstream also fails it while its Redis is unreachable; here a Redis outage
/// degrades to local decisions and the process stays able to answer, so it stays healthy.
async fn healthcheck(State(state): State<AdminState>) -> Response {
    match state.upstream_unhealthy() {
        Some(reason) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n")).into_response(),
        None => (StatusCode::OK, "OK").into_response(),
    }
}

impl AdminState {
    /// Why upstream's health (`/healthcheck`, and gRPC health for the service name
    /// `ratelimit`) fails, if it does: SIGTERM arrived or a task stopped, or, with
    /// `healthy_with_at_least_one_config_loaded`, no domain is loaded. One function, so the
    /// HTTP and gRPC probes of one process never disagree.
    pub fn upstream_unhealthy(&self) -> Option<&'static str> {
        if !self.serving.load(Ordering::Acquire) {
            return Some("not serving: shutting down, or a task stopped (see the log)");
        }
        if self.healthy_with_at_least_one_config_loaded
            && self.limits.load().domains().next().is_none()
        {
            return Some(
                "no limits config with a domain loaded yet (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)",
            );
        }
        None
    }
}

/// Every answer of `POST /json` (decided, refused or timed out) is timed in
/// `rls_request_duration_seconds{method="json"}`.
async fn json(State(state): State<AdminState>, request: axum::extract::Request) -> Response {
    let started = std::time::Instant::now();
    let response = json_answer(&state, request).await;
    state
        .metrics
        .request_duration(RequestMethod::Json, started.elapsed());
    response
}

async fn json_answer(state: &AdminState, request: axum::extract::Request) -> Response {
    let endpoint = &state.json;
    let limit = endpoint.max_body_bytes;
    let answer = tokio::time::timeout(endpoint.timeout, async {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, limit).await.ok()?;
        Some(endpoint.decisions.decide(&parts.headers, &body).await)
    })
    .await;
    let answer = match answer {
        Ok(Some(answer)) => answer,
        Ok(None) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the body is larger than {limit} bytes (--max-request-bytes), or was cut\n"
                ),
            )
                .into_response();
        }
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                "the request took longer than --request-timeout\n",
            )
                .into_response();
        }
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = match answer.status {
        200 | 429 | 500 => "application/json",
        _ => "text/plain; charset=utf-8",
    };
    (status, [(header::CONTENT_TYPE, content_type)], answer.body).into_response()
}

/// The loaded limits: upstream's one line per rule, or with `?format=yaml` the limits in the
/// config's own format, one document per domain (what `explain --service` walks).
async fn rlconfig(
    State(state): State<AdminState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let limits = state.limits.load();
    match query.as_deref() {
        None | Some("") => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            limits.dump(),
        )
            .into_response(),
        Some("format=yaml") => (
            [(header::CONTENT_TYPE, "application/yaml; charset=utf-8")],
            limits.dump_yaml(),
        )
            .into_response(),
        Some(_) => (
            StatusCode::BAD_REQUEST,
            "unknown query: /rlconfig takes none, or `format=yaml`\n",
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    state.metrics.set_engine_gauges(
        state.engine.live_cells(),
        state.engine.pending_replay_cells(),
    );
    state.metrics.set_cell_bytes(
        state.engine.evictable_cell_bytes(),
        state.engine.protected_cell_bytes(),
    );
    state
        .metrics
        .set_origin_circuit(state.engine.convergence().origin_circuit_state().as_gauge());
    let mut pools: Vec<MemoryPool> = state
        .engine
        .memory()
        .iter()
        .map(|pool| MemoryPool {
            pool: pool.pool,
            bytes: pool.bytes,
            budget: pool.budget,
        })
        .collect();
    pools.extend(state.memory_pools.iter().map(|(pool, held)| MemoryPool {
        pool,
        bytes: held.held(),
        budget: held.budget(),
    }));
    state.metrics.set_memory(&pools);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
