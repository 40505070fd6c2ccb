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
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Duration;
    use tower::ServiceExt;

    type Answered = std::future::Ready<Result<u32, Infallible>>;

    /// A service that answers at once.
    fn echo() -> tower::util::ServiceFn<fn(u32) -> Answered> {
        tower::service_fn(|n| std::future::ready(Ok(n)))
    }

    #[tokio::test]
    async fn a_permit_is_held_until_the_future_is_dropped() {
        let layer = InflightLimitLayer::new(2);
        let mut a = layer.layer(echo());
        let mut b = layer.layer(echo());
        let first = a.ready().await.map(|s| s.call(1)).ok();
        let second = b.ready().await.map(|s| s.call(2)).ok();
        assert_eq!(layer.available(), 0);

        // A third service waits while both are held.
        let mut c = layer.layer(echo());
        let third = tokio::time::timeout(Duration::from_millis(50), c.ready()).await;
        assert!(third.is_err(), "over the cap, a service is not ready");

        match first {
            Some(first) => assert_eq!(first.await, Ok(1)),
            None => panic!("the first service was ready"),
        }
        // The first answer was consumed: its permit came back.
        let ready = tokio::time::timeout(Duration::from_secs(5), c.ready()).await;
        assert!(ready.is_ok_and(|r| r.is_ok()), "a release wakes the waiter");
        drop(second);
        assert_eq!(layer.available(), 1, "c holds the permit it took");
        drop(c);
        assert_eq!(
            layer.available(),
            2,
            "a service dropped ready gives its permit back"
        );
    }

    #[tokio::test]
    async fn a_dropped_waiter_passes_its_wake_up_on() {
        let layer = InflightLimitLayer::new(1);
        let mut holder = layer.layer(echo());
        let held = holder.ready().await.map(|s| s.call(0)).ok();
        let mut gone = layer.layer(echo());
        let mut stays = layer.layer(echo());
        for service in [&mut gone, &mut stays] {
            let pending = tokio::time::timeout(Duration::from_millis(20), service.ready()).await;
            assert!(pending.is_err());
        }
        drop(gone);
        drop(held);
        let ready = tokio::time::timeout(Duration::from_secs(5), stays.ready()).await;
        assert!(ready.is_ok_and(|r| r.is_ok()));
        assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 0);
    }

    /// Many tasks through a cap of 3: never more than 3 inside, and every one answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cap_holds_under_contention() {
        let layer = InflightLimitLayer::new(3);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                let service = layer.layer(tower::service_fn(move |()| {
                    let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                    async move {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(())
                    }
                }));
                tokio::spawn(service.oneshot(()))
            })
            .collect();
        for task in tasks {
            assert!(matches!(task.await, Ok(Ok(()))));
        }
        assert!(most.load(Ordering::SeqCst) <= 3);
        assert_eq!(layer.available(), 3);
    }
}
