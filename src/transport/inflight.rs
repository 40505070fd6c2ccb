//! The global cap on gRPC requests in flight (`--max-inflight-requests`).
//!
//! Each request in flight holds a task, an HTTP/2 stream and tonic's decode buffer whatever
//! it announces, so all connections together may hold at most this many; past the cap a
//! request waits for one to finish before its service is called (its body is not read),
//! within the request deadline.
//!
//! Why not tower's `GlobalConcurrencyLimitLayer`: its tokio semaphore locks its waiter list on
//! every release, waiters or not, and clones an `Arc` per permit besides the one the permit
//! needs: ~150 instructions and two more locked operations on every request (BENCHMARKS.md,
//! "The cost of a request"). Here a permit is one compare-and-swap to take and one add to give
//! back; the waiters' [`Notify`] is touched only when someone waits.
//!
//! The service is called through a shared reference (hyper's `Service`), so a request that
//! finds a permit free is called at once, with no clone of the service behind it: a tower
//! service waits in `poll_ready`, which needs a service of its own per request (a clone of
//! every layer and route, an `Arc` count written per layer: BENCHMARKS.md). Only a request
//! that has to wait clones the service, to call it once its permit comes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use hyper::service::Service;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tower::{BoxError, Layer};

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

    /// A permit, if one is free now.
    fn try_permit(self: &Arc<Self>) -> Option<InflightPermit> {
        self.try_take().then(|| InflightPermit(Arc::clone(self)))
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
        }
    }
}

/// A service whose calls each take a permit first, held by the call's future.
#[derive(Debug, Clone)]
pub struct InflightLimit<S> {
    inner: S,
    permits: Arc<Permits>,
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
    S: Service<Request> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Permitted<S::Future, S, Request>;

    /// Calls the service now when a permit is free (nearly always); otherwise the future
    /// waits for one, then calls a clone of the service.
    fn call(&self, request: Request) -> Self::Future {
        match self.permits.try_permit() {
            Some(permit) => Permitted::Admitted {
                inner: self.inner.call(request),
                _permit: permit,
            },
            None => Permitted::Waiting {
                call: Some((self.inner.clone(), request)),
                permits: Arc::clone(&self.permits),
                waiter: None,
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's call: waiting for a permit, then the service's future holding the
    /// permit until dropped (answered, failed or cancelled).
    #[project = PermittedState]
    pub enum Permitted<F, S, Request> {
        Admitted {
            #[pin]
            inner: F,
            _permit: InflightPermit,
        },
        Waiting {
            // `None` once called.
            call: Option<(S, Request)>,
            permits: Arc<Permits>,
            // While waiting for a release; counted in `Permits::waiting`.
            waiter: Option<Waiter>,
        },
    }
}

impl<F, S, Request, T, E> Future for Permitted<F, S, Request>
where
    S: Service<Request, Future = F>,
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let (permit, (service, request)) = match self.as_mut().project() {
                PermittedState::Admitted { inner, .. } => {
                    return inner.poll(cx).map_err(Into::into);
                }
                PermittedState::Waiting {
                    call,
                    permits,
                    waiter,
                } => match permits.try_permit() {
                    Some(permit) => match call.take() {
                        Some(call) => (permit, call),
                        // Only after `call` panicked in an earlier poll.
                        None => return Poll::Ready(Err("request already called".into())),
                    },
                    None => {
                        match waiter {
                            None => *waiter = Some(Waiter::new(permits)),
                            Some(waiting) => {
                                ready!(waiting.notified.as_mut().poll(cx));
                                *waiter = None;
                            }
                        }
                        continue;
                    }
                },
            };
            // The waiter (and its count) goes with the old state.
            self.set(Permitted::Admitted {
                inner: service.call(request),
                _permit: permit,
            });
        }
    }
}

#[cfg(test)]
mod tests;
