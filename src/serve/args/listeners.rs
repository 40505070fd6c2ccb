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
    /// HTTP listen address: /healthz, /healthcheck, POST /json, /rlconfig and /metrics
    ///
    /// Counter inspection (/counters, /counters/top) too with --inspection-on-http-addr.
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
    /// Debug listen address: /rlconfig and counter inspection (/counters, /counters/top)
    ///
    /// Upstream's debug listener, on loopback by default: counter inspection shows which
    /// clients are counted. `off`: no debug listener (a second process on the same host);
    /// port 0: one the system picks (the `serving` log line names it). A busy port stops
    /// start-up naming this flag. With no arguments, set from upstream's `DEBUG_HOST` (default
    /// 127.0.0.1 here, 0.0.0.0 upstream) and `DEBUG_PORT`.
    #[arg(long, env = "RLS_DEBUG_ADDR", default_value = "127.0.0.1:6070", value_parser = debug_addr)]
    pub debug_addr: DebugAddr,
    /// Also serve /counters and /counters/top on --http-addr
    ///
    /// They are on --debug-addr only by default, since --http-addr usually listens on every
    /// address.
    #[arg(long, env = "RLS_INSPECTION_ON_HTTP_ADDR")]
    pub inspection_on_http_addr: bool,
    /// Show descriptor values in /counters and /counters/top (hashed unless set)
    ///
    /// By default each value is replaced by a keyed hash (`hash:` and 16 hex digits), the
    /// same for the same value within one process: rows can be matched, values not read.
    #[arg(long, env = "RLS_INSPECTION_SHOW_VALUES")]
    pub inspection_show_values: bool,
}

/// `--debug-addr`: an address, or `off` for no debug listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugAddr(pub Option<SocketAddr>);

fn debug_addr(text: &str) -> Result<DebugAddr, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(DebugAddr(None));
    }
    text.parse()
        .map(|addr| DebugAddr(Some(addr)))
        .map_err(|_| format!("{text:?} is neither ip:port nor off"))
}
