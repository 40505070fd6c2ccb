//! An open-loop load driver: requests leave on a fixed schedule, whatever the answers take,
//! spread round-robin over several clients (several processes, or one).
//!
//! Needs a multi-threaded Tokio runtime when the test thread blocks meanwhile (the harness's
//! std calls do): spawn [`paced`] and await it later.

use std::time::Duration;

use super::grpc::{DescriptorStatus, RateLimitRequest, RateLimitResponse, RlsClient};
use super::{Service, now_ms};

/// One request of a paced run and what came of it.
#[derive(Debug)]
pub struct Sent {
    /// Position in the schedule, from 0.
    pub index: usize,
    /// Which client it went to (index into the `clients` given).
    pub target: usize,
    /// Milliseconds since the epoch when the call started and when its answer came.
    pub sent_ms: u64,
    pub received_ms: u64,
    pub result: Result<RateLimitResponse, tonic::Status>,
}

impl Sent {
    /// The first (only) descriptor status of a successful call.
    pub fn first_status(&self) -> Option<&DescriptorStatus> {
        self.result.as_ref().ok().and_then(|r| r.statuses.first())
    }

    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.received_ms.saturating_sub(self.sent_ms))
    }
}

/// [`paced`] load on one new client of `service`, in the background (the test thread is then
/// free to cut, kill or measure); await the handle for what was sent.
pub async fn in_background<F>(
    service: &Service,
    rate_per_sec: f64,
    duration: Duration,
    request: F,
) -> tokio::task::JoinHandle<Vec<Sent>>
where
    F: Fn(usize) -> RateLimitRequest + Send + 'static,
{
    let client = super::grpc::rls_client(service.grpc_addr).await;
    tokio::spawn(paced(vec![client], rate_per_sec, duration, request))
}

/// Sends `rate_per_sec × duration` requests, request `i` at `start + i / rate_per_sec` to
/// `clients[i % clients.len()]`, built by `request(i)`; returns them all, in schedule order,
/// once every answer is in (each call is bounded by the channel's timeout).
pub async fn paced<F>(
    clients: Vec<RlsClient>,
    rate_per_sec: f64,
    duration: Duration,
    request: F,
) -> Vec<Sent>
where
    F: Fn(usize) -> RateLimitRequest,
{
    assert!(!clients.is_empty(), "paced: no clients");
    assert!(rate_per_sec > 0.0, "paced: rate must be positive");
    let count = (rate_per_sec * duration.as_secs_f64()).floor() as usize;
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..count {
        let at = start + Duration::from_secs_f64(index as f64 / rate_per_sec);
        tokio::time::sleep_until(at).await;
        let target = index % clients.len();
        let mut client = clients[target].clone();
        let request = request(index);
        tasks.spawn(async move {
            let sent_ms = now_ms();
            let result = client
                .should_rate_limit(request)
                .await
                .map(tonic::Response::into_inner);
            Sent {
                index,
                target,
                sent_ms,
                received_ms: now_ms(),
                result,
            }
        });
    }
    let mut sent = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        sent.push(done.expect("a paced request task panicked"));
    }
    sent.sort_by_key(|s| s.index);
    sent
}

/// Latency percentiles (0–100) of `sent`, as `p50 / p99 / max` text for a report.
pub fn latency_summary<'a>(sent: impl IntoIterator<Item = &'a Sent>) -> String {
    let mut ms: Vec<u64> = sent
        .into_iter()
        .map(|s| s.received_ms.saturating_sub(s.sent_ms))
        .collect();
    if ms.is_empty() {
        return "no requests".to_string();
    }
    ms.sort_unstable();
    let at = |p: usize| ms[(ms.len() - 1) * p / 100];
    format!(
        "p50 {} ms, p99 {} ms, max {} ms over {} requests",
        at(50),
        at(99),
        at(100),
        ms.len()
    )
}

/// Asserts that no call of `what` (a run's name) failed: a decision for every request,
/// whatever happened meanwhile; shows how many failed and the first five.
pub fn assert_no_grpc_errors(sent: &[Sent], what: &str) {
    let errors = grpc_errors(sent);
    assert!(
        errors.is_empty(),
        "{what}: {} gRPC errors, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
}

/// The gRPC errors among `sent`, as `code: message`.
pub fn grpc_errors(sent: &[Sent]) -> Vec<String> {
    sent.iter()
        .filter_map(|s| s.result.as_ref().err())
        .map(|status| format!("{:?}: {}", status.code(), status.message()))
        .collect()
}
