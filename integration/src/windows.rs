//! Admitted requests per fixed window, in the window the service decided them in.

use std::collections::BTreeMap;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use super::grpc;
use super::load::Sent;

/// A load over `full` whole windows of `window_ms` after the current one: the sequence of
/// the first whole window, and how long to run from now (to 300 ms past the last one).
pub fn full_windows_from_now(window_ms: u64, full: u64) -> (u64, Duration) {
    let start_ms = super::now_ms();
    let first_full = start_ms / window_ms + 1;
    let end_ms = (first_full + full) * window_ms + 300;
    (first_full, Duration::from_millis(end_ms - start_ms))
}

/// Per window sequence: requests answered, and requests admitted per source (process or
/// region).
pub struct WindowTally {
    window_ms: u64,
    sources: usize,
    windows: BTreeMap<u64, (u64, Vec<u64>)>,
}

impl WindowTally {
    pub fn new(window_ms: u64, sources: usize) -> Self {
        Self {
            window_ms,
            sources,
            windows: BTreeMap::new(),
        }
    }

    /// Count one answer of `source`. Returns the window the service decided it in — for an
    /// admitted request, its window ends at the middle of the call plus
    /// `duration_until_reset`, give or take half the latency; a denied one's
    /// `duration_until_reset` is when it would pass (maybe a later window), so it goes by the
    /// middle of the call — or `None` for a gRPC error.
    pub fn record(&mut self, source: usize, sent: &Sent) -> Option<u64> {
        let status = sent.first_status()?;
        let mid_ms = (sent.sent_ms + sent.received_ms) / 2;
        let sequence = if status.code == Code::Ok as i32 {
            let reset_ms = grpc::duration_ms(status.duration_until_reset.as_ref()) as u64;
            (mid_ms + reset_ms + self.window_ms / 2) / self.window_ms - 1
        } else {
            mid_ms / self.window_ms
        };
        let entry = self
            .windows
            .entry(sequence)
            .or_insert_with(|| (0, vec![0; self.sources]));
        entry.0 += 1;
        if status.code == Code::Ok as i32 {
            entry.1[source] += 1;
        }
        Some(sequence)
    }

    /// Print every window; return a message for each `full` window whose admitted/limit is
    /// outside `bounds` or that no request was decided in.
    pub fn check(&self, full: Range<u64>, limit: u64, bounds: RangeInclusive<f64>) -> Vec<String> {
        let mut failures = Vec::new();
        for (sequence, (requests, per_source)) in &self.windows {
            let is_full = full.contains(sequence);
            let admitted: u64 = per_source.iter().sum();
            let ratio = admitted as f64 / limit as f64;
            println!(
                "window {sequence}{}: {requests} requests, {admitted} admitted \
                 (per source {per_source:?}), admitted/limit {ratio:.3}",
                if is_full { "" } else { " (partial, skipped)" }
            );
            if is_full && !bounds.contains(&ratio) {
                failures.push(format!("window {sequence}: admitted/limit {ratio:.3}"));
            }
        }
        for sequence in full {
            if !self.windows.contains_key(&sequence) {
                failures.push(format!("window {sequence}: no request decided in it"));
            }
        }
        failures
    }

    /// Asserts that [`check`](Self::check) finds every `full` window decided, its
    /// admitted/limit within `bounds`.
    pub fn assert_full_windows(&self, full: Range<u64>, limit: u64, bounds: RangeInclusive<f64>) {
        let (low, high) = (*bounds.start(), *bounds.end());
        let failures = self.check(full, limit, bounds);
        assert!(
            failures.is_empty(),
            "full windows outside [{low:.2}, {high:.2}] × limit: {failures:?}"
        );
    }
}
