//! A latency histogram that threads observe without a lock or a shared cache line.
//!
//! `prometheus_client`'s `Histogram` takes a mutex on every observation: at the service's
//! request rate every core would queue on it (and write its cache line) once per request.
//! Here each bucket, and the sum, is a [`ShardedCount`] (a per-thread slot, summed at scrape
//! time), so an observation is a bucket search over fixed bounds and two per-thread adds.
//! The sum is kept in whole nanoseconds (an integer count can be sharded, a float cannot).
//!
//! The bounds run from 5 µs to 10 s and include both the Prometheus client's default
//! buckets (5 ms .. 10 s) and the same bounds divided by 1,000: envoyproxy/ratelimit's
//! `ratelimit_service_response_time_seconds` is re-bucketed from these counts exactly, in
//! seconds or, with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, in milliseconds.

use std::time::Duration;

use gcounter_engine::sharded::ShardedCount;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upper bounds in nanoseconds, ascending; a last bucket (+Inf) takes the rest.
const BOUNDS_NS: [u64; 20] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The Prometheus client's default buckets (Go's `prometheus.DefBuckets`), in seconds: the
/// buckets upstream's statsd mapping gives its response time.
pub(super) const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A duration histogram; clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct LatencyHistogram {
    /// Non-cumulative: `buckets[i]` counts observations in `(BOUNDS_NS[i-1], BOUNDS_NS[i]]`,
    /// the last one those above every bound.
    buckets: std::sync::Arc<[ShardedCount; BOUNDS_NS.len() + 1]>,
    sum_ns: ShardedCount,
}

/// What a scrape reads: cumulative counts per bound, the count and the sum.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Snapshot {
    /// `(bound in seconds, observations at or below it)`, ascending, without +Inf.
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    #[inline]
    pub fn observe(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // Most requests take tens of microseconds: a forward scan stops within a few bounds.
        let index = BOUNDS_NS
            .iter()
            .position(|&bound| ns <= bound)
            .unwrap_or(BOUNDS_NS.len());
        if let Some(bucket) = self.buckets.get(index) {
            bucket.inc();
        }
        self.sum_ns.add(ns);
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let mut cumulative = Vec::with_capacity(BOUNDS_NS.len());
        let mut running = 0u64;
        for (bound, bucket) in BOUNDS_NS.iter().zip(self.buckets.iter()) {
            running = running.wrapping_add(bucket.get());
            cumulative.push((*bound as f64 / 1e9, running));
        }
        let count = running.wrapping_add(self.buckets.last().map_or(0, ShardedCount::get));
        Snapshot {
            cumulative,
            count,
            sum_seconds: self.sum_ns.get() as f64 / 1e9,
        }
    }
}

impl Snapshot {
    /// Non-cumulative `(bound, count)` pairs over `bounds` (seconds, ascending, each one of
    /// this histogram's bounds) and +Inf, scaled by `scale` (1 for seconds, 1,000 for
    /// milliseconds): what `encode_histogram` takes. The count at or below `bound / scale`
    /// seconds is read from this histogram's bounds, so re-bucketing is exact.
    pub(super) fn rebucketed(&self, bounds: &[f64], scale: f64) -> Vec<(f64, u64)> {
        let at_or_below = |seconds: f64| -> u64 {
            self.cumulative
                .iter()
                .take_while(|(bound, _)| *bound <= seconds * (1.0 + 1e-9))
                .last()
                .map_or(0, |(_, count)| *count)
        };
        let mut out = Vec::with_capacity(bounds.len() + 1);
        let mut below = 0u64;
        for bound in bounds {
            let cumulative = at_or_below(bound / scale);
            out.push((*bound, cumulative.saturating_sub(below)));
            below = cumulative;
        }
        out.push((f64::INFINITY, self.count.saturating_sub(below)));
        out
    }

    /// This histogram's own buckets, non-cumulative, with +Inf.
    fn own_buckets(&self) -> Vec<(f64, u64)> {
        let mut out = Vec::with_capacity(self.cumulative.len() + 1);
        let mut below = 0u64;
        for (bound, cumulative) in &self.cumulative {
            out.push((*bound, cumulative.saturating_sub(below)));
            below = *cumulative;
        }
        out.push((f64::INFINITY, self.count.saturating_sub(below)));
        out
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(
            snapshot.sum_seconds,
            snapshot.count,
            &snapshot.own_buckets(),
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests;
