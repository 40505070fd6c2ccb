//! A global budget of request bytes being buffered, shared by every connection and stream.
//!
//! Per stream, `--max-request-bytes` bounds one message; per connection,
//! `--max-concurrent-streams` bounds the streams; but connections × streams × bytes is no
//! bound at all (1,024 × 100 × 256 KiB = 25 GiB): an HTTP/2 slow-loris held 2 GB this way.
//! Worse, tonic reserves a message's announced length as soon as its 5-byte prefix arrives
//! (`codec/decode.rs`), so a stream costs the server what it *announces*, not what it sends.
//!
//! So each request body reads the gRPC length prefixes as they pass and takes the announced
//! length from one process-wide budget before tonic sees the prefix; it gives the bytes
//! back when the body is dropped (message decoded, stream reset or timed out). A message that
//! finds the budget spent is refused at once with `RESOURCE_EXHAUSTED` rather than queued:
//! waiting would let a few slow streams hold every legitimate request behind them. A
//! sixteenth of the budget is kept for small messages (≤ 8 KiB, every real Envoy request),
//! so a flood of large announcements cannot refuse them before it also fills that reserve.
//!
//! Nothing ever waits for bytes, so a pool is one atomic count, not a semaphore: taking is a
//! compare-and-swap, giving back an add (a tokio semaphore also locked its waiter list on
//! every release and cloned an `Arc` per permit: BENCHMARKS.md, "The cost of a request").

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::service::Service;
use smallvec::SmallVec;
use tonic::Status;
use tower::{BoxError, Layer};

/// Messages up to this size may use the reserve.
const SMALL_MESSAGE: usize = 8 << 10;
/// The gRPC length prefix: a compression flag and a big-endian u32 length.
const PREFIX: usize = 5;

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

    #[cfg(test)]
    fn left(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Which pool a held announcement came from.
#[derive(Debug, Clone, Copy)]
enum Which {
    Main,
    Reserve,
}

#[derive(Debug)]
struct Pools {
    main: Pool,
    reserve: Pool,
    /// Both pools when nothing is held.
    total: usize,
    /// Announcements over this are left to tonic, which refuses them before reserving.
    max_message: usize,
}

impl Pools {
    fn take(&self, bytes: usize) -> Option<Which> {
        if self.main.try_take(bytes) {
            Some(Which::Main)
        } else if bytes <= SMALL_MESSAGE && self.reserve.try_take(bytes) {
            Some(Which::Reserve)
        } else {
            None
        }
    }

    fn give_back(&self, (from, bytes): (Which, usize)) {
        match from {
            Which::Main => self.main.give_back(bytes),
            Which::Reserve => self.reserve.give_back(bytes),
        }
    }
}

/// Wraps every request body of the gRPC server in a [`BudgetedBody`].
#[derive(Debug, Clone)]
pub struct BodyBudgetLayer {
    pools: Arc<Pools>,
}

impl BodyBudgetLayer {
    /// A budget of `max_bytes` in all; `max_message` is the server's per-message limit.
    pub fn new(max_bytes: usize, max_message: usize) -> Self {
        let reserve = max_bytes / 16;
        Self {
            pools: Arc::new(Pools {
                main: Pool(AtomicUsize::new(max_bytes - reserve)),
                reserve: Pool(AtomicUsize::new(reserve)),
                total: max_bytes,
                max_message,
            }),
        }
    }

    /// A reader of what the budget holds, for a metrics scrape.
    pub fn buffered(&self) -> BufferedBytes {
        BufferedBytes {
            pools: Arc::clone(&self.pools),
        }
    }
}

/// What a [`BodyBudgetLayer`]'s budget holds now: request bytes announced and not yet given
/// back, against the budget.
#[derive(Debug, Clone)]
pub struct BufferedBytes {
    pools: Arc<Pools>,
}

impl BufferedBytes {
    /// Bytes held by request bodies (announced lengths, as the budget charges them).
    pub fn held(&self) -> u64 {
        let left = self.pools.main.0.load(Ordering::Relaxed)
            + self.pools.reserve.0.load(Ordering::Relaxed);
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
        BodyBudget {
            inner,
            pools: Arc::clone(&self.pools),
        }
    }
}

#[derive(Debug, Clone)]
pub struct BodyBudget<S> {
    inner: S,
    pools: Arc<Pools>,
}

impl<S, B> Service<http::Request<B>> for BodyBudget<S>
where
    S: Service<http::Request<BudgetedBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: http::Request<B>) -> Self::Future {
        let pools = Arc::clone(&self.pools);
        self.inner.call(request.map(|inner| BudgetedBody {
            inner,
            pools,
            framing: Framing::default(),
            held: SmallVec::new(),
        }))
    }
}

/// Where the body is in gRPC's length-prefixed framing.
#[derive(Debug, Default)]
struct Framing {
    prefix: [u8; PREFIX],
    prefix_len: usize,
    /// Message bytes still to pass before the next prefix.
    body_left: usize,
}

impl Framing {
    /// Walks `data`; returns the announced length of each prefix completed in it.
    fn announcements(&mut self, mut data: &[u8], mut on_prefix: impl FnMut(usize) -> bool) -> bool {
        while !data.is_empty() {
            if self.body_left > 0 {
                let skip = self.body_left.min(data.len());
                self.body_left -= skip;
                data.advance(skip);
                continue;
            }
            let take = (PREFIX - self.prefix_len).min(data.len());
            let end = self.prefix_len + take;
            if let (Some(to), Some(from)) =
                (self.prefix.get_mut(self.prefix_len..end), data.get(..take))
            {
                to.copy_from_slice(from);
            }
            self.prefix_len += take;
            data.advance(take);
            if self.prefix_len == PREFIX {
                self.prefix_len = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                if !on_prefix(len) {
                    return false;
                }
                self.body_left = len;
            }
        }
        true
    }
}

/// A request body that holds budget for every message it announced. Generic over the body
/// it wraps (hyper's, on the server), so no request body is boxed on the way to the codec.
pub struct BudgetedBody<B> {
    inner: B,
    pools: Arc<Pools>,
    framing: Framing,
    /// What it took, and from where; inline for the one message of a unary request: no
    /// allocation per request.
    held: SmallVec<[(Which, usize); 1]>,
}

impl<B> Drop for BudgetedBody<B> {
    fn drop(&mut self) {
        for held in self.held.drain(..) {
            self.pools.give_back(held);
        }
    }
}

impl<B> HttpBody for BudgetedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx))
            .map(|frame| frame.map_err(|error| Status::from_error(error.into())));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            let this = &mut *self;
            let pools = &this.pools;
            let held = &mut this.held;
            let within = this.framing.announcements(data, |len| {
                if len > pools.max_message {
                    // tonic refuses it on the prefix, before reserving anything.
                    return true;
                }
                // A new prefix follows a message received whole: tonic holds it decoded or
                // about to be, so a long-lived stream gives the earlier one's bytes back
                // rather than holding every message it ever sent.
                for earlier in held.drain(..) {
                    pools.give_back(earlier);
                }
                let bytes = len + PREFIX;
                match pools.take(bytes) {
                    Some(from) => {
                        held.push((from, bytes));
                        true
                    }
                    None => false,
                }
            });
            if !within {
                return Poll::Ready(Some(Err(Status::resource_exhausted(
                    "the server is buffering too many request bytes \
                     (--max-buffered-request-bytes); retry later",
                ))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
