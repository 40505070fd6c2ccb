//! A running service on a limits text with a connected gRPC client: the unit most request
//! tests work with.

use super::grpc::{
    self, Code, DescriptorStatus, RateLimitDescriptor, RateLimitRequest, RateLimitResponse,
    RlsClient, descriptor, request,
};
use super::metrics;
use super::{Launch, Service};

/// Hold the whole value: its temp dir holds the config file.
pub struct Rls {
    _dir: tempfile::TempDir,
    pub service: Service,
    pub client: RlsClient,
}

impl Rls {
    pub async fn start(yaml: &str, args: &[&str]) -> Rls {
        Self::start_with(yaml, args, Launch::default()).await
    }

    /// Like [`Rls::start`], launched as `launch` says (e.g. upstream's variables).
    pub async fn start_with(yaml: &str, args: &[&str], launch: Launch<'_>) -> Rls {
        let (dir, limits) = super::limits_file(yaml);
        let service = Service::start_with(&limits, args, launch);
        let client = grpc::rls_client(service.grpc_addr).await;
        Rls {
            _dir: dir,
            service,
            client,
        }
    }

    /// Sends `request`; the answer has one status per descriptor.
    pub async fn send(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        let n = request.descriptors.len();
        let response = grpc::should_rate_limit(&mut self.client, request).await;
        assert_eq!(
            response.statuses.len(),
            n,
            "one status per descriptor expected: {response:?}"
        );
        response
    }

    pub async fn check(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        self.send(request(domain, descriptors)).await
    }

    /// The status of a request with the single descriptor `entries`.
    pub async fn one(&mut self, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
        let mut response = self.check(domain, vec![descriptor(entries)]).await;
        response.statuses.remove(0)
    }

    /// Asserts each `(rule, outcome, count)` of `domain`'s
    /// `rls_descriptor_decisions_total`.
    pub fn assert_decisions(&self, domain: &str, want: &[(&str, &str, f64)]) {
        let text = self.metrics();
        for &(rule, outcome, count) in want {
            let got = metrics::decisions(&text, domain, rule, outcome);
            assert_eq!(got, Some(count), "{rule} {outcome}:\n{text}");
        }
    }

    /// The codes of `calls` requests in a row with the single descriptor `entries`.
    pub async fn codes_in_a_row(
        &mut self,
        calls: usize,
        domain: &str,
        entries: &[(&str, &str)],
    ) -> Vec<Code> {
        grpc::codes_in_a_row(calls, async || self.one(domain, entries).await).await
    }

    pub fn metrics(&self) -> String {
        self.service.metrics()
    }

    /// `rls_descriptor_decisions_total{domain, rule, outcome}`; panics when absent.
    pub fn decisions(&self, domain: &str, rule: &str, outcome: &str) -> f64 {
        let text = self.metrics();
        metrics::decisions(&text, domain, rule, outcome).unwrap_or_else(|| {
            panic!("no rls_descriptor_decisions_total{{domain={domain:?},rule={rule:?},outcome={outcome:?}}} in /metrics:\n{text}")
        })
    }
}
