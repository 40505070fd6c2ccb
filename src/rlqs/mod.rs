//! The rate-limit quota service (RLQS, `envoy.service.rate_limit_quota.v3`), for Envoy's
//! `rate_limit_quota` HTTP filter: Envoy decides each request itself from a quota assignment
//! and reports, per bucket, what it allowed and denied; the service counts the allowed
//! requests on the same counters RLS v3 decides on and answers with each Envoy's share.
//!
//! Where each step lives:
//! - `validate`: what ends a stream (`INVALID_ARGUMENT`) and what sets one usage aside.
//! - `bucket`: a bucket id to the counters of the rule its entries match, as RLS v3 plans
//!   the descriptor with those entries (their order comes from the domain's tree).
//! - `board`: every reported bucket grouped by counter, with each Envoy's demand, and the
//!   split of the counter's rate between them.
//! - `share`: the rate a counter may grow at to hold its sliding window at the limit, the
//!   max-min fair split, and the token bucket that states a rate to Envoy.
//! - `stream`: one stream's buckets, reports, assignments, renewals, abandons and the
//!   expiring assignments sent on shutdown. `action`: the protobuf of a bucket action.
//! - `settings`: the `--rlqs-*` flags, typed.

mod action;
mod board;
mod bucket;
mod settings;
mod share;
mod stream;
mod validate;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use gcounter_engine::Engine;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

pub use board::QuotaBoard;
pub use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
pub use settings::QuotaSettings;
pub use share::Strategy;

use crate::config::LimitsConfig;
use crate::rls::RequestLimits;
use crate::telemetry::{Metrics, StreamError};
use stream::QuotaStream;

/// Responses a stream may have waiting for its client before its task waits too.
const OUTBOUND_RESPONSES: usize = 4;

/// What every stream of the service shares.
pub struct Shared {
    limits: Arc<ArcSwap<LimitsConfig>>,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    settings: QuotaSettings,
    request_limits: RequestLimits,
    /// The service-wide shadow mode: every bucket is counted and allowed.
    service_shadow: bool,
    board: Arc<QuotaBoard>,
    /// Streams open now, against `--rlqs-max-streams`.
    streams: AtomicUsize,
    /// Buckets of all open streams, against `--rlqs-max-buckets`.
    buckets: AtomicUsize,
    next_stream: AtomicU64,
    /// Fired when the service shuts down: every stream expires its assignments and ends.
    shutdown: CancellationToken,
}

impl Shared {
    /// A stream holds one more bucket: counted against `--rlqs-max-buckets` and shown.
    fn bucket_held(&self) {
        self.buckets.fetch_add(1, Ordering::Relaxed);
        self.metrics.quota.buckets_changed(1);
    }

    /// A stream let `count` buckets go (abandoned, or the stream ended).
    fn buckets_left(&self, count: usize) {
        self.buckets.fetch_sub(count, Ordering::Relaxed);
        self.metrics
            .quota
            .buckets_changed(-i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The `RateLimitQuotaService` implementation.
#[derive(Clone)]
pub struct QuotaService {
    shared: Arc<Shared>,
}

impl QuotaService {
    pub fn new(
        limits: Arc<ArcSwap<LimitsConfig>>,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        settings: QuotaSettings,
        rls: &crate::rls::RlsSettings,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                limits,
                engine,
                metrics,
                settings,
                request_limits: rls.request_limits,
                service_shadow: rls.shadow_mode,
                board: Arc::new(QuotaBoard::default()),
                streams: AtomicUsize::new(0),
                buckets: AtomicUsize::new(0),
                next_stream: AtomicU64::new(1),
                shutdown,
            }),
        }
    }

    /// The board of every reported bucket (for inspection).
    pub fn board(&self) -> &Arc<QuotaBoard> {
        &self.shared.board
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = ResponseStream;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let shared = &self.shared;
        if shared.shutdown.is_cancelled() {
            return Err(Status::unavailable("the service is shutting down"));
        }
        let max = shared.settings.max_streams;
        let admitted = shared
            .streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            shared
                .metrics
                .quota
                .stream_error(StreamError::too_many_streams);
            return Err(Status::resource_exhausted(format!(
                "{max} RLQS streams are open (--rlqs-max-streams)"
            )));
        }
        let (out, responses) = mpsc::channel(OUTBOUND_RESPONSES);
        let stream = QuotaStream::new(Arc::clone(shared));
        tokio::spawn(stream.run(request.into_inner(), out));
        Ok(Response::new(ResponseStream(responses)))
    }
}

/// The responses of one stream, as its task sends them; the stream ends when the task does.
pub struct ResponseStream(mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>);

impl futures_util::Stream for ResponseStream {
    type Item = Result<RateLimitQuotaResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
