//! One deadline per gRPC request: the server's (`--request-timeout`) or the client's
//! (`grpc-timeout`), whichever is shorter, from its headers to its answer, so a stream that
//! trickles its body is cut and frees what it held.
//!
//! How it is cut depends on whose deadline it was. The server's is answered `CANCELLED`
//! ("Timeout expired", as tonic answers): the client still waits, and reads why. The
//! client's is the call's cancellation: gRPC's HTTP/2 mapping asks a server that sees the
//! client's deadline pass to cancel the call and reset its stream with `RST_STREAM(CANCEL)`
//! ([`ClientDeadlineExpired`], which the server hands hyper as the stream's error); the
//! client has given up on it and makes its `DEADLINE_EXCEEDED` itself.
//!
//! Why not tonic's `Server::timeout` and its `grpc-timeout` layer: they build a tokio `Sleep`
//! for every request (Envoy sends `grpc-timeout` on every call), which reads the clock and
//! clones the runtime's handle (BENCHMARKS.md, "The cost of a request"). Nearly every request
//! is answered on its first poll, so here the timer is made only when the request has to wait,
//! counted from then (microseconds after its headers arrived).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::service::Service;
use tokio::time::Sleep;
use tonic::TimeoutExpired;
use tower::{BoxError, Layer};

/// The client's deadline (`grpc-timeout`) passed before the answer: the stream is to be
/// reset with `CANCEL`, the reason hyper finds in this error's source.
#[derive(Debug, thiserror::Error)]
#[error("the client's deadline (grpc-timeout) passed")]
pub struct ClientDeadlineExpired {
    #[source]
    reset: h2::Error,
}

impl ClientDeadlineExpired {
    fn new() -> Self {
        Self {
            reset: h2::Error::from(h2::Reason::CANCEL),
        }
    }
}

/// Cuts every request at the server's deadline.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadlineLayer {
    server: Duration,
}

impl RequestDeadlineLayer {
    pub fn new(server: Duration) -> Self {
        Self { server }
    }
}

impl<S> Layer<S> for RequestDeadlineLayer {
    type Service = RequestDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestDeadline {
            inner,
            server: self.server,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestDeadline<S> {
    inner: S,
    server: Duration,
}

impl<S, B> Service<http::Request<B>> for RequestDeadline<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = WithinDeadline<S::Future>;

    fn call(&self, request: http::Request<B>) -> Self::Future {
        let (timeout, clients) = match client_timeout(request.headers()) {
            Some(client) if client <= self.server => (client, true),
            _ => (self.server, false),
        };
        WithinDeadline {
            inner: self.inner.call(request),
            timeout,
            clients,
            sleep: None,
        }
    }
}

const GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");

/// The client's `grpc-timeout` (gRPC over HTTP/2: at most 8 digits and a unit, `H` `M` `S`
/// `m` `u` `n`). A malformed one is ignored, as tonic and grpc-go do: the server's deadline
/// still applies.
fn client_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get(&GRPC_TIMEOUT)?.as_bytes();
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 8 digits: no overflow, in `u64` nor in the hour's seconds.
    let amount = digits
        .iter()
        .fold(0u64, |n, digit| n * 10 + u64::from(digit - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3_600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

pin_project_lite::pin_project! {
    /// The inner future, cut when its timer fires; the timer is made on its first `Pending`.
    pub struct WithinDeadline<F> {
        #[pin]
        inner: F,
        timeout: Duration,
        // Whether the deadline is the client's.
        clients: bool,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl<F, T, E> Future for WithinDeadline<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(done) = this.inner.poll(cx) {
            return Poll::Ready(done.map_err(Into::into));
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep(*this.timeout)));
        }
        if let Some(sleep) = this.sleep.as_pin_mut() {
            ready!(sleep.poll(cx));
            if *this.clients {
                return Poll::Ready(Err(ClientDeadlineExpired::new().into()));
            }
            return Poll::Ready(Err(TimeoutExpired(()).into()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
