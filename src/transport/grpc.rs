//! The gRPC server: HTTP/2 connections served by hyper, with every transport bound.
//!
//! Not tonic's `Server`: per request it clones a boxed service, inserts the connection's
//! address into the request's extensions (an allocation nobody here reads), boxes the body and
//! the future more than once and routes through axum's router: ~3,000 of a request's ~60,000
//! instructions and as many cache lines, the last distance to a no-op server (BENCHMARKS.md,
//! "The cost of a request"). Here hyper calls one layered service with its own body type
//! through a shared reference (not a clone of it per request, as tower's `oneshot` needs); the
//! common `ShouldRateLimit` call is read and answered by `rls` itself, and tonic frames every
//! other call (`tonic::server::Grpc`) and serves the health service behind the routes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tower::layer::util::{Identity, Stack};
use tower::{BoxError, Layer, ServiceBuilder};

use super::body::GrpcBody;
use super::budget::{BodyBudgetLayer, BufferedBytes};
use super::deadline::{ClientDeadlineExpired, RequestDeadlineLayer};
use super::end_stream::EndStreamChecked;
use super::inflight::InflightLimitLayer;
use super::messages::BudgetedBody;
use super::request_head;
use super::settings::TransportSettings;

/// The layers around every request, outermost first: the deadline, the in-flight cap, the
/// body budget.
type GrpcLayers =
    Stack<BodyBudgetLayer, Stack<InflightLimitLayer, Stack<RequestDeadlineLayer, Identity>>>;

/// Streams a connection may make the server reset for the peer's errors before it is closed.
const MAX_LOCAL_ERROR_RESETS: usize = 1_024;

/// Response bytes one stream may have queued for a peer that does not read them (hyper's
/// default was 400 KB): a unary answer is far smaller, and a long-lived stream (RLQS) waits
/// for its peer rather than piling its responses up here.
const MAX_SEND_BUFFER: usize = 64 << 10;

/// What the routes are called with: hyper's request body inside the body budget.
pub type GrpcRequest = http::Request<BudgetedBody<EndStreamChecked<Incoming>>>;

/// The gRPC server with its HTTP/2 limits; [`serve`](Self::serve) it on a
/// [`super::BoundedListener`]'s connections ([`super::grpc_incoming`]).
///
/// - `max_concurrent_streams`: a peer cannot open more streams than this on one connection
///   (hyper's default was 200; tonic set none).
/// - Flow-control windows: what a peer may push before the service reads (hyper's default
///   was 1 MiB per stream and per connection).
/// - A request that is not a gRPC call (not a `POST`, not a gRPC content type) answered
///   405 or 415 from its head, before every layer below (`request_head`).
/// - `RequestDeadlineLayer`: one deadline per request from its headers to its answer
///   (the server's or the client's `grpc-timeout`, the shorter), so the body read is
///   covered: a stream that trickles its body is cut (`CANCELLED`, or `RST_STREAM(CANCEL)`
///   at the client's deadline) and frees what it held.
/// - The body budget ([`BodyBudgetLayer`]): the global bound on buffered request bytes, a
///   share of it per connection, and a deadline on each message once begun.
/// - A global cap on requests in flight (`InflightLimitLayer`): each holds a task, an
///   HTTP/2 stream and tonic's 8 KiB decode buffer whatever it announces; past the cap,
///   requests wait without reading their body, within the request deadline.
/// - HTTP/2 keepalive: drops peers that vanished without closing.
/// - Optionally a maximum connection age (GOAWAY, then a grace period), so long-lived client
///   connections rebalance over new replicas.
/// - A bound on the streams a peer makes the server reset for its errors (1,024 per
///   connection, hyper's default: the defence against RUSTSEC-2024-0003's reset floods),
///   which tonic's builder turned off.
/// - At most `MAX_SEND_BUFFER` of response bytes queued per stream for a peer that does
///   not read them.
/// - No `date` header: gRPC clients do not read it (grpc-go sends none), and hyper would
///   write it into every response.
///
/// The per-message size (`--max-request-bytes`) is set on the service itself
/// (`max_decoding_message_size`), where tonic checks the announced length before buffering.
pub struct GrpcServer {
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    deadline: RequestDeadlineLayer,
    inflight: InflightLimitLayer,
    budget: BodyBudgetLayer,
    age: ConnectionAge,
}

impl GrpcServer {
    pub fn new(settings: &TransportSettings) -> Self {
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(settings.max_concurrent_streams)
            .initial_stream_window_size(settings.http2_stream_window)
            .initial_connection_window_size(settings.http2_connection_window)
            .keep_alive_interval(settings.http2_keepalive_interval)
            .keep_alive_timeout(settings.http2_keepalive_timeout)
            .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESETS)
            .max_send_buf_size(MAX_SEND_BUFFER)
            .auto_date_header(false);
        Self {
            http2,
            deadline: RequestDeadlineLayer::new(settings.request_timeout),
            inflight: InflightLimitLayer::new(settings.max_inflight_requests),
            budget: BodyBudgetLayer::new(
                settings.max_buffered_request_bytes,
                settings.max_request_bytes,
                settings.request_timeout,
            ),
            age: ConnectionAge {
                max: settings.max_connection_age,
                grace: settings.max_connection_age_grace,
            },
        }
    }

    /// Calls whose path starts with one of `prefixes` are long-lived streams: their bytes
    /// come from a pool of their own (see [`BodyBudgetLayer::with_stream_paths`]).
    pub fn stream_paths(mut self, prefixes: &[&'static str]) -> Self {
        self.budget = self.budget.with_stream_paths(prefixes);
        self
    }

    /// What the body budget holds (`rls_memory_bytes{pool="request_bytes"}`).
    pub fn buffered_bytes(&self) -> BufferedBytes {
        self.budget.buffered()
    }

    /// The layered routes for one new connection: its own share of the body budget.
    fn connection_service<R>(&self, routes: R) -> Recovered<<GrpcLayers as Layer<R>>::Service> {
        Recovered(
            ServiceBuilder::new()
                .layer(self.deadline)
                .layer(self.inflight.clone())
                .layer(self.budget.for_connection())
                .service(routes),
        )
    }

    /// Serves `routes` on every connection of `incoming` until `shutdown`; then stops
    /// accepting (the listener is dropped at once), sends every connection GOAWAY and waits
    /// for their requests to finish (the caller bounds the wait: the drain timeout).
    pub async fn serve<I, C, R>(self, incoming: I, routes: R, shutdown: impl Future<Output = ()>)
    where
        I: Stream<Item = Result<C, Infallible>>,
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        R: Service<GrpcRequest, Response = http::Response<GrpcBody>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        R::Future: Send + 'static,
    {
        let connections = TaskTracker::new();
        let stop = CancellationToken::new();
        {
            let mut incoming = pin!(incoming);
            let mut shutdown = pin!(shutdown);
            loop {
                let conn = tokio::select! {
                    conn = incoming.next() => conn,
                    () = &mut shutdown => break,
                };
                let Some(Ok(conn)) = conn else { break };
                let service = self.connection_service(routes.clone());
                let connection = self.http2.serve_connection(TokioIo::new(conn), service);
                connections.spawn(serve_connection(connection, self.age, stop.clone()));
            }
        }
        // `incoming` is dropped: the listener closes before the drain.
        stop.cancel();
        connections.close();
        connections.wait().await;
    }
}

/// `--max-connection-age` and its grace.
#[derive(Debug, Clone, Copy)]
struct ConnectionAge {
    max: Option<Duration>,
    grace: Option<Duration>,
}

/// Waits until `at`; forever when there is none.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One connection until it ends: GOAWAY on `stop` or at its maximum age (its open requests
/// may finish), closed when the grace after its maximum age is over.
async fn serve_connection<C, S>(
    connection: hyper::server::conn::http2::Connection<TokioIo<C>, S, TokioExecutor>,
    age: ConnectionAge,
    stop: CancellationToken,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<http::Request<Incoming>, Response = http::Response<GrpcBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let opened = tokio::time::Instant::now();
    let goaway_at = age.max.map(|max| opened + max);
    let close_at = age
        .max
        .zip(age.grace)
        .map(|(max, grace)| opened + max + grace);
    let mut connection = pin!(connection);
    let mut aged = pin!(sleep_until(goaway_at));
    let mut grace_over = pin!(sleep_until(close_at));
    let mut stopping = pin!(stop.cancelled());
    let mut going_away = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!(%error, "gRPC connection ended with an error");
                }
                return;
            }
            () = &mut aged, if !going_away => {
                going_away = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut stopping, if !going_away => {
                going_away = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut grace_over => {
                tracing::debug!("gRPC connection closed: its maximum age and grace are over");
                return;
            }
        }
    }
}

/// The layered routes as hyper calls them: a request that is no gRPC call answered from its
/// head before any layer ([`request_head`]); an error of a layer answered as its gRPC status
/// (the server's deadline: `CANCELLED`, as tonic's server did), except the client's deadline,
/// which hyper turns into `RST_STREAM(CANCEL)` (see [`super::deadline`]).
#[derive(Clone)]
struct Recovered<S>(S);

impl<S> Service<http::Request<Incoming>> for Recovered<S>
where
    S: Service<http::Request<Incoming>, Response = http::Response<GrpcBody>>,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<GrpcBody>;
    type Error = BoxError;
    type Future = RecoveredFuture<S::Future>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        if let Some(refusal) = request_head::refusal(&request) {
            return RecoveredFuture::Refused {
                refusal: Some(refusal),
            };
        }
        RecoveredFuture::Called {
            inner: self.0.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    #[project = RecoveredProjection]
    pub enum RecoveredFuture<F> {
        Called {
            #[pin]
            inner: F,
        },
        Refused {
            // `None` once sent.
            refusal: Option<http::Response<GrpcBody>>,
        },
    }
}

impl<F, E> Future for RecoveredFuture<F>
where
    F: Future<Output = Result<http::Response<GrpcBody>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<http::Response<GrpcBody>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = match self.project() {
            RecoveredProjection::Called { inner } => inner,
            RecoveredProjection::Refused { refusal } => {
                return Poll::Ready(Ok(refusal
                    .take()
                    .unwrap_or_else(|| Status::internal("answer already taken").into_http())));
            }
        };
        let error: BoxError = match ready!(inner.poll(cx)) {
            Ok(response) => return Poll::Ready(Ok(response)),
            Err(error) => error.into(),
        };
        if error.is::<ClientDeadlineExpired>() {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(Status::from_error(error).into_http()))
    }
}

#[cfg(test)]
mod tests;
