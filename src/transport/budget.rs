//! The budget of request bytes the server buffers, shared by every connection and stream,
//! so that no client can pin it.
//!
//! Per stream, `--max-request-bytes` bounds one message; per connection,
//! `--max-concurrent-streams` bounds the streams; but connections × streams × bytes is no
//! bound at all (1,024 × 100 × 256 KiB = 25 GiB): an HTTP/2 slow-loris held 2 GB this way.
//!
//! What the budget charges is what the server really holds: the bytes of a message that has
//! begun to arrive and is not whole yet, as they arrive ([`super::BudgetedBody`] assembles
//! them). A message's announced length costs nothing: a 5-byte prefix announcing 256 KiB
//! holds a few bytes, not 256 KiB (charging announcements let ~800 streams that sent only
//! prefixes hold the whole budget, at a cost of 4 KB to the client). A message that arrives
//! whole in one DATA frame, every real Envoy request, is handed on at once and never asks
//! the budget: no state of the budget can refuse it.
//!
//! Three bounds keep one client from taking what the others need:
//! - a deadline on completing a message once its first bytes arrived (`--request-timeout`),
//!   on every stream kind: holding bytes costs a client the bandwidth to send them again;
//! - a connection's share: one connection holds at most [`CONNECTION_SHARE`] of its pool
//!   (and always room for one message of `--max-request-bytes`);
//! - two pools: long-lived streams ([`BodyBudgetLayer::with_stream_paths`], the RLQS service)
//!   take from half the budget, every other call from the other half, so a flood of one
//!   cannot refuse the other.
//!
//! Nothing ever waits for bytes: a message that finds its pool or its connection's share
//! spent is refused at once with `RESOURCE_EXHAUSTED` (waiting would let a few slow streams
//! hold every legitimate request behind them). A pool is one atomic count, not a semaphore:
//! taking is a compare-and-swap, giving back an add, and only a message split over frames
//! does either.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::service::Service;
use tonic::Status;
use tower::Layer;

use super::end_stream::EndStreamChecked;
use super::messages::BudgetedBody;

/// One connection holds at most this fraction of its pool: it takes eight connections to
/// spend a pool, each sending its share again within every `--request-timeout`.
pub const CONNECTION_SHARE: usize = 8;
/// The gRPC length prefix: a compression flag and a big-endian u32 length.
pub(super) const PREFIX: usize = 5;

/// Bytes left to hand out.
#[derive(Debug)]
struct Pool(AtomicUsize);

impl Pool {
    fn try_take(&self, bytes: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |left| {
                left.checked_sub(bytes)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.0.fetch_add(bytes, Ordering::AcqRel);
    }

    fn left(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Which pool a request's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Every call but the long-lived streams.
    Calls,
    /// The long-lived streams ([`BodyBudgetLayer::with_stream_paths`]).
    Streams,
}

#[derive(Debug)]
struct Pools {
    calls: Pool,
    streams: Pool,
    /// Both pools when nothing is held.
    total: usize,
    /// What one connection may hold of one pool.
    connection_share: usize,
    /// Announcements over this are refused on their prefix.
    max_message: usize,
    /// A message must be whole this long after its first bytes arrived.
    completion: Duration,
    /// Path prefixes whose calls are long-lived streams.
    stream_paths: Vec<&'static str>,
}

impl Pools {
    fn pool(&self, class: Class) -> &Pool {
        match class {
            Class::Calls => &self.calls,
            Class::Streams => &self.streams,
        }
    }

    fn class_of(&self, path: &str) -> Class {
        if self
            .stream_paths
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            Class::Streams
        } else {
            Class::Calls
        }
    }
}

/// One connection's view of the budget: what its streams hold, against its share.
#[derive(Debug)]
pub(super) struct ConnectionBudget {
    pools: Arc<Pools>,
    calls: AtomicUsize,
    streams: AtomicUsize,
}

impl ConnectionBudget {
    fn new(pools: &Arc<Pools>) -> Arc<Self> {
        Arc::new(Self {
            pools: Arc::clone(pools),
            calls: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
        })
    }

    fn held(&self, class: Class) -> &AtomicUsize {
        match class {
            Class::Calls => &self.calls,
            Class::Streams => &self.streams,
        }
    }

    /// Takes `bytes` for a message of `class`: from the connection's share, then from the
    /// pool; the refusal says which was spent.
    pub(super) fn take(&self, class: Class, bytes: usize) -> Result<(), Status> {
        let share = self.pools.connection_share;
        let held = self.held(class);
        let within_share = held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |now| {
                now.checked_add(bytes).filter(|after| *after <= share)
            })
            .is_ok();
        if !within_share {
            return Err(Status::resource_exhausted(
                "this connection is buffering its share of the request-bytes budget \
                 (1/8 of --max-buffered-request-bytes); retry later",
            ));
        }
        if !self.pools.pool(class).try_take(bytes) {
            held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Status::resource_exhausted(
                "the server is buffering too many request bytes \
                 (--max-buffered-request-bytes); retry later",
            ));
        }
        Ok(())
    }

    pub(super) fn give_back(&self, class: Class, bytes: usize) {
        self.held(class).fetch_sub(bytes, Ordering::AcqRel);
        self.pools.pool(class).give_back(bytes);
    }

    pub(super) fn max_message(&self) -> usize {
        self.pools.max_message
    }

    pub(super) fn completion(&self) -> Duration {
        self.pools.completion
    }
}

/// Wraps every request body of the gRPC server in a [`BudgetedBody`]; one layer per
/// connection ([`Self::for_connection`]), all taking from the same pools.
#[derive(Debug, Clone)]
pub struct BodyBudgetLayer {
    pools: Arc<Pools>,
    connection: Option<Arc<ConnectionBudget>>,
}

impl BodyBudgetLayer {
    /// A budget of `max_bytes` in all; `max_message` is the server's per-message limit,
    /// `completion` the time a message may take to arrive once begun.
    pub fn new(max_bytes: usize, max_message: usize, completion: Duration) -> Self {
        let streams = max_bytes / 2;
        let calls = max_bytes - streams;
        let one_message = max_message.saturating_add(PREFIX);
        Self {
            pools: Arc::new(Pools {
                calls: Pool(AtomicUsize::new(calls)),
                streams: Pool(AtomicUsize::new(streams)),
                total: max_bytes,
                connection_share: (calls / CONNECTION_SHARE).max(one_message),
                max_message,
                completion,
                stream_paths: Vec::new(),
            }),
            connection: None,
        }
    }

    /// Calls whose path starts with one of `prefixes` are long-lived streams: they take from
    /// the streams' pool. Set before the first connection.
    pub fn with_stream_paths(mut self, prefixes: &[&'static str]) -> Self {
        if let Some(pools) = Arc::get_mut(&mut self.pools) {
            pools.stream_paths.extend_from_slice(prefixes);
        }
        self
    }

    /// The layer for one new connection: its own share of the pools.
    pub fn for_connection(&self) -> Self {
        Self {
            pools: Arc::clone(&self.pools),
            connection: Some(ConnectionBudget::new(&self.pools)),
        }
    }

    /// `inner` under this layer's connection budget, as `class` (a test's body).
    #[cfg(test)]
    pub(super) fn wrap<B>(&self, inner: B, class: Class) -> BudgetedBody<B> {
        let connection = self
            .connection
            .clone()
            .unwrap_or_else(|| ConnectionBudget::new(&self.pools));
        BudgetedBody::new(inner, connection, class)
    }

    /// A reader of what the budget holds, for a metrics scrape.
    pub fn buffered(&self) -> BufferedBytes {
        BufferedBytes {
            pools: Arc::clone(&self.pools),
        }
    }
}

/// What a [`BodyBudgetLayer`]'s budget holds now: bytes of messages not yet whole, against
/// the budget.
#[derive(Debug, Clone)]
pub struct BufferedBytes {
    pools: Arc<Pools>,
}

impl BufferedBytes {
    /// Bytes held by request bodies assembling their messages.
    pub fn held(&self) -> u64 {
        let left = self.pools.calls.left() + self.pools.streams.left();
        self.pools.total.saturating_sub(left) as u64
    }

    /// The budget (`--max-buffered-request-bytes`).
    pub fn budget(&self) -> u64 {
        self.pools.total as u64
    }
}

impl<S> Layer<S> for BodyBudgetLayer {
    type Service = BodyBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        // A layer made without `for_connection` (a test, an embedder serving one
        // connection) gives its service a share of its own.
        let connection = self
            .connection
            .clone()
            .unwrap_or_else(|| ConnectionBudget::new(&self.pools));
        BodyBudget { inner, connection }
    }
}

#[derive(Debug, Clone)]
pub struct BodyBudget<S> {
    inner: S,
    connection: Arc<ConnectionBudget>,
}

impl<S, B> Service<http::Request<B>> for BodyBudget<S>
where
    S: Service<http::Request<BudgetedBody<EndStreamChecked<B>>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: http::Request<B>) -> Self::Future {
        let class = self.connection.pools.class_of(request.uri().path());
        let connection = Arc::clone(&self.connection);
        self.inner.call(
            request.map(|inner| BudgetedBody::new(EndStreamChecked::new(inner), connection, class)),
        )
    }
}

#[cfg(test)]
mod tests;
