//! The `RateLimitService` gRPC route: `rls` decodes the message, which the common call's
//! first DATA frame holds whole (`unary`); any other call is framed by tonic.
//!
//! Served with [`RawRequestCodec`] instead of tonic's generated server so that every request a
//! client sends ends in `rls_requests_total`, whatever broke: an unparsable body is
//! `INVALID_ARGUMENT` (tonic's generated server answered `INTERNAL` and counted nothing, so a
//! client sending garbage left no trace in the metrics), a message over `--max-request-bytes`
//! or over the buffered-bytes budget is `RESOURCE_EXHAUSTED` (as grpc-go,
//! envoyproxy/ratelimit's server, answers an oversized message; tonic says `OUT_OF_RANGE`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::TryFutureExt;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Request, Response, Status};

use super::traced::NowTraced;
use super::{Answer, Now, RateLimiter};
use crate::telemetry::{RequestMethod, RequestOutcome};
use crate::trace::{self, DecisionTracer, Sampled};
use crate::transport::{Compression, GrpcBody, RawRequestCodec};

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// Built once: looked up by a `&str`, the name is parsed again on every response.
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
/// What is left of a decision that waits.
type Waiting = BoxFuture<Result<Answer, Status>>;

/// The route tonic's router serves under `envoy.service.ratelimit.v3.RateLimitService`.
#[derive(Clone)]
pub struct RateLimitRoute {
    limiter: Arc<RateLimiter>,
    max_request_bytes: usize,
}

impl RateLimitRoute {
    /// `max_request_bytes`: the largest message accepted, checked on its length prefix before
    /// any of it is buffered.
    pub fn new(limiter: Arc<RateLimiter>, max_request_bytes: usize) -> Self {
        Self {
            limiter,
            max_request_bytes,
        }
    }

    /// The gRPC routes: `ShouldRateLimit` by its exact path, straight to this route; the
    /// services [`GrpcRoutes::add_direct`] adds by their path prefix (RLQS); every other
    /// path to tonic's routes of this service (its other methods: `UNIMPLEMENTED`) and of
    /// those [`GrpcRoutes::add_service`] adds (health).
    pub fn routes(self) -> GrpcRoutes {
        GrpcRoutes {
            others: tonic::service::Routes::new(self.clone()),
            rate_limit: self,
            direct: Vec::new(),
        }
    }
}

/// A gRPC service the routes call directly rather than through tonic's router: it reads and
/// answers the wire itself (the RLQS service, so that every way a stream ends has its
/// status). Its request's body is the transport's, boxed: whole messages only.
pub trait DirectService: Send + Sync + 'static {
    /// Every path of the service starts with this (`/package.Service/`).
    fn prefix(&self) -> &'static str;
    /// Answers one call; the answer's body may go on long after (a stream).
    fn call(&self, request: http::Request<Body>) -> http::Response<GrpcBody>;
}

/// Every gRPC route of the server (see [`RateLimitRoute::routes`]).
///
/// tonic's router (axum's) serves a service under the wildcard `/{service}/{*rest}`: on every
/// request it captured the method name, percent-decoded it into a new `Arc<str>`, cloned a
/// boxed route and boxed the body again (BENCHMARKS.md, "The cost of a request").
/// `ShouldRateLimit`, nearly every request, is compared with its path and called directly.
#[derive(Clone)]
pub struct GrpcRoutes {
    rate_limit: RateLimitRoute,
    direct: Vec<Arc<dyn DirectService>>,
    others: tonic::service::Routes,
}

impl GrpcRoutes {
    /// Serves one more gRPC service directly, by its path prefix (the RLQS service).
    pub fn add_direct(mut self, service: Arc<dyn DirectService>) -> Self {
        self.direct.push(service);
        self
    }

    /// Serves one more gRPC service behind the routes, through tonic (health).
    pub fn add_service<S>(mut self, service: S) -> Self
    where
        S: tower::Service<http::Request<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.others = self.others.add_service(service);
        self
    }
}

/// Called through a shared reference (hyper's `Service`): `ShouldRateLimit` needs nothing
/// of its own per request; tonic's routes (a tower service) are cloned for the other calls.
impl<B> hyper::service::Service<http::Request<B>> for GrpcRoutes
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + Unpin,
{
    type Response = http::Response<GrpcBody>;
    type Error = Infallible;
    type Future = futures_util::future::Either<
        ShouldRateLimit<B>,
        futures_util::future::Either<
            std::future::Ready<Result<http::Response<GrpcBody>, Infallible>>,
            futures_util::future::MapOk<
                <tonic::service::Routes as tower::Service<http::Request<B>>>::Future,
                fn(http::Response<Body>) -> http::Response<GrpcBody>,
            >,
        >,
    >;

    fn call(&self, request: http::Request<B>) -> Self::Future {
        use futures_util::future::Either;
        let path = request.uri().path();
        if path == SHOULD_RATE_LIMIT {
            return Either::Left(self.rate_limit.should_rate_limit(request));
        }
        if let Some(direct) = self.direct.iter().find(|d| path.starts_with(d.prefix())) {
            let answer = direct.call(request.map(Body::new));
            return Either::Right(Either::Left(std::future::ready(Ok(answer))));
        }
        // Always ready (axum's router).
        let others = tower::Service::call(&mut self.others.clone(), request);
        Either::Right(Either::Right(others.map_ok(tonic_answer as fn(_) -> _)))
    }
}

/// An answer of tonic's routes as the server sends it.
fn tonic_answer(response: http::Response<Body>) -> http::Response<GrpcBody> {
    response.map(GrpcBody::from)
}

impl NamedService for RateLimitRoute {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl tower::Service<http::Request<Body>> for RateLimitRoute {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    /// Reached through tonic's routes, by the service's other methods (`ShouldRateLimit`
    /// is dispatched by [`GrpcRoutes`] first).
    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        Box::pin(
            self.should_rate_limit(request)
                .map_ok(|response| response.map(Body::new)),
        )
    }
}

impl RateLimitRoute {
    /// Decodes, decides and answers one `ShouldRateLimit` call.
    fn should_rate_limit<B>(&self, request: http::Request<B>) -> ShouldRateLimit<B>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + Unpin,
    {
        // Routed now: the time to the answer includes reading the body and deciding.
        let started = std::time::Instant::now();
        let limiter = Arc::clone(&self.limiter);
        let max_request_bytes = self.max_request_bytes;
        // Sampled or not is decided on the headers alone: an unsampled call goes the way it
        // goes with tracing off; a sampled one the same way, in its span.
        let sampled = limiter
            .tracer()
            .and_then(|tracer| tracer.sample(request.headers()));
        ShouldRateLimit {
            limiter,
            started,
            max_request_bytes,
            sampled,
            state: Answering::Reading(unary::read(request, max_request_bytes)),
        }
    }

    /// [`Self::through_tonic`] owning its limiter. Boxed: tonic's future is large, and the
    /// common call's future moves whole.
    fn through_tonic_owned<B>(
        limiter: Arc<RateLimiter>,
        max_request_bytes: usize,
        request: http::Request<unary::Replay<B>>,
        sampled: Option<Sampled>,
    ) -> BoxFuture<http::Response<Body>>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + Unpin,
    {
        Box::pin(
            async move { Self::through_tonic(&limiter, max_request_bytes, request, sampled).await },
        )
    }

    /// The answer to a call that is not the common one, by tonic's `Grpc::unary`: its checks
    /// and refusals (in its span when `sampled`).
    async fn through_tonic<B>(
        limiter: &RateLimiter,
        max_request_bytes: usize,
        request: http::Request<unary::Replay<B>>,
        sampled: Option<Sampled>,
    ) -> http::Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + Unpin,
    {
        let handled = AtomicBool::new(false);
        let decode = Decode {
            limiter,
            handled: &handled,
            sampled,
        };
        // A compressed message is decompressed within `max_request_bytes` too.
        let mut grpc = Compression::ALL.into_iter().fold(
            Grpc::new(RawRequestCodec::<Answer>::default())
                .max_decoding_message_size(max_request_bytes),
            |grpc, compression| grpc.accept_compressed(compression.tonic()),
        );
        let response = grpc.unary(decode, request).await;
        // The handler counted what it answered; only what tonic answered without it
        // (which the handler never answers: `RESOURCE_EXHAUSTED`, `OUT_OF_RANGE`) is
        // counted here.
        if handled.load(Ordering::Relaxed) {
            return response;
        }
        count_transport_refusal(limiter, response, max_request_bytes)
    }
}

/// [`RateLimitRoute::should_rate_limit`]'s future, counted in `rls_requests_total` and
/// timed in `rls_request_duration_seconds`. Named rather than an `async` block, so it is not
/// boxed: it lives in hyper's stream task, with no allocation of its own per request.
pub struct ShouldRateLimit<B: http_body::Body> {
    limiter: Arc<RateLimiter>,
    started: std::time::Instant,
    max_request_bytes: usize,
    /// The call is traced: its span starts once its message is read (taken then).
    sampled: Option<Sampled>,
    state: Answering<B>,
}

/// Where a [`ShouldRateLimit`] is.
#[allow(
    clippy::large_enum_variant,
    reason = "reading is the common case: boxing it would allocate per request"
)]
enum Answering<B: http_body::Body> {
    /// Reading the common call's one message.
    Reading(unary::Reading<B>),
    /// A decision that waits (a cold cell, a refund, several limits).
    Deciding(Waiting),
    /// Any other call: tonic's.
    Tonic(BoxFuture<http::Response<Body>>),
    /// Answered.
    Answered,
}

impl<B> Future for ShouldRateLimit<B>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + Unpin,
{
    type Output = Result<http::Response<GrpcBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = loop {
            match &mut this.state {
                Answering::Reading(reading) => match ready!(Pin::new(reading).poll(cx)) {
                    unary::Read::Whole(message) => {
                        if let Some(sampled) = this.sampled.take()
                            && let Some(tracer) = this.limiter.tracer()
                        {
                            let span = tracer.start(sampled, trace::Route::Grpc);
                            match decide_traced(&this.limiter, message, span) {
                                TracedDecision::Answered(answer) => break unary::respond(answer),
                                TracedDecision::Waiting(waiting) => {
                                    this.state = Answering::Deciding(waiting);
                                    continue;
                                }
                            }
                        }
                        // Decided at once when no descriptor has to wait (the warm path: no
                        // future built, none boxed); otherwise what is left of it is boxed.
                        let request = match this.limiter.decode(message) {
                            Ok(request) => request,
                            Err(refused) => break unary::respond(Err(refused)),
                        };
                        match this.limiter.should_rate_limit_now(&request) {
                            Now::Answered(answer) => break unary::respond(answer),
                            Now::Later(unfinished) => {
                                let limiter = Arc::clone(&this.limiter);
                                this.state = Answering::Deciding(Box::pin(async move {
                                    limiter.finish_untraced(&request, unfinished).await
                                }));
                            }
                        }
                    }
                    unary::Read::Other(request) => {
                        this.state = Answering::Tonic(RateLimitRoute::through_tonic_owned(
                            Arc::clone(&this.limiter),
                            this.max_request_bytes,
                            *request,
                            this.sampled.take(),
                        ));
                    }
                },
                Answering::Deciding(deciding) => {
                    break unary::respond(ready!(deciding.as_mut().poll(cx)));
                }
                Answering::Tonic(tonic) => {
                    break ready!(tonic.as_mut().poll(cx)).map(GrpcBody::from);
                }
                // Polled again after its answer: as a finished `async` block, it is a bug of
                // the caller; answer rather than panic.
                Answering::Answered => {
                    return Poll::Ready(Ok(Status::internal("answer already taken").into_http()));
                }
            }
        };
        this.state = Answering::Answered;
        this.limiter
            .metrics
            .request_duration(RequestMethod::ShouldRateLimit, this.started.elapsed());
        Poll::Ready(Ok(response))
    }
}

/// [`decide_traced`]'s outcome.
#[allow(
    clippy::large_enum_variant,
    reason = "the answer is the common case: boxing it would allocate per request"
)]
enum TracedDecision {
    Answered(Result<Answer, Status>),
    Waiting(Waiting),
}

/// A sampled call's message, decoded and decided in `span` (a refusal is in it too): the
/// answer when decided at once, else what is left of the decision, boxed.
fn decide_traced(
    limiter: &Arc<RateLimiter>,
    message: Bytes,
    span: trace::DecisionSpan,
) -> TracedDecision {
    let request = match limiter.decode(message) {
        Ok(request) => request,
        Err(refused) => {
            super::traced::end(span, trace::Path::Warm, &Err(refused.clone()));
            return TracedDecision::Answered(Err(refused));
        }
    };
    match limiter.should_rate_limit_now_traced(&request, span) {
        NowTraced::Answered(answer) => TracedDecision::Answered(answer),
        NowTraced::Later(unfinished, span) => {
            let limiter = Arc::clone(limiter);
            TracedDecision::Waiting(Box::pin(async move {
                limiter.finish_traced(&request, unfinished, span).await
            }))
        }
    }
}

/// Counts (and, for tonic's `OUT_OF_RANGE`, re-codes) a refusal that happened in tonic,
/// before the handler ran: a message over the size limit, or the body budget spent.
fn count_transport_refusal(
    limiter: &RateLimiter,
    response: http::Response<Body>,
    max_request_bytes: usize,
) -> http::Response<Body> {
    let code = response
        .headers()
        .get(&GRPC_STATUS)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<i32>().ok())
        .map(Code::from);
    match code {
        Some(Code::OutOfRange) => {
            limiter.metrics.request(RequestOutcome::ResourceExhausted);
            Status::resource_exhausted(format!(
                "request message larger than the server's limit of {max_request_bytes} bytes"
            ))
            .into_http()
        }
        Some(Code::ResourceExhausted) => {
            limiter.metrics.request(RequestOutcome::ResourceExhausted);
            response
        }
        _ => response,
    }
}

/// Hands the raw message to the limiter, which decodes it. Borrows the limiter from the
/// route's future, which holds it: no reference count written per request.
struct Decode<'a> {
    limiter: &'a RateLimiter,
    /// Set when tonic hands the message over: the request got past tonic's own refusals.
    handled: &'a AtomicBool,
    /// The request is traced (taken by the one call).
    sampled: Option<Sampled>,
}

impl<'a> UnaryService<Bytes> for Decode<'a> {
    type Response = Answer;
    type Future = Decided<'a>;

    /// Decides at once when no descriptor has to wait (the warm path: no future built, none
    /// boxed); otherwise boxes what is left of the decision.
    fn call(&mut self, request: Request<Bytes>) -> Decided<'a> {
        let limiter = self.limiter;
        self.handled.store(true, Ordering::Relaxed);
        if let Some(sampled) = self.sampled.take()
            && let Some(tracer) = limiter.tracer()
        {
            return traced(limiter, tracer, sampled, request);
        }
        let request = match limiter.decode(request.into_inner()) {
            Ok(request) => request,
            Err(refused) => return Decided::Ready(Some(Err(refused))),
        };
        match limiter.should_rate_limit_now(&request) {
            Now::Answered(answer) => Decided::Ready(Some(answer.map(Response::new))),
            Now::Later(unfinished) => Decided::Later(Box::pin(async move {
                limiter
                    .finish_untraced(&request, unfinished)
                    .await
                    .map(Response::new)
            })),
        }
    }
}

/// [`Decode::call`] for a sampled request: the span starts before the message is decoded (a
/// refusal is in it too), as a child of the caller's trace.
fn traced<'a>(
    limiter: &'a RateLimiter,
    tracer: &DecisionTracer,
    sampled: Sampled,
    request: Request<Bytes>,
) -> Decided<'a> {
    let span = tracer.start(sampled, trace::Route::Grpc);
    match limiter.decode(request.into_inner()) {
        Ok(request) => Decided::Later(Box::pin(async move {
            limiter
                .should_rate_limit_traced(&request, span)
                .await
                .map(Response::new)
        })),
        Err(refused) => {
            super::traced::end(span, trace::Path::Warm, &Err(refused.clone()));
            Decided::Ready(Some(Err(refused)))
        }
    }
}

/// [`Decode`]'s answer: taken already, or still to take.
#[allow(
    clippy::large_enum_variant,
    reason = "the answer is the common case: boxing it would allocate per request"
)]
enum Decided<'a> {
    /// `None` once taken.
    Ready(Option<Result<Response<Answer>, Status>>),
    Later(Pin<Box<dyn Future<Output = Result<Response<Answer>, Status>> + Send + 'a>>),
}

impl Future for Decided<'_> {
    type Output = Result<Response<Answer>, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Decided::Ready(answer) => match answer.take() {
                Some(answer) => Poll::Ready(answer),
                // Polled again after its answer: as a finished `async` block, it is a bug of
                // the caller; answer rather than panic.
                None => Poll::Ready(Err(Status::internal("answer already taken"))),
            },
            Decided::Later(later) => later.as_mut().poll(cx),
        }
    }
}

mod unary;

#[cfg(test)]
mod tests;
