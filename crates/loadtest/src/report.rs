//! The one JSON line a load run prints.

use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Report {
    pub target: String,
    /// `closed` (each worker waits for its answer) or `open` (sent on a fixed schedule).
    pub mode: &'static str,
    pub connections: usize,
    pub concurrency: usize,
    /// The open-loop rate asked for (requests/s); `null` in closed loop.
    pub rate: Option<u64>,
    pub key_space: u64,
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p99_9_us: u64,
    pub max_us: u64,
    pub ok: u64,
    pub over_limit: u64,
    pub errors: u64,
    /// When each error answered (ms since the Unix epoch), the first 10,000.
    pub error_times_ms: Vec<u64>,
    /// With --ok-spans: when each OK answer's request was sent and when it was answered
    /// (ms since the Unix epoch), the first 10,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok_spans_ms: Option<Vec<[u64; 2]>>,
}

/// Latency percentiles in microseconds.
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        Self {
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p99_9: histogram.value_at_quantile(0.999),
            max: histogram.max(),
        }
    }
}
