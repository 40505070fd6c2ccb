//! The decision's span: a child of the caller's trace (W3C `traceparent`, B3 single or
//! multi-header, with W3C baggage) read from the gRPC metadata or the `/json` request's
//! headers. Whether a request is sampled is decided first, on its headers alone
//! ([`super::sampling`]); only a sampled request builds its parent's context, its span and
//! their attributes. The spans of the calls the decision makes (Redis) are `tracing` spans
//! that take it as their parent (it is the current context while the decision is awaited);
//! under an unsampled request they run in a context that says so, and are not sampled either.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::propagation::BaggagePropagator;
use opentelemetry_sdk::trace::SdkTracer;

use super::sampling::{self, Decided, Format, HeadSampler, Parent};

const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");
const BAGGAGE: http::HeaderName = http::HeaderName::from_static("baggage");

/// What the decision span says beyond the defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanOptions {
    /// `--tracing-descriptor-values`.
    pub descriptor_values: bool,
}

/// Which route the request came by.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Grpc,
    Json,
}

/// How the decision was taken.
#[derive(Debug, Clone, Copy)]
pub enum Path {
    /// From memory, without waiting.
    Warm,
    /// Something was awaited (a cold cell read from the regional origin, several limits, a
    /// refund).
    Cold,
}

/// Starts decision spans (one per process, held by the limiter when tracing is on).
pub struct DecisionTracer {
    tracer: SdkTracer,
    head: HeadSampler,
    options: SpanOptions,
    /// What an unsampled request's awaited calls run in.
    unsampled: Context,
}

impl std::fmt::Debug for DecisionTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionTracer")
            .field("head", &self.head)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A request the sampling decision kept: the parent context of its span, built from its
/// headers; [`DecisionTracer::start`] starts the span in it.
pub struct Sampled {
    parent: Context,
}

impl DecisionTracer {
    /// `None` unless the tracing pipeline is running (`trace::start`).
    pub fn new(options: SpanOptions) -> Option<Self> {
        let (tracer, head) = super::tracer()?;
        Some(Self {
            tracer,
            head,
            options,
            unsampled: Context::new().with_value(Decided { sampled: false }),
        })
    }

    /// Whether this request is traced, from its headers alone: nothing is built for a request
    /// that is not. A sampled one's parent context is built here (its `tracestate` and
    /// baggage carried on), so that the headers need not be kept until its span starts.
    pub fn sample(&self, headers: &http::HeaderMap) -> Option<Sampled> {
        let parent = self.head.decide(sampling::caller(headers))?;
        Some(Sampled {
            parent: parent_context(parent, headers),
        })
    }

    /// The context an unsampled request's awaited calls run in: their spans are not sampled
    /// (without it, they would start traces of their own).
    pub fn unsampled(&self) -> &Context {
        &self.unsampled
    }

    /// Starts the span of a sampled request, as a child of its caller's span if any.
    pub fn start(&self, sampled: Sampled, route: Route) -> DecisionSpan {
        let parent = sampled.parent;
        let attributes = match route {
            Route::Grpc => vec![
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
                KeyValue::new("rpc.method", "ShouldRateLimit"),
            ],
            Route::Json => vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", "/json"),
            ],
        };
        let span = self
            .tracer
            .span_builder("should_rate_limit")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        DecisionSpan {
            cx: parent.with_span(span),
            descriptor_values: self.options.descriptor_values,
        }
    }
}

/// The decision span's parent context: the caller's span (remote, sampled: the decision is
/// taken), W3C baggage when sent, and the decision for the SDK's sampler.
fn parent_context(parent: Option<Parent>, headers: &http::HeaderMap) -> Context {
    let mut cx = Context::new();
    if headers.contains_key(&BAGGAGE) {
        cx = BaggagePropagator::new().extract_with_context(&cx, &Headers(headers));
    }
    if let Some(parent) = parent {
        // Only W3C's context has a trace state; one that does not parse is dropped.
        let state = match parent.format {
            Format::TraceContext => headers
                .get(&TRACESTATE)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<TraceState>().ok())
                .unwrap_or_default(),
            Format::B3 => TraceState::default(),
        };
        cx = cx.with_remote_span_context(SpanContext::new(
            TraceId::from(parent.trace_id),
            SpanId::from(parent.span_id),
            TraceFlags::SAMPLED,
            true,
            state,
        ));
    }
    cx.with_value(Decided { sampled: true })
}

/// One request's span, in its context (the parent of what the decision calls).
pub struct DecisionSpan {
    cx: Context,
    descriptor_values: bool,
}

impl DecisionSpan {
    /// The context to make current while the decision is awaited.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// The decoded request: its domain, its number of descriptors (and their entries, when
    /// asked for).
    pub fn request(&self, request: &RateLimitRequest) {
        let span = self.cx.span();
        if !span.is_recording() {
            return;
        }
        span.set_attribute(KeyValue::new("rls.domain", request.domain.clone()));
        let count = i64::try_from(request.descriptors.len()).unwrap_or(i64::MAX);
        span.set_attribute(KeyValue::new("rls.descriptors", count));
        if self.descriptor_values {
            let values: Vec<opentelemetry::StringValue> = request
                .descriptors
                .iter()
                .map(|descriptor| {
                    let entries: Vec<String> = descriptor
                        .entries
                        .iter()
                        .map(|entry| format!("{}={}", entry.key, entry.value))
                        .collect();
                    entries.join(",").into()
                })
                .collect();
            span.set_attribute(KeyValue::new(
                "rls.descriptor_entries",
                Value::Array(values.into()),
            ));
        }
    }

    /// The rule that refused the request (`rls.limited_by`).
    pub fn limited_by(&self, rule: &str) {
        let span = self.cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new("rls.limited_by", rule.to_owned()));
        }
    }

    /// Ends the span with the answer: the overall code and how it was decided, or the
    /// refusal's gRPC status.
    pub fn end(self, path: Path, answer: Result<Code, (tonic::Code, &str)>) {
        let span = self.cx.span();
        if span.is_recording() {
            let path = match path {
                Path::Warm => "warm",
                Path::Cold => "cold",
            };
            span.set_attribute(KeyValue::new("rls.decided", path));
            match answer {
                Ok(code) => {
                    span.set_attribute(KeyValue::new("rls.overall_code", code.as_str_name()));
                    span.set_attribute(KeyValue::new("rpc.grpc.status_code", 0_i64));
                }
                Err((code, message)) => {
                    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
                    span.set_status(Status::error(message.to_owned()));
                }
            }
        }
        span.end();
    }
}

/// Header lookups for the propagators (gRPC metadata is an HTTP/2 header map).
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
