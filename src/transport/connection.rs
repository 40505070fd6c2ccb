//! One accepted connection: its socket, its slot under the listener's cap, and the deadline
//! for its first bytes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::preface::PrefaceDeadline;
use crate::telemetry::ConnectionMetrics;

/// An accepted TCP connection that holds one permit of its listener's connection cap for as
/// long as it lives (the permit is released when hyper drops the IO, however the connection
/// ends, TLS handshake included), and fails its reads once `preface_timeout` passes before
/// `preface_bytes` arrived (see `PrefaceDeadline`).
pub struct BoundedConn {
    stream: PrefaceDeadline<TcpStream>,
    metrics: ConnectionMetrics,
    _permit: Option<OwnedSemaphorePermit>,
}

impl BoundedConn {
    pub(super) fn new(
        stream: TcpStream,
        permit: Option<OwnedSemaphorePermit>,
        preface_bytes: usize,
        preface_timeout: Duration,
        metrics: ConnectionMetrics,
    ) -> Self {
        metrics.accepted.inc();
        metrics.open.inc();
        Self {
            stream: PrefaceDeadline::new(
                stream,
                preface_bytes,
                preface_timeout,
                metrics.preface_timeouts.clone(),
            ),
            metrics,
            _permit: permit,
        }
    }

    pub(super) fn metrics(&self) -> &ConnectionMetrics {
        &self.metrics
    }
}

impl AsyncRead for BoundedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl Drop for BoundedConn {
    fn drop(&mut self) {
        self.metrics.open.dec();
    }
}

impl AsyncWrite for BoundedConn {
    forward_async_write!(stream);
}
