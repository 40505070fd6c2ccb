//! One deadline per gRPC request (`--request-timeout`): from its headers to its answer, so a
//! stream that trickles its body is cut (`CANCELLED`, "Timeout expired", as tonic answers)
//! and frees what it held. The client's `grpc-timeout`, when shorter, is tonic's to enforce:
//! its server reads that header on every request whatever it is configured with.
//!
//! Why not tonic's `Server::timeout`: it builds a tokio `Sleep` for every request, which
//! reads the clock and clones the runtime's handle (BENCHMARKS.md, issue 16). Nearly every
//! request is answered on its first poll, so here the timer is made only when the request
//! has to wait, counted from then (microseconds after its headers arrived).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Sleep;
use tonic::TimeoutExpired;
use tower::{BoxError, Layer, Service};

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

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        WithinDeadline {
            inner: self.inner.call(request),
            timeout: self.server,
            sleep: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner future, cut when its timer fires; the timer is made on its first `Pending`.
    pub struct WithinDeadline<F> {
        #[pin]
        inner: F,
        timeout: Duration,
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
            return Poll::Ready(Err(TimeoutExpired(()).into()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    /// A request answered after `delay`, through `layer`.
    async fn answer_after(layer: RequestDeadlineLayer, delay: Duration) -> Result<(), BoxError> {
        let service = tower::service_fn(move |_: http::Request<()>| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, Infallible>(())
        });
        layer.layer(service).oneshot(http::Request::new(())).await
    }

    fn expired(result: Result<(), BoxError>) -> bool {
        result.is_err_and(|error| error.downcast_ref::<TimeoutExpired>().is_some())
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_the_deadline_is_cut() {
        let layer = RequestDeadlineLayer::new(Duration::from_secs(1));
        let ms = Duration::from_millis;
        assert!(answer_after(layer, ms(900)).await.is_ok());
        assert!(expired(answer_after(layer, ms(1_100)).await));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_at_once_makes_no_timer() {
        let layer = RequestDeadlineLayer::new(Duration::from_secs(1));
        let mut future = Box::pin(
            layer
                .layer(tower::service_fn(|_: http::Request<()>| {
                    std::future::ready(Ok::<_, Infallible>(()))
                }))
                .call(http::Request::new(())),
        );
        let polled = futures_util::poll!(future.as_mut());
        assert!(matches!(polled, Poll::Ready(Ok(()))));
        assert!(future.sleep.is_none());
    }
}
