//! Upstream's response-time histogram and request count, as its default statsd mapping
//! exports them, read at scrape time from our own request-duration series.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::telemetry::latency::DEFAULT_BUCKETS;

use super::*;

/// envoyproxy/ratelimit's `ratelimit_service_response_time_seconds{grpc_method}`: the
/// response time of its gRPC methods as its default statsd mapping exports it (a histogram
/// with the Prometheus client's default buckets, `grpc_method="ShouldRateLimit"`), read from
/// `rls_request_duration_seconds{method="should_rate_limit"}`. Upstream records whole
/// milliseconds (a sub-millisecond answer is 0); these are exact. With
/// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, the observations (buckets and sum) are in
/// milliseconds, as upstream's legacy mapping has them.
#[derive(Debug)]
pub(super) struct UpstreamResponseTime {
    pub(super) grpc: LatencyHistogram,
    pub(super) in_milliseconds: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GrpcMethodLabels {
    grpc_method: &'static str,
}

impl Collector for UpstreamResponseTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.grpc.snapshot();
        let scale = if self.in_milliseconds { 1_000.0 } else { 1.0 };
        let buckets = snapshot.rebucketed(&DEFAULT_BUCKETS, scale);
        let labels = GrpcMethodLabels {
            grpc_method: "ShouldRateLimit",
        };
        let mut family = encoder.encode_descriptor(
            "ratelimit_service_response_time_seconds",
            "ShouldRateLimit response time (upstream's ratelimit_server.*.response_time)",
            None,
            MetricType::Histogram,
        )?;
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(
                snapshot.sum_seconds * scale,
                snapshot.count,
                &buckets,
                None,
            )?;
        // Upstream's request counter, named as its mapping names it (no `_total`: a gauge,
        // as `upstream_stats` exports upstream's counters).
        let mut family = encoder.encode_descriptor(
            "ratelimit_service_total_requests",
            "ShouldRateLimit calls answered (upstream's ratelimit_server.*.total_requests)",
            None,
            MetricType::Gauge,
        )?;
        family
            .encode_family(&labels)?
            .encode_gauge(&snapshot.count)?;
        Ok(())
    }
}
