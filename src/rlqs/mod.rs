//! The rate-limit quota service (RLQS, `envoy.service.rate_limit_quota.v3`), for Envoy's
//! `rate_limit_quota` HTTP filter: Envoy decides each request itself from a quota assignment
//! and reports, per bucket, what it allowed and denied; the service counts the allowed
//! requests on the same counters RLS v3 decides on and answers with each Envoy's share.
//!
//! Where each step lives:
//! - `wire`: the stream on the wire: reports decoded from whole messages, responses framed,
//!   the status that ends the stream in its trailers (served here, not by tonic's router).
//! - `validate`: what ends a stream (`INVALID_ARGUMENT`) and what sets one usage aside.
//! - `bucket_key`: a bucket's id, stored once.
//! - `bucket`: a bucket id to the counters of the rule its entries match, as RLS v3 plans
//!   the descriptor with those entries (their order comes from the domain's tree).
//! - `board`: every reported bucket grouped by counter, with each Envoy's demand, and the
//!   split of the counter's rate between them.
//! - `reservation`: exact shares for buckets of `never_above` limits: what a token bucket
//!   may admit taken from the counters before it is sent, what it left unspent given back.
//! - `share`: the rate a counter may grow at to hold its sliding window at the limit, the
//!   max-min fair split, and the token bucket that states a rate to Envoy.
//! - `usage`: a report counted on the bucket's counters, its demand on the board.
//! - `stream`: one stream's buckets, reports, assignments, renewals, abandons and the
//!   expiring assignments sent on shutdown. `action`: the protobuf of a bucket action.
//! - `outbox`: actions sent in bounded responses; an Envoy that stops reading is let go.
//! - `memory`: the bytes buckets and groups hold, against `--rlqs-max-bucket-bytes`.
//! - `settings`: the `--rlqs-*` flags, typed.

mod action;
mod board;
mod bucket;
mod bucket_key;
mod memory;
mod outbox;
mod reservation;
mod settings;
mod share;
mod stream;
mod usage;
mod validate;
mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use gcounter_engine::Engine;
use tokio_util::sync::CancellationToken;
use tonic::Status;

pub use board::QuotaBoard;
pub use memory::BucketBytes;
pub use settings::QuotaSettings;
pub use share::Strategy;
pub use stream::BUCKET_OVERHEAD;

use crate::config::LimitsConfig;
use crate::rls::{DirectService, RequestLimits};
use crate::telemetry::{Metrics, StreamError};
use crate::transport::{Compression, GrpcBody};
use stream::QuotaStream;

/// Every method of the service starts with this path.
pub const SERVICE_PATH: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/";
/// Its one method.
const STREAM_PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
/// Responses a stream may have waiting for its client before its task waits too: one, of
/// at most about `outbox::RESPONSE_BYTES`.
const OUTBOUND_RESPONSES: usize = 1;
const GRPC_CONTENT_TYPE: http::HeaderValue = http::HeaderValue::from_static("application/grpc");

/// What every stream of the service shares.
pub struct Shared {
    limits: Arc<ArcSwap<LimitsConfig>>,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    settings: QuotaSettings,
    request_limits: RequestLimits,
    /// The most bytes a report may decompress to (`--max-request-bytes`).
    max_report_bytes: usize,
    /// The service-wide shadow mode: every bucket is counted and allowed.
    service_shadow: bool,
    board: Arc<QuotaBoard>,
    /// Bytes of every bucket and group, against `--rlqs-max-bucket-bytes`.
    memory: Arc<BucketBytes>,
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
        max_report_bytes: usize,
        shutdown: CancellationToken,
    ) -> Self {
        let memory = Arc::new(BucketBytes::new(settings.max_bucket_bytes));
        let board = QuotaBoard::new(
            settings.max_group_members,
            settings.sole_process,
            Arc::clone(&memory),
        );
        Self {
            shared: Arc::new(Shared {
                limits,
                engine,
                metrics,
                settings,
                request_limits: rls.request_limits,
                max_report_bytes,
                service_shadow: rls.shadow_mode,
                board: Arc::new(board),
                memory,
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

    /// The bytes RLQS buckets hold (`rls_memory_bytes{pool="rlqs_buckets"}`).
    pub fn bucket_bytes(&self) -> Arc<BucketBytes> {
        Arc::clone(&self.shared.memory)
    }
}

impl DirectService for QuotaService {
    fn prefix(&self) -> &'static str {
        SERVICE_PATH
    }

    /// Opens a stream: checks the call, spawns the stream's task and answers with the body
    /// its responses go out through.
    fn call(&self, request: http::Request<tonic::body::Body>) -> http::Response<GrpcBody> {
        match self.open(request) {
            Ok(response) => response,
            Err(status) => status.into_http(),
        }
    }
}

impl QuotaService {
    fn open(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<GrpcBody>, Status> {
        if request.uri().path() != STREAM_PATH {
            return Err(Status::unimplemented(""));
        }
        let compression = Compression::of_request(request.headers())?;
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
        let (out, responses) = wire::stream(OUTBOUND_RESPONSES);
        let stream = QuotaStream::new(Arc::clone(shared));
        let reports = wire::Reports::new(request.into_body(), compression, shared.max_report_bytes);
        tokio::spawn(stream.run(reports, out));
        let mut response = http::Response::new(GrpcBody::from(tonic::body::Body::new(responses)));
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
        Ok(response)
    }
}
