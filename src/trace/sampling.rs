//! The sampling decision, taken on the request's headers before anything is built: an
//! unsampled request (at 1 %, nearly every one) costs a few header lookups and a branch, and
//! goes the way it goes with tracing off. Only a sampled request builds a context, a span and
//! its attributes (`super::decision`).
//!
//! Parent-based: a caller that sent a trace context and decided (W3C `traceparent`'s sampled
//! flag; B3's `x-b3-sampled`, `x-b3-flags` or the single `b3` header's sampling state) is
//! followed; a request with no usable context, or whose B3 context defers the decision, is
//! sampled at `--tracing-sampling-rate` (head sampling). B3 wins over `traceparent` when both
//! are valid, as upstream's propagators read them.
//!
//! Malformed headers are ignored as the specifications say (the trace then starts here).
//! Where this differs from upstream (OpenTelemetry Go's B3 propagator) it follows the B3
//! specification: a deferred decision (`{trace}-{span}` with no state, or the multi headers
//! without `x-b3-sampled`) is taken here at the rate rather than never sampled, and a lone
//! sampling state (`b3: 0`, `x-b3-sampled: 1` without ids) is honoured for a trace that
//! starts here rather than ignored.

use http::HeaderMap;
use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};

/// Which header a parent came in: only W3C's has a `tracestate` to carry on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    TraceContext,
    B3,
}

/// The caller's span: the decision span's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// Never zero (a zero id is malformed).
    pub trace_id: u128,
    /// Never zero.
    pub span_id: u64,
    pub format: Format,
}

/// What the caller's headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The caller decided; `parent` is `None` for a lone B3 sampling state.
    Decided {
        sampled: bool,
        parent: Option<Parent>,
    },
    /// The decision is left to this service: no usable context, or a B3 deferred one.
    Undecided(Option<Parent>),
}

/// Reads the caller's trace context: B3 (the single header, then the multi headers), then
/// `traceparent`. A header that is not visible ASCII or not well formed counts as absent; of a
/// header sent twice, the first is read.
pub fn caller(headers: &HeaderMap) -> Caller {
    let found = Found::in_headers(headers);
    if let Some(caller) = found.b3.and_then(b3_single) {
        return caller;
    }
    if let Some(caller) = b3_multi(&found) {
        return caller;
    }
    match found.traceparent.and_then(traceparent) {
        Some((parent, sampled)) => Caller::Decided {
            sampled,
            parent: Some(parent),
        },
        None => Caller::Undecided(None),
    }
}

/// The trace headers of a request, found in one pass over its headers: cheaper than a
/// hashed lookup of each of the seven names, nearly all of which a request does not have.
#[derive(Default)]
struct Found<'a> {
    traceparent: Option<&'a str>,
    b3: Option<&'a str>,
    trace_id: Option<&'a str>,
    span_id: Option<&'a str>,
    parent_span_id: Option<&'a str>,
    sampled: Option<&'a str>,
    flags: Option<&'a str>,
}

impl<'a> Found<'a> {
    fn in_headers(headers: &'a HeaderMap) -> Self {
        let mut found = Found::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                "traceparent" => &mut found.traceparent,
                "b3" => &mut found.b3,
                "x-b3-traceid" => &mut found.trace_id,
                "x-b3-spanid" => &mut found.span_id,
                "x-b3-parentspanid" => &mut found.parent_span_id,
                "x-b3-sampled" => &mut found.sampled,
                "x-b3-flags" => &mut found.flags,
                _ => continue,
            };
            if slot.is_none() {
                // Not visible ASCII: as if absent (`Some("")` is malformed in every field).
                *slot = Some(value.to_str().unwrap_or(""));
            }
        }
        found
    }
}

/// Head sampling at `--tracing-sampling-rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSampler {
    /// A 63-bit draw below this is sampled; `None`: every one is (a rate of 1).
    bound: Option<u64>,
}

impl HeadSampler {
    /// `rate` in [0, 1] (checked where it is read); outside, the nearest end.
    pub fn new(rate: f64) -> Self {
        let bound = if rate >= 1.0 {
            None
        } else {
            // As OpenTelemetry's `TraceIdRatioBased`: a share of 2⁶³.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "the product is in [0, 2⁶³); a rate so close to 1 that it rounds up is 1"
            )]
            Some((rate.max(0.0) * (1_u64 << 63) as f64) as u64)
        };
        Self { bound }
    }

    /// The decision for this request: `Some` (with the parent, if any) when it is sampled.
    pub fn decide(&self, caller: Caller) -> Option<Option<Parent>> {
        match caller {
            Caller::Decided { sampled, parent } => sampled.then_some(parent),
            // A deferred parent's trace is sampled by its id, as every service that samples
            // by ratio decides it: the same trace is kept or dropped alike everywhere.
            Caller::Undecided(Some(parent)) => {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "the trace id's low 64 bits, as `TraceIdRatioBased` takes them"
                )]
                let low = parent.trace_id as u64;
                self.keeps(low >> 1).then_some(Some(parent))
            }
            Caller::Undecided(None) => self.keeps(fastrand::u64(..) >> 1).then_some(None),
        }
    }

    fn keeps(&self, draw: u64) -> bool {
        self.bound.is_none_or(|bound| draw < bound)
    }
}

/// `b3: {trace}-{span}[-{state}[-{parent}]]`, or `b3: {state}` alone.
fn b3_single(value: &str) -> Option<Caller> {
    let mut parts = value.trim().split('-');
    let first = parts.next()?;
    let Some(span) = parts.next() else {
        let sampled = match first {
            "0" => false,
            "1" | "d" => true,
            _ => return None,
        };
        return Some(Caller::Decided {
            sampled,
            parent: None,
        });
    };
    let parent = Parent {
        trace_id: b3_trace_id(first)?,
        span_id: span_id(span)?,
        format: Format::B3,
    };
    let state = parts.next();
    if let Some(grandparent) = parts.next() {
        span_id(grandparent)?;
    }
    if parts.next().is_some() {
        return None;
    }
    let sampled = match state {
        None => return Some(Caller::Undecided(Some(parent))),
        Some("0") => false,
        // Debug implies sampled.
        Some("1" | "d") => true,
        Some(_) => return None,
    };
    Some(Caller::Decided {
        sampled,
        parent: Some(parent),
    })
}

/// `x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags` (and `x-b3-parentspanid`,
/// checked when sent); the sampling headers alone are a lone sampling state.
fn b3_multi(found: &Found<'_>) -> Option<Caller> {
    // Debug (`x-b3-flags: 1`) implies sampled, whatever `x-b3-sampled` says.
    let state = match found.flags {
        Some("1") => Some(true),
        _ => match found.sampled {
            None => None,
            Some("1" | "true") => Some(true),
            Some("0" | "false") => Some(false),
            Some(_) => return None,
        },
    };
    let (Some(trace), Some(span)) = (found.trace_id, found.span_id) else {
        if found.trace_id.is_some() || found.span_id.is_some() {
            return None;
        }
        return state.map(|sampled| Caller::Decided {
            sampled,
            parent: None,
        });
    };
    let parent = Parent {
        trace_id: b3_trace_id(trace)?,
        span_id: span_id(span)?,
        format: Format::B3,
    };
    if let Some(grandparent) = found.parent_span_id {
        span_id(grandparent)?;
    }
    Some(match state {
        Some(sampled) => Caller::Decided {
            sampled,
            parent: Some(parent),
        },
        None => Caller::Undecided(Some(parent)),
    })
}

/// `{version}-{trace}-{span}-{flags}` (W3C Trace Context): version `00` exactly so; a later
/// version may append `-...`, which is not read.
fn traceparent(value: &str) -> Option<(Parent, bool)> {
    let value = value.trim();
    let (head, rest) = (value.get(..55)?, value.get(55..)?);
    let mut parts = head.split('-');
    let version = lower_hex(parts.next()?, 2)?;
    if version == 0xff
        || (version == 0 && !rest.is_empty())
        || !(rest.is_empty() || rest.starts_with('-'))
    {
        return None;
    }
    let trace_id = nonzero(lower_hex(parts.next()?, 32)?)?;
    let span_id = u64::try_from(nonzero(lower_hex(parts.next()?, 16)?)?).ok()?;
    let flags = lower_hex(parts.next()?, 2)?;
    let parent = Parent {
        trace_id,
        span_id,
        format: Format::TraceContext,
    };
    Some((parent, flags & 1 == 1))
}

/// A B3 trace id: 16 or 32 lowercase hex digits (a 64-bit one is the low half), not zero.
fn b3_trace_id(text: &str) -> Option<u128> {
    match text.len() {
        16 | 32 => nonzero(lower_hex(text, text.len())?),
        _ => None,
    }
}

/// 16 lowercase hex digits, not zero.
fn span_id(text: &str) -> Option<u64> {
    u64::try_from(nonzero(lower_hex(text, 16)?)?).ok()
}

fn nonzero(value: u128) -> Option<u128> {
    (value != 0).then_some(value)
}

/// Exactly `digits` lowercase hex digits (both specifications refuse upper case).
fn lower_hex(text: &str, digits: usize) -> Option<u128> {
    if text.len() != digits || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests;

/// The decision taken here, carried in the OpenTelemetry context of the decision span (and so
/// of every span under it): the SDK's sampler ([`DecisionSampler`]) follows it.
#[derive(Debug, Clone, Copy)]
pub struct Decided {
    pub sampled: bool,
}

/// The SDK's sampler: a span whose context carries [`Decided`] (the decision span, the spans
/// of the calls its decision makes) is sampled as decided; any other (a replay, a flush, a
/// sync: traces of their own) by `inner`, parent-based at the rate.
#[derive(Debug, Clone)]
pub struct DecisionSampler {
    inner: Sampler,
}

impl DecisionSampler {
    pub fn new(rate: f64) -> Self {
        Self {
            inner: Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(rate))),
        }
    }
}

impl ShouldSample for DecisionSampler {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let Some(decided) = parent.and_then(Context::get::<Decided>) else {
            return self
                .inner
                .should_sample(parent, trace_id, name, span_kind, attributes, links);
        };
        SamplingResult {
            decision: if decided.sampled {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            // As the SDK's samplers: the parent's trace state, carried on.
            trace_state: parent.map_or_else(TraceState::default, |cx| {
                cx.span().span_context().trace_state().clone()
            }),
        }
    }
}
