//! gRPC clients for the service under test (RateLimitService and grpc.health.v1),
//! plus small builders for rate-limit requests.

use std::net::SocketAddr;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
pub use envoy_types::pb::google::protobuf::UInt64Value;
pub use envoy_types::pb::google::protobuf::value::Kind;
pub use envoy_types::pb::google::protobuf::{Struct, Value};
pub use tonic_health::pb::health_check_response::ServingStatus;
pub use tonic_health::pb::health_client::HealthClient;
pub use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

pub type RlsClient = RateLimitServiceClient<Channel>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Per call; a hung service fails the test instead of hanging it.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// An HTTP/2 channel to `addr` (plaintext), connected before returning.
pub async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid gRPC endpoint URI")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect gRPC channel to {addr}: {e:?}"))
}

/// A `RateLimitService` client on `addr`. Messages up to 64 MiB may be sent, so
/// tests can reach the server's own limits.
pub async fn rls_client(addr: SocketAddr) -> RlsClient {
    RateLimitServiceClient::new(channel(addr).await).max_encoding_message_size(64 << 20)
}

/// A `grpc.health.v1.Health` client on `addr`.
pub async fn health_client(addr: SocketAddr) -> HealthClient<Channel> {
    HealthClient::new(channel(addr).await)
}

/// A descriptor of `(key, value)` entries, in order.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_string(),
                value: (*value).to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor of `entries` entries, each key and value about `half` bytes long and made
/// unique by `tag`, with a limit of its own (a request override of 1,000 a minute): a
/// counter as large as a client can make one, where no config rule is needed.
pub fn big_override(tag: &str, entries: usize, half: usize) -> RateLimitDescriptor {
    let pad = "x".repeat(half.saturating_sub(tag.len() + 4));
    let pairs: Vec<(String, String)> = (0..entries)
        .map(|e| (format!("k{e:02}{pad}"), format!("{tag}{e:02}{pad}")))
        .collect();
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut d = descriptor(&borrowed);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1_000,
        unit: Unit::Minute as i32,
    });
    d
}

/// A request for `domain` with `descriptors` (request-level `hits_addend` 0, i.e. 1).
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// `ShouldRateLimit`, panicking with the gRPC status if the call fails.
pub async fn should_rate_limit(
    client: &mut RlsClient,
    request: RateLimitRequest,
) -> RateLimitResponse {
    let summary = summarize(&request);
    match client.should_rate_limit(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => panic!("ShouldRateLimit({summary}) failed: {status:?}"),
    }
}

/// The `requests_per_unit` the service applies to `entries` in `domain`, checked without
/// consuming (the descriptor's `hits_addend` is 0); `None` when no limit applies. Takes a
/// clone of the client (cheap: it shares the channel) so it can be polled.
pub async fn limit_of(
    mut client: RlsClient,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<u32> {
    let mut unconsumed = descriptor(entries);
    unconsumed.hits_addend = Some(UInt64Value { value: 0 });
    let r = should_rate_limit(&mut client, request(domain, vec![unconsumed])).await;
    let [status] = r.statuses.as_slice() else {
        panic!("one descriptor, one status: {r:?}");
    };
    status.current_limit.as_ref().map(|l| l.requests_per_unit)
}

/// `ShouldRateLimit` that must fail; the gRPC status it failed with.
pub async fn should_rate_limit_err(
    client: &mut RlsClient,
    request: RateLimitRequest,
) -> tonic::Status {
    let summary = summarize(&request);
    match client.should_rate_limit(request).await {
        Ok(response) => panic!(
            "ShouldRateLimit({summary}) succeeded but should have failed: {:?}",
            response.into_inner()
        ),
        Err(status) => status,
    }
}

/// The request for assertion messages, without megabytes of values.
fn summarize(request: &RateLimitRequest) -> String {
    let mut text = format!(
        "domain {:?}, hits_addend {}, {} descriptor(s)",
        request.domain,
        request.hits_addend,
        request.descriptors.len()
    );
    for d in request.descriptors.iter().take(4) {
        let entries: Vec<String> = d
            .entries
            .iter()
            .take(4)
            .map(|e| format!("{}={}", clip(&e.key), clip(&e.value)))
            .collect();
        text.push_str(&format!(" [{}]", entries.join(", ")));
    }
    text
}

fn clip(s: &str) -> String {
    if s.len() <= 40 {
        format!("{s:?}")
    } else {
        format!("<{} bytes>", s.len())
    }
}

/// A protobuf `Duration` in milliseconds (0 when absent).
pub fn duration_ms(d: Option<&envoy_types::pb::google::protobuf::Duration>) -> i64 {
    d.map_or(0, |d| d.seconds * 1_000 + i64::from(d.nanos) / 1_000_000)
}

/// A request for `domain` with one descriptor `key=value`.
pub fn hit(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    request(domain, vec![descriptor(&[(key, value)])])
}

/// A descriptor `key=value` costing `cost` hits (`hits_addend`).
pub fn costing(key: &str, value: &str, cost: u64) -> RateLimitDescriptor {
    let mut d = descriptor(&[(key, value)]);
    d.hits_addend = Some(UInt64Value { value: cost });
    d
}

/// A descriptor with `entries` carrying its own limit (`unit` as sent on the wire, so tests
/// can send values the enum does not know).
pub fn with_override(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    let mut d = descriptor(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

/// A descriptor status's code; panics on a value the enum does not know.
pub fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap_or_else(|_| panic!("unknown code in {status:?}"))
}

/// A response's overall code; panics on a value the enum does not know.
pub fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code)
        .unwrap_or_else(|_| panic!("unknown overall code in {response:?}"))
}

/// Every descriptor status's code, in request order.
pub fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response.statuses.iter().map(code).collect()
}

/// Sends `calls` requests with the single descriptor `entries`; each must be answered OK.
pub async fn assert_admitted(
    client: &mut RlsClient,
    calls: usize,
    domain: &str,
    entries: &[(&str, &str)],
) {
    for call in 1..=calls {
        let response = should_rate_limit(client, request(domain, vec![descriptor(entries)])).await;
        assert_eq!(
            overall(&response),
            Code::Ok,
            "call {call} of {calls}: {response:?}"
        );
    }
}

/// The codes of `calls` decisions in a row, each made by `decide`: how a test walks one
/// counter up to and past its limit.
pub async fn codes_in_a_row(
    calls: usize,
    mut decide: impl AsyncFnMut() -> DescriptorStatus,
) -> Vec<Code> {
    let mut codes = Vec::with_capacity(calls);
    for _ in 0..calls {
        codes.push(code(&decide().await));
    }
    codes
}

/// The value of the response header `name` (any case) the service asks Envoy to add.
pub fn header<'r>(response: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Sends `request` (one descriptor) and returns its one status.
pub async fn one_status(client: &mut RlsClient, request: RateLimitRequest) -> DescriptorStatus {
    let mut response = should_rate_limit(client, request).await;
    assert_eq!(
        response.statuses.len(),
        1,
        "one status expected: {response:?}"
    );
    response.statuses.remove(0)
}
