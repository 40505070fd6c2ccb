//! One accepted connection: its socket, its slot under the listener's cap, and the deadline
//! for its first bytes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::telemetry::ConnectionMetrics;

/// An accepted TCP connection that holds one permit of its listener's connection cap for as
/// long as it lives (the permit is released when hyper drops the IO, however the connection
/// ends), and fails its reads once `preface_timeout` passes before `preface_bytes` arrived.
///
/// Why in the IO and not around hyper's connection future: neither hyper's HTTP/2 server nor
/// its handshake has a deadline for the client preface, so a peer that connects and sends
/// nothing would hold a socket forever (issue 15, break 3). Failing the read makes hyper
/// close the connection through its normal error path.
pub struct BoundedConn {
    stream: TcpStream,
    /// Bytes still expected before the deadline no longer applies.
    preface_left: usize,
    preface_deadline: Option<Pin<Box<Sleep>>>,
    /// Set once the deadline fired: every later read fails too.
    timed_out: bool,
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
            stream,
            preface_left: preface_bytes,
            preface_deadline: (preface_bytes > 0)
                .then(|| Box::pin(tokio::time::sleep(preface_timeout))),
            timed_out: false,
            metrics,
            _permit: permit,
        }
    }
}

impl AsyncRead for BoundedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.preface_deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            tracing::debug!(
                peer = ?this.stream.peer_addr().ok(),
                "connection closed: no preface before the preface timeout"
            );
            this.metrics.preface_timeouts.inc();
            this.preface_deadline = None;
            this.timed_out = true;
        }
        if this.timed_out {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no preface before --preface-timeout",
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if this.preface_deadline.is_some() && matches!(read, Poll::Ready(Ok(()))) {
            let got = buf.filled().len() - before;
            if got == 0 {
                // End of stream: nothing more will come, hyper will close.
                this.preface_deadline = None;
            }
            this.preface_left = this.preface_left.saturating_sub(got);
            if this.preface_left == 0 {
                this.preface_deadline = None;
            }
        }
        read
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
        self.stream.connect_info()
    }
}
