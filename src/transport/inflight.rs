//! The global cap on gRPC requests in flight (`--max-inflight-requests`).
//!
//! Each request in flight holds a task, an HTTP/2 stream and tonic's decode buffer whatever
//! it announces, so all connections together may hold at most this many; past the cap a
//! connection stops taking requests (`poll_ready` waits, the body is not read) until one
//! finishes, within the request deadline.
//!
//! Why not tower's `GlobalConcurrencyLimitLayer`: its tokio semaphore locks its waiter list on
//! every release, waiters or not, and clones an `Arc` per permit besides the one the permit
//! needs: ~150 instructions and two more locked operations on every request (BENCHMARKS.md,
//! "The cost of a request"). Here a permit is one compare-and-swap to take and one add to give
//! back; the waiters' [`Notify`] is touched only when someone waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tower::{Layer, Service};

/// The permits every connection's service takes from.
#[derive(Debug)]
struct Permits {
    available: AtomicUsize,
    /// Services waiting in `poll_ready`: a release wakes one only when this is non-zero.
    waiting: AtomicUsize,
    notify: Arc<Notify>,
}

impl Permits {
    fn try_take(&self) -> bool {
        self.available
            .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    fn give_back(&self) {
        // SeqCst on both sides: a waiter counts itself, then tries; a release adds, then
        // reads the count; one of the two sees the other (no wake-up lost).
        self.available.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_one();
        }
    }
}

/// One request's share of the cap, given back when the request's future is dropped
/// (answered, failed or cancelled).
#[derive(Debug)]
pub struct InflightPermit(Arc<Permits>);

impl Drop for InflightPermit {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// At most `max` requests in flight across every service it wraps.
#[derive(Debug, Clone)]
pub struct InflightLimitLayer {
    permits: Arc<Permits>,
}

impl InflightLimitLayer {
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Permits {
                available: AtomicUsize::new(max),
                waiting: AtomicUsize::new(0),
                notify: Arc::new(Notify::new()),
            }),
        }
    }

    #[cfg(test)]
    fn available(&self) -> usize {
        self.permits.available.load(Ordering::SeqCst)
    }
}

impl<S> Layer<S> for InflightLimitLayer {
    type Service = InflightLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InflightLimit {
            inner,
            permits: Arc::clone(&self.permits),
            permit: None,
            waiter: None,
        }
    }
}

/// A service that takes a permit in `poll_ready` and hands it to the call's future.
#[derive(Debug)]
pub struct InflightLimit<S> {
    inner: S,
    permits: Arc<Permits>,
    /// Taken by `poll_ready`, spent by `call`.
    permit: Option<InflightPermit>,
    /// While waiting for a release; counted in `Permits::waiting`.
    waiter: Option<Waiter>,
}

/// A clone is a new service: it holds no permit and waits for none.
impl<S: Clone> Clone for InflightLimit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            permits: Arc::clone(&self.permits),
            permit: None,
            waiter: None,
        }
    }
}

/// A registered wait for a release, uncounted when dropped.
#[derive(Debug)]
struct Waiter {
    notified: Pin<Box<OwnedNotified>>,
    permits: Arc<Permits>,
}

impl Waiter {
    fn new(permits: &Arc<Permits>) -> Self {
        permits.waiting.fetch_add(1, Ordering::SeqCst);
        let mut notified = Box::pin(Arc::clone(&permits.notify).notified_owned());
        // Registered before the caller tries again: a release between that try and the
        // first poll wakes it.
        notified.as_mut().enable();
        Self {
            notified,
            permits: Arc::clone(permits),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.permits.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S, Request> Service<Request> for InflightLimit<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Permitted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while self.permit.is_none() {
            if self.permits.try_take() {
                self.permit = Some(InflightPermit(Arc::clone(&self.permits)));
                self.waiter = None;
                break;
            }
            match &mut self.waiter {
                None => self.waiter = Some(Waiter::new(&self.permits)),
                Some(waiter) => {
                    ready!(waiter.notified.as_mut().poll(cx));
                    self.waiter = None;
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        Permitted {
            inner: self.inner.call(request),
            // `None` only when a caller skipped `poll_ready`; then nothing is held.
            _permit: self.permit.take(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's future, holding its request's permit until dropped.
    pub struct Permitted<F> {
        #[pin]
        inner: F,
        _permit: Option<InflightPermit>,
    }
}

impl<F: Future> Future for Permitted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests;
