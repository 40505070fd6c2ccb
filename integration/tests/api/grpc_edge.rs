//! The gRPC edge of the real binary, seen from a raw HTTP/2 client: compressed messages
//! accepted and bounded by what they inflate to, requests that are no gRPC call answered by
//! their HTTP status before any decision, a call its client reset before its request ended
//! never counted, and a client's deadline ending the stream with `RST_STREAM(CANCEL)`. Each on
//! the paths a call can take: `ShouldRateLimit`, a service tonic frames (health), RLQS.

use gcounter_rls_integration as support;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use http::{Method, StatusCode};
use prost::Message;
use support::grpc::{
    self, Code, HealthCheckRequest, HealthCheckResponse, ServingStatus, descriptor, request,
};
use support::metrics::requests;
use support::quota::{bucket, report, usage};
use support::raw_grpc::{self, Answered, Head, compressed, exchange, framed};

const LIMITS: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: once
    rate_limit: {unit: day, requests_per_unit: 1}
";

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
const RLQS: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

const OK: i32 = 0;
const UNIMPLEMENTED: i32 = 12;
const RESOURCE_EXHAUSTED: i32 = 8;

/// A `ShouldRateLimit` message for `(key, value)` in the domain `edge`, unframed.
fn hit(key: &str, value: &str) -> Vec<u8> {
    request("edge", vec![descriptor(&[(key, value)])]).encode_to_vec()
}

fn plain(message: &[u8]) -> Vec<u8> {
    framed(u32::try_from(message.len()).expect("small"), message)
}

/// The overall code of a `ShouldRateLimit` answer, which must be OK and uncompressed.
fn overall_code(answered: &Answered) -> Code {
    assert_eq!(answered.grpc_status(), Some(OK), "{answered:?}");
    let messages = answered.messages();
    let [(flag, message)] = &messages[..] else {
        panic!("one message: {answered:?}");
    };
    assert_eq!(*flag, 0, "answered uncompressed");
    assert!(
        answered.grpc_header("grpc-encoding").is_none(),
        "{answered:?}"
    );
    let response = RateLimitResponse::decode(&message[..]).expect("a RateLimitResponse");
    grpc::overall(&response)
}

async fn call(addr: std::net::SocketAddr, path: &str, head: Head, body: Vec<u8>) -> Answered {
    exchange(addr, path, head, body, true).await
}

#[tokio::test]
async fn compressed_messages_are_accepted_and_decided() {
    let (_dir, service) = support::serve_limits(LIMITS, &[]);
    let addr = service.grpc_addr;

    // Limit 2: the gzip and the deflate calls are decided and counted, the third is over.
    for encoding in ["gzip", "deflate"] {
        let head = Head::grpc().with("grpc-encoding", encoding);
        let answered = call(
            addr,
            SHOULD_RATE_LIMIT,
            head,
            compressed(encoding, &hit("user", "zip")),
        )
        .await;
        assert_eq!(overall_code(&answered), Code::Ok, "{encoding}");
    }
    let answered = call(
        addr,
        SHOULD_RATE_LIMIT,
        Head::grpc(),
        plain(&hit("user", "zip")),
    )
    .await;
    assert_eq!(overall_code(&answered), Code::OverLimit);

    // A service tonic frames.
    let check = HealthCheckRequest::default().encode_to_vec();
    let head = Head::grpc().with("grpc-encoding", "gzip");
    let answered = call(addr, HEALTH_CHECK, head, compressed("gzip", &check)).await;
    assert_eq!(answered.grpc_status(), Some(OK), "{answered:?}");
    let [(0, message)] = &answered.messages()[..] else {
        panic!("one uncompressed message: {answered:?}");
    };
    let health = HealthCheckResponse::decode(&message[..]).expect("a HealthCheckResponse");
    assert_eq!(health.status, ServingStatus::Serving as i32);

    // RLQS: a compressed report is counted and answered with the bucket's assignment.
    let id = bucket(&[("user", "quota")]);
    let reports = report("edge", vec![usage(&id, 1, 0, 1)]).encode_to_vec();
    let head = Head::grpc().with("grpc-encoding", "gzip");
    let answered = call(addr, RLQS, head, compressed("gzip", &reports)).await;
    assert_eq!(answered.grpc_status(), Some(OK), "{answered:?}");
    assert!(
        !answered.messages().is_empty(),
        "an assignment: {answered:?}"
    );
}

/// `--max-request-bytes 64KiB`; a message of 1 MiB is a few KiB of gzip.
#[tokio::test]
async fn a_compressed_message_is_bounded_by_what_it_inflates_to() {
    let (_dir, service) = support::serve_limits(LIMITS, &["--max-request-bytes", "64KiB"]);
    let addr = service.grpc_addr;
    let bomb = hit("user", &"z".repeat(1 << 20));
    let framed_bomb = compressed("gzip", &bomb);
    assert!(framed_bomb.len() < 16 << 10, "{}", framed_bomb.len());

    for path in [SHOULD_RATE_LIMIT, HEALTH_CHECK] {
        let head = Head::grpc().with("grpc-encoding", "gzip");
        let answered = call(addr, path, head, framed_bomb.clone()).await;
        assert_eq!(
            answered.grpc_status(),
            Some(RESOURCE_EXHAUSTED),
            "{path}: {answered:?}"
        );
    }
    let reports = report(
        "edge",
        vec![usage(&bucket(&[("user", &"z".repeat(1 << 20))]), 1, 0, 1)],
    )
    .encode_to_vec();
    let head = Head::grpc().with("grpc-encoding", "gzip");
    let answered = call(addr, RLQS, head, compressed("gzip", &reports)).await;
    assert_eq!(
        answered.grpc_status(),
        Some(RESOURCE_EXHAUSTED),
        "RLQS: {answered:?}"
    );
    assert_eq!(
        requests(&service.metrics(), "resource_exhausted"),
        Some(1.0)
    );

    // An encoding not accepted: UNIMPLEMENTED, naming those that are.
    for path in [SHOULD_RATE_LIMIT, HEALTH_CHECK, RLQS] {
        let head = Head::grpc().with("grpc-encoding", "snappy");
        let answered = call(addr, path, head, plain(&hit("user", "snappy"))).await;
        assert_eq!(
            answered.grpc_status(),
            Some(UNIMPLEMENTED),
            "{path}: {answered:?}"
        );
        let accepted = answered
            .grpc_header("grpc-accept-encoding")
            .unwrap_or_default();
        assert!(
            accepted.contains("gzip") && accepted.contains("deflate"),
            "{path}: {accepted:?}"
        );
    }
}

#[tokio::test]
async fn requests_that_are_no_grpc_call_get_their_http_status_and_no_decision() {
    let (_dir, service) = support::serve_limits(LIMITS, &[]);
    let addr = service.grpc_addr;
    let message = plain(&hit("once", "edge"));

    for path in [SHOULD_RATE_LIMIT, HEALTH_CHECK, RLQS] {
        for content_type in [Some("text/plain"), Some("application/json"), None] {
            let head = Head {
                content_type,
                ..Head::grpc()
            };
            let answered = call(addr, path, head, message.clone()).await;
            let Answered::Response { status, .. } = &answered else {
                panic!("{path} {content_type:?}: {answered:?}");
            };
            assert_eq!(
                *status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{path} {content_type:?}"
            );
        }
        for method in [Method::GET, Method::PUT, Method::HEAD] {
            let head = Head {
                method: method.clone(),
                ..Head::grpc()
            };
            let body = if method == Method::HEAD {
                Vec::new()
            } else {
                message.clone()
            };
            let answered = call(addr, path, head, body).await;
            let Answered::Response {
                status,
                headers,
                ended_with_head,
                data,
                ..
            } = &answered
            else {
                panic!("{path} {method}: {answered:?}");
            };
            assert_eq!(*status, StatusCode::METHOD_NOT_ALLOWED, "{path} {method}");
            assert_eq!(
                headers.get("allow").and_then(|v| v.to_str().ok()),
                Some("POST"),
                "{path} {method}"
            );
            assert!(
                *ended_with_head && data.is_empty(),
                "{path} {method}: no body"
            );
        }
    }

    // None of them was decided: the one request the limit allows is still there.
    let answered = call(addr, SHOULD_RATE_LIMIT, Head::grpc(), message.clone()).await;
    assert_eq!(overall_code(&answered), Code::Ok);
    let answered = call(addr, SHOULD_RATE_LIMIT, Head::grpc(), message).await;
    assert_eq!(overall_code(&answered), Code::OverLimit);
    let text = service.metrics();
    assert_eq!(requests(&text, "ok"), Some(1.0), "{text}");
    assert_eq!(requests(&text, "over_limit"), Some(1.0), "{text}");
}

#[tokio::test]
async fn a_call_reset_before_its_request_ends_is_not_counted() {
    let (_dir, service) = support::serve_limits(LIMITS, &[]);
    let addr = service.grpc_addr;
    let message = plain(&hit("once", "reset"));

    // The whole message, then a reset where END_STREAM should be; half of it, then the reset.
    // hyper reads RST_STREAM(NO_ERROR) as the body's end: it must still not end the request.
    for reason in [h2::Reason::CANCEL, h2::Reason::NO_ERROR] {
        for sent in [&message[..], &message[..message.len() / 2]] {
            raw_grpc::send_then_reset(addr, SHOULD_RATE_LIMIT, sent.to_vec(), reason).await;
        }
    }
    // The server read the resets before the PINGs that followed them; give the streams' tasks
    // the time to end (a count would happen at once, in the stream's task).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let answered = call(addr, SHOULD_RATE_LIMIT, Head::grpc(), message).await;
    assert_eq!(
        overall_code(&answered),
        Code::Ok,
        "the reset calls took nothing"
    );
    let text = service.metrics();
    assert_eq!(requests(&text, "ok"), Some(1.0), "{text}");
}

/// The client's deadline (`grpc-timeout`, shorter than the server's) ends the stream with
/// `RST_STREAM(CANCEL)` and no answer; the server's own (`--request-timeout`) is answered
/// `CANCELLED`, the client still waiting for it.
#[tokio::test]
async fn a_clients_deadline_resets_the_stream_with_cancel() {
    let (_dir, service) = support::serve_limits(LIMITS, &["--request-timeout", "1s"]);
    let addr = service.grpc_addr;

    for path in [SHOULD_RATE_LIMIT, HEALTH_CHECK] {
        // The request is left open with no message: nothing to answer before the deadline.
        let head = Head::grpc().with("grpc-timeout", "200m");
        let answered = exchange(addr, path, head, Vec::new(), false).await;
        assert!(
            matches!(answered, Answered::Reset(h2::Reason::CANCEL)),
            "{path}: {answered:?}"
        );

        let answered = exchange(addr, path, Head::grpc(), Vec::new(), false).await;
        assert_eq!(
            answered.grpc_status(),
            Some(1),
            "{path}: CANCELLED, {answered:?}"
        );
    }
}
