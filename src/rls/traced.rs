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
        match self.should_rate_limit_now_traced(request, span) {
            NowTraced::Answered(answer) => answer,
            NowTraced::Later(unfinished, span) => {
                self.finish_traced(request, unfinished, span).await
            }
        }
    }

    /// [`should_rate_limit_now`](Self::should_rate_limit_now) in `span`: ended (warm) when
    /// decided at once; otherwise handed back with what is left.
    pub fn should_rate_limit_now_traced(
        &self,
        request: &RateLimitRequest,
        span: DecisionSpan,
    ) -> NowTraced {
        span.request(request);
        match self.should_rate_limit_now(request) {
            Now::Answered(answer) => {
                end(span, Path::Warm, &answer);
                NowTraced::Answered(answer)
            }
            Now::Later(unfinished) => NowTraced::Later(unfinished, span),
        }
    }

    /// [`finish`](Self::finish) in `span`'s context, then ends it (cold).
    pub async fn finish_traced(
        &self,
        request: &RateLimitRequest,
        unfinished: Unfinished,
        span: DecisionSpan,
    ) -> Result<Answer, Status> {
        let cx = span.context().clone();
        let answer = self.finish(request, unfinished).with_context(cx).await;
        end(span, Path::Cold, &answer);
        answer
    }
}

/// [`RateLimiter::should_rate_limit_now_traced`]'s outcome.
#[allow(
    clippy::large_enum_variant,
    reason = "the answer is the common case: boxing it would allocate per request"
)]
pub enum NowTraced {
    /// Decided, the span ended.
    Answered(Result<Answer, Status>),
    /// To finish in the span ([`RateLimiter::finish_traced`]).
    Later(Unfinished, DecisionSpan),
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
