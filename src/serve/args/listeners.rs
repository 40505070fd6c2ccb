//! Where `serve` listens.

use std::net::SocketAddr;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::LISTENERS)]
pub struct ListenerArgs {
    /// gRPC listen address: RateLimitService v3 and grpc.health.v1
    ///
    /// With no arguments, set from upstream's `GRPC_HOST` and `GRPC_PORT`.
    #[arg(long, env = "RLS_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address: /healthz, /healthcheck, POST /json, /rlconfig, /counters,
    /// /counters/top and /metrics
    ///
    /// With no arguments, set from upstream's `HOST` and `PORT`.
    #[arg(long, env = "RLS_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Also serve the metrics alone on this address (off unless set)
    ///
    /// They stay at /metrics on --http-addr too. With no arguments, set from upstream's
    /// `PROMETHEUS_ADDR` when `USE_PROMETHEUS` is true.
    #[arg(long, env = "RLS_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The path of the metrics on --metrics-addr
    ///
    /// `/` then letters, digits and `/_.-`, at most 256 bytes. With no arguments, set from
    /// upstream's `PROMETHEUS_PATH`.
    #[arg(long, env = "RLS_METRICS_PATH", default_value = "/metrics")]
    pub metrics_path: String,
    /// Also serve /rlconfig, /counters and /counters/top on this address (off unless set)
    ///
    /// Upstream's debug listener; the endpoints stay on --http-addr too. With no arguments,
    /// set from upstream's `DEBUG_HOST` and `DEBUG_PORT` (default 0.0.0.0:6070).
    #[arg(long, env = "RLS_DEBUG_ADDR")]
    pub debug_addr: Option<SocketAddr>,
}
