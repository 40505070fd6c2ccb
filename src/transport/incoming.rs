//! The gRPC server's incoming connections, plaintext or TLS, inside the listener's bounds.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::bind::HTTP2_PREFACE_BYTES;
use super::connection::BoundedConn;
use super::listener::BoundedListener;
use super::preface::PrefaceDeadline;
use super::tls::TlsReloader;

/// Handshaken connections waiting for the server to take them; past it, handshake tasks wait
/// (each still holding its connection's permit, so the connection cap bounds them).
const READY_QUEUE: usize = 64;

/// One gRPC connection as the server reads it.
pub enum GrpcConn {
    Plain(BoundedConn),
    /// The decrypted side of the session, with its own deadline for the HTTP/2 preface.
    Tls(Box<PrefaceDeadline<TlsStream<BoundedConn>>>),
}

/// The listener's connections as [`super::GrpcServer::serve`] takes them: as they are, or,
/// with `tls`, after a TLS handshake.
///
/// Under TLS every bound of the listener still holds, and the handshake adds its own: a
/// connection holds its permit from accept to close (handshake included), must send its
/// first bytes (the ClientHello) within `preface_timeout`, complete the handshake within
/// `preface_timeout` (else it is closed and counted as a preface timeout), and then send the
/// HTTP/2 preface inside the session within `preface_timeout` again. Handshakes run in their
/// own tasks, so a slow one never delays the accept loop or another handshake.
pub fn grpc_incoming(
    listener: BoundedListener,
    tls: Option<Arc<TlsReloader>>,
    preface_timeout: Duration,
) -> BoxStream<'static, Result<GrpcConn, Infallible>> {
    let Some(tls) = tls else {
        return listener
            .into_incoming()
            .map(|conn| conn.map(GrpcConn::Plain))
            .boxed();
    };
    let (ready, receiver) = mpsc::channel(READY_QUEUE);
    tokio::spawn(accept_tls(listener, tls, preface_timeout, ready));
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        let conn = receiver.recv().await?;
        Some((Ok(conn), receiver))
    })
    .boxed()
}

/// Accepts until the server drops its end of `ready`, one handshake task per connection.
async fn accept_tls(
    mut listener: BoundedListener,
    tls: Arc<TlsReloader>,
    preface_timeout: Duration,
    ready: mpsc::Sender<GrpcConn>,
) {
    loop {
        let conn = tokio::select! {
            conn = listener.accept() => conn,
            () = ready.closed() => return,
        };
        // The config of this moment: a rotation applies from the next connection on.
        let acceptor = TlsAcceptor::from(tls.current());
        let ready = ready.clone();
        tokio::spawn(async move {
            let metrics = conn.metrics().clone();
            match tokio::time::timeout(preface_timeout, acceptor.accept(conn)).await {
                Ok(Ok(stream)) => {
                    let conn = PrefaceDeadline::new(
                        stream,
                        HTTP2_PREFACE_BYTES,
                        preface_timeout,
                        metrics.preface_timeouts.clone(),
                    );
                    // An error: the server stopped; the connection closes on drop.
                    let _ = ready.send(GrpcConn::Tls(Box::new(conn))).await;
                }
                Ok(Err(error)) => {
                    // Debug only: a scanner or a refused client must not flood the log; the
                    // counter shows them.
                    metrics.tls_handshake_failures.inc();
                    tracing::debug!(%error, "TLS handshake failed");
                }
                Err(_) => {
                    metrics.preface_timeouts.inc();
                    tracing::debug!("TLS handshake not finished within --preface-timeout");
                }
            }
        });
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(conn) => Pin::new(conn).poll_read(cx, buf),
            Self::Tls(conn) => Pin::new(conn.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(conn) => Pin::new(conn).poll_write(cx, buf),
            Self::Tls(conn) => Pin::new(conn.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(conn) => Pin::new(conn).poll_flush(cx),
            Self::Tls(conn) => Pin::new(conn.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(conn) => Pin::new(conn).poll_shutdown(cx),
            Self::Tls(conn) => Pin::new(conn.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(conn) => Pin::new(conn).poll_write_vectored(cx, bufs),
            Self::Tls(conn) => Pin::new(conn.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(conn) => conn.is_write_vectored(),
            Self::Tls(conn) => conn.is_write_vectored(),
        }
    }
}
