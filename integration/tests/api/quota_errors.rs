//! Every way an RLQS stream can fail on its request's bytes ends it with its own status and
//! message, as the RLQS service promises, never with `grpc-status: 0` and silence (which a
//! client reads as a clean end).

use gcounter_rls_integration as support;

use support::metrics::count;
use support::raw_grpc::{self, framed};
use support::serve_limits;

const LIMITS: &str = "
domain: quota
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 60}
";

const RLQS: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

const INVALID_ARGUMENT: i32 = 3;
const DEADLINE_EXCEEDED: i32 = 4;
const RESOURCE_EXHAUSTED: i32 = 8;

#[tokio::test]
async fn a_stream_that_fails_on_its_bytes_ends_with_their_status() {
    let (_dir, service) = serve_limits(
        LIMITS,
        &["--max-request-bytes", "4KiB", "--request-timeout", "2s"],
    );
    let addr = service.grpc_addr;

    let (code, message) = raw_grpc::call(addr, RLQS, framed(8_000, &[0; 8_000])).await;
    assert_eq!(
        code, RESOURCE_EXHAUSTED,
        "over --max-request-bytes: {message}"
    );
    assert!(message.contains("4096"), "{message}");

    let (code, message) = raw_grpc::call(addr, RLQS, framed(4, b"\xff\xff\xff\xff")).await;
    assert_eq!(
        code, INVALID_ARGUMENT,
        "bytes that are no report: {message}"
    );

    // The domain (field 1) as two bytes that are no UTF-8.
    let (code, message) = raw_grpc::call(addr, RLQS, framed(4, &[0x0a, 0x02, 0xc3, 0x28])).await;
    assert_eq!(
        code, INVALID_ARGUMENT,
        "a domain that is no UTF-8: {message}"
    );

    let mut compressed = framed(2, &[0x0a, 0x00]);
    compressed[0] = 1;
    let (code, message) = raw_grpc::call(addr, RLQS, compressed).await;
    assert_eq!(
        code, INVALID_ARGUMENT,
        "compressed, no grpc-encoding: {message}"
    );
    assert!(message.contains("grpc-encoding"), "{message}");

    let (code, message) = raw_grpc::call_unfinished(addr, RLQS, framed(1_000, &[0x0a; 10])).await;
    assert_eq!(
        code, DEADLINE_EXCEEDED,
        "a report never finished: {message}"
    );
    assert!(message.contains("--request-timeout"), "{message}");

    let text = service.metrics();
    let errors = |reason| count(&text, "rls_rlqs_stream_errors_total", &[("reason", reason)]);
    assert_eq!(errors("request_bytes"), 1.0);
    assert_eq!(errors("invalid_argument"), 3.0);
    assert_eq!(errors("message_deadline"), 1.0);
    assert_eq!(errors("transport"), 0.0);
}
