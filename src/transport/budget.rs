//! A global budget of request bytes being buffered, shared by every connection and stream.
//!
//! Per stream, `--max-request-bytes` bounds what one message may buffer; per connection,
//! `--max-concurrent-streams` bounds the streams; but connections × streams × bytes is no
//! bound at all (1,024 × 100 × 256 KiB = 25 GiB). Issue 15's slow-loris held 2 GB this way.
//! So each request body takes its bytes from one process-wide semaphore as tonic reads them,
//! and gives them back when the body is dropped (the message decoded, or the stream reset or
//! timed out). A request that finds the budget empty is refused at once with
//! `RESOURCE_EXHAUSTED` rather than queued: waiting would let a few slow streams hold every
//! legitimate request behind them, and real RLS requests are a few hundred bytes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tonic::body::Body;
use tower::{Layer, Service};

/// Wraps every request body of a tonic server in a [`BudgetedBody`].
#[derive(Debug, Clone)]
pub struct BodyBudgetLayer {
    budget: Arc<Semaphore>,
}

impl BodyBudgetLayer {
    /// A budget of `max_bytes` (at most `Semaphore::MAX_PERMITS`).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            budget: Arc::new(Semaphore::new(max_bytes.min(Semaphore::MAX_PERMITS))),
        }
    }
}

impl<S> Layer<S> for BodyBudgetLayer {
    type Service = BodyBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyBudget {
            inner,
            budget: Arc::clone(&self.budget),
        }
    }
}

#[derive(Debug, Clone)]
pub struct BodyBudget<S> {
    inner: S,
    budget: Arc<Semaphore>,
}

impl<S> Service<http::Request<Body>> for BodyBudget<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let budget = Arc::clone(&self.budget);
        self.inner.call(request.map(|inner| {
            Body::new(BudgetedBody {
                inner,
                budget,
                held: None,
            })
        }))
    }
}

/// A request body that holds budget for every byte it has handed out.
struct BudgetedBody {
    inner: Body,
    budget: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
}

impl HttpBody for BudgetedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
            && !data.is_empty()
        {
            let taken = u32::try_from(data.len())
                .ok()
                .and_then(|n| Arc::clone(&self.budget).try_acquire_many_owned(n).ok());
            match (taken, self.held.as_mut()) {
                (Some(taken), Some(held)) => held.merge(taken),
                (Some(taken), None) => self.held = Some(taken),
                (None, _) => {
                    return Poll::Ready(Some(Err(Status::resource_exhausted(
                        "the server is buffering too many request bytes \
                         (--max-buffered-request-bytes); retry later",
                    ))));
                }
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
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn body(chunks: &[usize]) -> Body {
        let frames: Vec<Result<Frame<Bytes>, Status>> = chunks
            .iter()
            .map(|&n| Ok(Frame::data(Bytes::from(vec![0u8; n]))))
            .collect();
        Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
            frames,
        )))
    }

    fn budgeted(budget: &Arc<Semaphore>, chunks: &[usize]) -> BudgetedBody {
        BudgetedBody {
            inner: body(chunks),
            budget: Arc::clone(budget),
            held: None,
        }
    }

    #[tokio::test]
    async fn bytes_are_held_until_the_body_is_dropped_and_overflow_is_refused() {
        let budget = Arc::new(Semaphore::new(100));
        let mut first = budgeted(&budget, &[40, 40]);
        assert!(first.frame().await.is_some_and(|f| f.is_ok()));
        assert!(first.frame().await.is_some_and(|f| f.is_ok()));
        assert_eq!(budget.available_permits(), 20);

        let mut second = budgeted(&budget, &[30]);
        let status = second
            .frame()
            .await
            .and_then(Result::err)
            .expect("over the budget");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);

        drop(first);
        assert_eq!(budget.available_permits(), 100);
        let mut third = budgeted(&budget, &[30]);
        assert!(third.frame().await.is_some_and(|f| f.is_ok()));
    }
}
