//! The HTTP admin port: `/healthz`, `/rlconfig` (the loaded limits), `/metrics` (Prometheus).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::config::LimitsConfig;
use crate::engine::Engine;
use crate::telemetry::Metrics;

#[derive(Clone)]
pub struct AdminState {
    pub limits: Arc<ArcSwap<LimitsConfig>>,
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    /// Cleared at shutdown so load balancers stop sending before the listener closes, and
    /// when a supervised task stopped (the process is then half-working: replace it).
    pub serving: Arc<AtomicBool>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics))
        .with_state(state)
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

async fn rlconfig(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        state.limits.load().dump(),
    )
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
        .set_origin_circuit(state.engine.origin_circuit_state().as_gauge());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
