//! The deadline for a connection's first bytes, on any byte stream (the TCP socket, or the
//! decrypted side of a TLS session).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose reads fail once `timeout` passes before `bytes` arrived.
///
/// Why in the IO and not around hyper's connection future: neither hyper's HTTP/2 server nor
/// its handshake has a deadline for the client preface, so a peer that connects and sends
/// nothing would hold a socket (and a file descriptor) forever. Failing the read makes hyper
/// close the connection through its normal error path. Generic so that under TLS the same
/// deadline applies again to the HTTP/2 preface inside the session, after the handshake.
pub struct PrefaceDeadline<S> {
    inner: S,
    /// Bytes still expected before the deadline no longer applies.
    left: usize,
    deadline: Option<Pin<Box<Sleep>>>,
    /// Set once the deadline fired: every later read fails too.
    timed_out: bool,
    timeouts: Counter,
}

impl<S> PrefaceDeadline<S> {
    /// `bytes` = 0 turns the deadline off.
    pub fn new(inner: S, bytes: usize, timeout: Duration, timeouts: Counter) -> Self {
        Self {
            inner,
            left: bytes,
            deadline: (bytes > 0).then(|| Box::pin(tokio::time::sleep(timeout))),
            timed_out: false,
            timeouts,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PrefaceDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            tracing::debug!("connection closed: no preface before the preface timeout");
            this.timeouts.inc();
            this.deadline = None;
            this.timed_out = true;
        }
        if this.timed_out {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no preface before --preface-timeout",
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.deadline.is_some() && matches!(read, Poll::Ready(Ok(()))) {
            let got = buf.filled().len() - before;
            if got == 0 {
                // End of stream: nothing more will come, hyper will close.
                this.deadline = None;
            }
            this.left = this.left.saturating_sub(got);
            if this.left == 0 {
                this.deadline = None;
            }
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PrefaceDeadline<S> {
    forward_async_write!(inner);
}
