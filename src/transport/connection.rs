//! One accepted connection: its socket, its slot under the listener's cap, and the deadline
//! for its first bytes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::preface::PrefaceDeadline;
use crate::telemetry::ConnectionMetrics;

/// An accepted TCP connection that holds one permit of its listener's connection cap for as
/// long as it lives (the permit is released when hyper drops the IO, however the connection
/// ends, TLS handshake included), and fails its reads once `preface_timeout` passes before
/// `preface_bytes` arrived (see [`PrefaceDeadline`]).
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
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for BoundedConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.get_ref().connect_info()
    }
}
