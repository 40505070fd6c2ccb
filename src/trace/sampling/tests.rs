use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};

use super::{Caller, Decided, DecisionSampler, Format, HeadSampler, Parent, caller};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_ID: u128 = 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736;
const SPAN: &str = "00f067aa0ba902b7";
const SPAN_ID: u64 = 0x00f0_67aa_0ba9_02b7;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).expect("header value"),
        );
    }
    map
}

fn read(pairs: &[(&'static str, &str)]) -> Caller {
    caller(&headers(pairs))
}

fn parent(format: Format) -> Option<Parent> {
    Some(Parent {
        trace_id: TRACE_ID,
        span_id: SPAN_ID,
        format,
    })
}

fn decided(sampled: bool, parent: Option<Parent>) -> Caller {
    Caller::Decided { sampled, parent }
}

#[test]
fn traceparent_sampled_unsampled_and_absent() {
    let sampled = format!("00-{TRACE}-{SPAN}-01");
    assert_eq!(
        read(&[("traceparent", &sampled)]),
        decided(true, parent(Format::TraceContext))
    );
    let unsampled = format!("00-{TRACE}-{SPAN}-00");
    assert_eq!(
        read(&[("traceparent", &unsampled)]),
        decided(false, parent(Format::TraceContext))
    );
    // Only the sampled bit is read; the others (W3C level 2's random flag) change nothing.
    let random_unsampled = format!("00-{TRACE}-{SPAN}-02");
    assert_eq!(
        read(&[("traceparent", &random_unsampled)]),
        decided(false, parent(Format::TraceContext))
    );
    let random_sampled = format!("00-{TRACE}-{SPAN}-03");
    assert_eq!(
        read(&[("traceparent", &random_sampled)]),
        decided(true, parent(Format::TraceContext))
    );
    assert_eq!(read(&[]), Caller::Undecided(None));
    // Headers that are not trace headers change nothing.
    assert_eq!(
        read(&[("content-type", "application/grpc"), ("x-b3", "1")]),
        Caller::Undecided(None)
    );
    // A later version may append fields; they are not read.
    let later = format!("01-{TRACE}-{SPAN}-01-whatever");
    assert_eq!(
        read(&[("traceparent", &later)]),
        decided(true, parent(Format::TraceContext))
    );
}

#[test]
fn a_malformed_traceparent_is_ignored_and_the_trace_starts_here() {
    let zero_trace = "0".repeat(32);
    let zero_span = "0".repeat(16);
    for malformed in [
        String::new(),
        "garbage".to_owned(),
        format!("00-{TRACE}-{SPAN}"),
        format!("00-{TRACE}-{SPAN}-1"),
        format!("00-{TRACE}-{SPAN}-01-extra"),
        format!("ff-{TRACE}-{SPAN}-01"),
        format!("0-{TRACE}-{SPAN}-01"),
        format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
        format!("00-{TRACE}-{}-01", SPAN.to_uppercase()),
        format!("00-{zero_trace}-{SPAN}-01"),
        format!("00-{TRACE}-{zero_span}-01"),
        format!("00-{}-{SPAN}-01", &TRACE[..16]),
        format!("00-{TRACE}-{SPAN}-0g"),
        format!("00_{TRACE}_{SPAN}_01"),
        format!("01-{TRACE}-{SPAN}-01x"),
        format!("00-{TRACE}-{SPAN}-01").replace('-', "+"),
    ] {
        assert_eq!(
            read(&[("traceparent", &malformed)]),
            Caller::Undecided(None),
            "{malformed:?}"
        );
    }
    // Not visible ASCII.
    let mut map = HeaderMap::new();
    map.insert(
        "traceparent",
        HeaderValue::from_bytes(b"00-\xff").expect("opaque bytes"),
    );
    assert_eq!(caller(&map), Caller::Undecided(None));
}

#[test]
fn b3_single_header() {
    let with = |state: &str| format!("{TRACE}-{SPAN}{state}");
    assert_eq!(
        read(&[("b3", &with("-1"))]),
        decided(true, parent(Format::B3))
    );
    assert_eq!(
        read(&[("b3", &with("-0"))]),
        decided(false, parent(Format::B3))
    );
    // Debug implies sampled.
    assert_eq!(
        read(&[("b3", &with("-d"))]),
        decided(true, parent(Format::B3))
    );
    // The parent's parent is checked, not used.
    assert_eq!(
        read(&[("b3", &with("-1-00000000000000cd"))]),
        decided(true, parent(Format::B3))
    );
    // Deferred: no state.
    assert_eq!(
        read(&[("b3", &with(""))]),
        Caller::Undecided(parent(Format::B3))
    );
    // A 64-bit trace id is the low half.
    assert_eq!(
        read(&[("b3", &format!("a3ce929d0e0e4736-{SPAN}-1"))]),
        decided(
            true,
            Some(Parent {
                trace_id: 0xa3ce_929d_0e0e_4736,
                span_id: SPAN_ID,
                format: Format::B3,
            })
        )
    );
    // A lone sampling state.
    assert_eq!(read(&[("b3", "0")]), decided(false, None));
    assert_eq!(read(&[("b3", "1")]), decided(true, None));
    assert_eq!(read(&[("b3", "d")]), decided(true, None));
    for malformed in [
        String::new(),
        "2".to_owned(),
        "true".to_owned(),
        TRACE.to_owned(),
        with("-x"),
        with("-1-zz"),
        with("-1-00000000000000cd-extra"),
        format!("{}-{SPAN}-1", TRACE.to_uppercase()),
        format!("{TRACE}-{}-1", "0".repeat(16)),
        format!("{}-{SPAN}-1", "0".repeat(32)),
        format!("{}-{SPAN}-1", &TRACE[..20]),
    ] {
        assert_eq!(
            read(&[("b3", &malformed)]),
            Caller::Undecided(None),
            "{malformed:?}"
        );
    }
}

#[test]
fn b3_multi_headers() {
    let ids = [("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN)];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut all = ids.to_vec();
        all.extend_from_slice(more);
        read(&all)
    };
    assert_eq!(
        with(&[("x-b3-sampled", "1")]),
        decided(true, parent(Format::B3))
    );
    assert_eq!(
        with(&[("x-b3-sampled", "true")]),
        decided(true, parent(Format::B3))
    );
    assert_eq!(
        with(&[("x-b3-sampled", "0")]),
        decided(false, parent(Format::B3))
    );
    assert_eq!(
        with(&[("x-b3-sampled", "false")]),
        decided(false, parent(Format::B3))
    );
    // Debug implies sampled, whatever `x-b3-sampled` says.
    assert_eq!(
        with(&[("x-b3-flags", "1"), ("x-b3-sampled", "0")]),
        decided(true, parent(Format::B3))
    );
    assert_eq!(
        with(&[
            ("x-b3-sampled", "1"),
            ("x-b3-parentspanid", "00000000000000cd")
        ]),
        decided(true, parent(Format::B3))
    );
    // Deferred.
    assert_eq!(with(&[]), Caller::Undecided(parent(Format::B3)));
    // The sampling headers alone.
    assert_eq!(read(&[("x-b3-sampled", "0")]), decided(false, None));
    assert_eq!(read(&[("x-b3-sampled", "1")]), decided(true, None));
    assert_eq!(read(&[("x-b3-flags", "1")]), decided(true, None));
    // Malformed: ignored.
    assert_eq!(with(&[("x-b3-sampled", "yes")]), Caller::Undecided(None));
    assert_eq!(
        with(&[("x-b3-sampled", "1"), ("x-b3-parentspanid", "cd")]),
        Caller::Undecided(None)
    );
    assert_eq!(
        read(&[("x-b3-traceid", TRACE), ("x-b3-sampled", "1")]),
        Caller::Undecided(None)
    );
    assert_eq!(
        read(&[
            ("x-b3-traceid", "abc"),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "1")
        ]),
        Caller::Undecided(None)
    );
}

#[test]
fn b3_wins_over_traceparent_and_the_single_header_over_the_multi_headers() {
    let other_span = "1111111111111111";
    let traceparent = format!("00-{TRACE}-{other_span}-01");
    let b3 = format!("{TRACE}-{SPAN}-0");
    assert_eq!(
        read(&[("traceparent", &traceparent), ("b3", &b3)]),
        decided(false, parent(Format::B3))
    );
    assert_eq!(
        read(&[
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", other_span),
            ("x-b3-sampled", "1"),
            ("b3", &b3),
        ]),
        decided(false, parent(Format::B3))
    );
    // A malformed B3 header leaves `traceparent` to decide.
    assert_eq!(
        read(&[("traceparent", &traceparent), ("b3", "garbage")]),
        decided(
            true,
            Some(Parent {
                trace_id: TRACE_ID,
                span_id: 0x1111_1111_1111_1111,
                format: Format::TraceContext,
            })
        )
    );
}

#[test]
fn the_callers_decision_wins_over_the_rate() {
    for rate in [0.0, 0.01, 1.0] {
        let head = HeadSampler::new(rate);
        assert_eq!(
            head.decide(decided(true, parent(Format::TraceContext))),
            Some(parent(Format::TraceContext)),
            "{rate}"
        );
        assert_eq!(head.decide(decided(true, None)), Some(None), "{rate}");
        assert_eq!(
            head.decide(decided(false, parent(Format::B3))),
            None,
            "{rate}"
        );
        assert_eq!(head.decide(decided(false, None)), None, "{rate}");
    }
}

#[test]
fn traces_that_start_here_are_sampled_at_the_rate() {
    let kept = |rate: f64| {
        let head = HeadSampler::new(rate);
        (0..10_000)
            .filter(|_| head.decide(Caller::Undecided(None)).is_some())
            .count()
    };
    assert_eq!(kept(0.0), 0);
    assert_eq!(kept(1.0), 10_000);
    // 2,500 expected; the standard deviation is 43.
    let quarter = kept(0.25);
    assert!(
        (2_200..=2_800).contains(&quarter),
        "{quarter} of 10,000 at 0.25"
    );
}

/// A deferred B3 parent is sampled by its trace id, as OpenTelemetry's ratio sampler
/// decides it: the low 64 bits, halved, against the rate's share of 2⁶³.
#[test]
fn a_deferred_parent_is_sampled_by_its_trace_id() {
    let deferred = |low: u64| {
        Caller::Undecided(Some(Parent {
            trace_id: (0xffff_u128 << 64) | u128::from(low),
            span_id: 1,
            format: Format::B3,
        }))
    };
    let half = HeadSampler::new(0.5);
    assert!(half.decide(deferred(0)).is_some());
    assert!(half.decide(deferred((1 << 63) - 1)).is_some());
    assert!(half.decide(deferred(1 << 63)).is_none());
    assert!(half.decide(deferred(u64::MAX)).is_none());
    assert!(HeadSampler::new(0.0).decide(deferred(0)).is_none());
    assert!(HeadSampler::new(1.0).decide(deferred(u64::MAX)).is_some());
}

/// The SDK's sampler follows the decision carried in the context, and the rate (parent-based)
/// for spans outside a request.
#[test]
fn the_sdk_sampler_follows_the_decision_in_the_context() {
    let sampler = DecisionSampler::new(0.0);
    let decide = |cx: Option<&Context>| {
        sampler
            .should_sample(
                cx,
                TraceId::from(1_u128),
                "span",
                &SpanKind::Internal,
                &[],
                &[],
            )
            .decision
    };
    let kept = Context::new().with_value(Decided { sampled: true });
    assert_eq!(decide(Some(&kept)), SamplingDecision::RecordAndSample);
    let dropped = Context::new().with_value(Decided { sampled: false });
    assert_eq!(decide(Some(&dropped)), SamplingDecision::Drop);
    // No decision: the rate (0 here), or a parent's flag.
    assert_eq!(decide(None), SamplingDecision::Drop);
    assert_eq!(decide(Some(&Context::new())), SamplingDecision::Drop);
    let sampled_parent = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(1_u128),
        SpanId::from(1_u64),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ));
    assert_eq!(
        decide(Some(&sampled_parent)),
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        DecisionSampler::new(1.0)
            .should_sample(
                None,
                TraceId::from(1_u128),
                "span",
                &SpanKind::Internal,
                &[],
                &[]
            )
            .decision,
        SamplingDecision::RecordAndSample
    );
}
