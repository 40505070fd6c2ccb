//! Binding the gRPC and admin listeners, after raising the open-files limit their caps need.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::fd_limit::raise_nofile_limit;
use super::listener::{BoundedListener, ListenerSettings};
use super::settings::TransportSettings;
use crate::telemetry::Metrics;

/// Descriptors kept beyond both connection caps: the config watcher, backends, the process.
const SPARE_FDS: u64 = 256;
/// The HTTP/2 client connection preface is 24 bytes (RFC 9113 §3.4).
pub(super) const HTTP2_PREFACE_BYTES: usize = 24;

/// The service's two listeners, each with its own connection cap.
pub struct Listeners {
    pub grpc: BoundedListener,
    pub admin: BoundedListener,
}

/// A listener that could not be bound, named by its flag (`--<name>-addr`).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --{name}-addr {addr}: {source}")]
pub struct BindError {
    name: &'static str,
    addr: SocketAddr,
    source: std::io::Error,
}

/// Binds the listener of `--<name>-addr`: the gRPC and admin ones ([`bind`]), or an optional
/// side listener of the admin kind (`metrics`: upstream's PROMETHEUS_ADDR; `debug`: its
/// DEBUG_PORT), which [`bounded_side`] gives its bounds.
pub async fn bind_side(name: &'static str, addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { name, addr, source })
}

/// A side listener with the admin port's bounds, a connection cap of its own
/// (`--max-admin-connections` more), its own series (`listener="<name>"`).
pub fn bounded_side(
    name: &'static str,
    listener: TcpListener,
    settings: &TransportSettings,
    metrics: &Metrics,
) -> BoundedListener {
    BoundedListener::new(
        listener,
        ListenerSettings {
            name,
            max_connections: settings.max_admin_connections,
            preface_bytes: 1,
            preface_timeout: settings.preface_timeout,
            max_accept_backoff: settings.max_accept_backoff,
            tcp_keepalive: Some(settings.tcp_keepalive),
        },
        metrics.connections.listener(name),
    )
}

/// Raises the soft open-files limit (a warning if it stays below the caps), then binds the
/// gRPC and admin listeners; [`bounded`] gives them their bounds.
pub async fn bind(
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    settings: &TransportSettings,
) -> Result<(TcpListener, TcpListener), BindError> {
    let needed = (settings.max_connections + settings.max_admin_connections) as u64 + SPARE_FDS;
    match raise_nofile_limit() {
        Ok(limit) if limit < needed => tracing::warn!(
            limit,
            needed,
            "the open-files limit (RLIMIT_NOFILE) is below --max-connections + \
             --max-admin-connections + {SPARE_FDS}: a flood may hit EMFILE before the caps \
             (accepts then back off); raise the limit or lower the caps"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot read or raise the open-files limit"),
    }
    let grpc = bind_side("grpc", grpc_addr).await?;
    let admin = bind_side("http", admin_addr).await?;
    Ok((grpc, admin))
}

/// The gRPC and admin listeners (bound by [`bind`], or by a test on port 0) with their caps,
/// deadlines and series.
pub fn bounded(
    grpc: TcpListener,
    admin: TcpListener,
    settings: &TransportSettings,
    metrics: &Metrics,
) -> Listeners {
    let listener = |name, max_connections, preface_bytes| ListenerSettings {
        name,
        max_connections,
        preface_bytes,
        preface_timeout: settings.preface_timeout,
        max_accept_backoff: settings.max_accept_backoff,
        tcp_keepalive: Some(settings.tcp_keepalive),
    };
    Listeners {
        grpc: BoundedListener::new(
            grpc,
            listener("grpc", settings.max_connections, HTTP2_PREFACE_BYTES),
            metrics.connections.listener("grpc"),
        ),
        // One byte: the request head has its own deadline (--admin-header-timeout).
        admin: BoundedListener::new(
            admin,
            listener("admin", settings.max_admin_connections, 1),
            metrics.connections.listener("admin"),
        ),
    }
}
