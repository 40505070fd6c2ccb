//! The RLQS service's series (`rls_rlqs_*`): streams and buckets open now, usage reports by
//! what became of them, assignments by strategy, streams ended for the client's errors. Every
//! label is one of a fixed set: no bucket id or domain reaches a label, so no client can grow
//! the exposition.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::register::series_set;

/// What became of one bucket's usage in a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(
    non_camel_case_types,
    reason = "Prometheus label values are snake_case"
)]
pub enum UsageOutcome {
    /// Its allowed requests were counted on the bucket's counter.
    counted,
    /// No rule counts it (unmatched, unlimited, an unknown domain): answered, not counted.
    not_counted,
    /// Refused: absurd counts or elapsed time; the bucket is not touched.
    ignored,
    /// Past `--rlqs-max-buckets` or `--rlqs-max-buckets-per-stream`: counted, not assigned.
    over_capacity,
}

/// The strategy of an assignment sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(
    non_camel_case_types,
    reason = "Prometheus label values are snake_case"
)]
pub enum AssignmentKind {
    token_bucket,
    allow_all,
    deny_all,
    /// A bucket no longer reported: Envoy drops it.
    abandon,
    /// On shutdown: an assignment that expires at once.
    expire,
}

/// Why a stream was ended with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(
    non_camel_case_types,
    reason = "Prometheus label values are snake_case"
)]
pub enum StreamError {
    /// A report broke a rule, or its bytes are not a report.
    invalid_argument,
    too_many_streams,
    too_many_reports,
    /// A report over `--max-request-bytes`, or the request-bytes budget spent.
    request_bytes,
    /// A report not whole within `--request-timeout` of its first bytes.
    message_deadline,
    /// The client read no response for `--rlqs-abandon-after`.
    stalled,
    /// The connection or the stream failed (a reset, a closed connection).
    transport,
}

impl Default for QuotaMetrics {
    fn default() -> Self {
        Self {
            // 10 µs .. ~5 s
            report_duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 20)),
            streams: Gauge::default(),
            buckets: Gauge::default(),
            usages: Family::default(),
            assignments: Family::default(),
            stream_errors: Family::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: UsageOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StrategyLabels {
    strategy: AssignmentKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: StreamError,
}

series_set! {
    /// The RLQS series, registered once with the rest of the registry.
    #[derive(Debug, Clone)]
    pub struct QuotaMetrics {
        /// From a report's arrival to its answer being queued: counting every usage, the shares.
        report_duration: Histogram => "rlqs_report_duration_seconds",
            "Time to handle one RLQS report message (every usage counted, the shares computed)";
        streams: Gauge => "rlqs_streams",
            "RLQS streams (StreamRateLimitQuotas) open now";
        buckets: Gauge => "rlqs_buckets",
            "Quota buckets the open RLQS streams report, all streams together";
        usages: Family<OutcomeLabels, Counter> => "rlqs_usages",
            "Bucket usages received in RLQS reports, by what became of them";
        assignments: Family<StrategyLabels, Counter> => "rlqs_assignments",
            "Bucket actions sent on RLQS streams, by strategy";
        stream_errors: Family<ReasonLabels, Counter> => "rlqs_stream_errors",
            "RLQS streams ended with an error status, by reason";
    }
}

impl QuotaMetrics {
    pub fn report_handled(&self, took: std::time::Duration) {
        self.report_duration.observe(took.as_secs_f64());
    }

    pub fn stream_opened(&self) {
        self.streams.inc();
    }

    pub fn stream_closed(&self) {
        self.streams.dec();
    }

    /// `delta` buckets more (or fewer) reported by the open streams.
    pub fn buckets_changed(&self, delta: i64) {
        self.buckets.inc_by(delta);
    }

    pub fn usage(&self, outcome: UsageOutcome) {
        self.usages.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn assignment(&self, strategy: AssignmentKind) {
        self.assignments
            .get_or_create(&StrategyLabels { strategy })
            .inc();
    }

    pub fn stream_error(&self, reason: StreamError) {
        self.stream_errors
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}
