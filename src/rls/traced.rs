//! The decision in its span, when tracing is on (the limiter holds a tracer only then).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use opentelemetry::context::FutureExt as _;
use tonic::Status;

use super::{Answer, Now, RateLimiter, Unfinished};
use crate::trace::{DecisionSpan, DecisionTracer, Path};

impl RateLimiter {
    /// The tracer of the decision spans; `None` while tracing is off.
    pub fn tracer(&self) -> Option<&DecisionTracer> {
        self.tracer.as_ref()
    }

    /// [`should_rate_limit`](Self::should_rate_limit) in `span`, which it ends: warm when
    /// decided at once, cold when something was awaited (in the span's context, so that the
    /// regional origin's calls are its children).
    pub async fn should_rate_limit_traced(
        &self,
        request: &RateLimitRequest,
        span: DecisionSpan,
    ) -> Result<Answer, Status> {
        span.request(request);
        let (answer, path) = match self.should_rate_limit_now(request) {
            Now::Answered(answer) => (answer, Path::Warm),
            Now::Later(unfinished) => {
                let cx = span.context().clone();
                let answer = self.finish(request, unfinished).with_context(cx).await;
                (answer, Path::Cold)
            }
        };
        end(span, path, &answer);
        answer
    }
}

impl RateLimiter {
    /// [`finish`](Self::finish) for a request without a decision span: while tracing is on,
    /// in a context that says it is not sampled, so that the spans of what it awaits (the
    /// regional origin's calls) are not sampled either.
    pub async fn finish_untraced(
        &self,
        request: &RateLimitRequest,
        unfinished: Unfinished,
    ) -> Result<Answer, Status> {
        match &self.tracer {
            None => self.finish(request, unfinished).await,
            Some(tracer) => {
                let cx = tracer.unsampled().clone();
                self.finish(request, unfinished).with_context(cx).await
            }
        }
    }
}

/// Ends `span` with what the request got.
pub(super) fn end(span: DecisionSpan, path: Path, answer: &Result<Answer, Status>) {
    match answer {
        Ok(answer) => {
            let metadata = answer.dynamic_metadata.as_deref();
            if let Some(rule) = super::limited_by::in_metadata(metadata) {
                span.limited_by(rule);
            }
            span.end(path, Ok(answer.overall_code));
        }
        Err(status) => span.end(path, Err((status.code(), status.message()))),
    }
}
