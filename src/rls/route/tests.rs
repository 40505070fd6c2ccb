use super::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use gcounter_engine::ManualClock;
use gcounter_rls_integration::grpc::{descriptor, request};
use http_body_util::BodyExt;
use hyper::service::Service as _;
use prost::Message;

const LIMITS: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";

fn routes() -> GrpcRoutes {
    let limits = match crate::config::load_str("test.yaml", LIMITS) {
        Ok(limits) => limits,
        Err(errors) => panic!("test limits must load: {errors}"),
    };
    let clock = Arc::new(ManualClock::new(1_700_000_040_000));
    let (limiter, _) =
        RateLimiter::in_process(limits, clock, 1_000, super::super::RlsSettings::default());
    let (_, health) = tonic_health::server::health_reporter();
    RateLimitRoute::new(Arc::new(limiter), 1 << 20)
        .routes()
        .add_service(health)
}

/// A gRPC call of `path` with `message`, length-prefixed as gRPC frames it.
fn call(path: &str, message: &[u8]) -> http::Request<Body> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let mut request = http::Request::new(Body::new(http_body_util::Full::new(Bytes::from(framed))));
    *request.uri_mut() = match path.parse() {
        Ok(uri) => uri,
        Err(error) => panic!("{path}: {error}"),
    };
    *request.method_mut() = http::Method::POST;
    request.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    request
}

/// The response's gRPC status (from the headers of a trailers-only answer, else from the
/// trailers) and its message, if any.
async fn answer(response: http::Response<GrpcBody>) -> (Option<String>, Option<Bytes>) {
    let (parts, body) = response.into_parts();
    let status_of = |headers: &http::HeaderMap| {
        headers
            .get(&GRPC_STATUS)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let mut status = status_of(&parts.headers);
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(error) => panic!("the body failed: {error}"),
    };
    if let Some(trailers) = collected.trailers() {
        status = status.or_else(|| status_of(trailers));
    }
    let bytes = collected.to_bytes();
    let message = (bytes.len() > 5).then(|| bytes.slice(5..));
    (status, message)
}

#[tokio::test]
async fn should_rate_limit_answers_by_its_exact_path_and_other_methods_are_unimplemented() {
    let message = request("d", vec![descriptor(&[("k", "v")])]).encode_to_vec();
    let routes = routes();
    // Two calls: the first is OK, the second over the limit of 1 per minute.
    for want in [1, 2] {
        let response = routes.call(call(SHOULD_RATE_LIMIT, &message)).await;
        let (status, body) = match response {
            Ok(response) => answer(response).await,
            Err(never) => match never {},
        };
        assert_eq!(status.as_deref(), Some("0"));
        let decoded = body.and_then(|body| RateLimitResponse::decode(body).ok());
        assert_eq!(decoded.map(|r| r.overall_code), Some(want));
    }
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/Other",
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit/more",
        "/some.Other/Method",
    ] {
        let response = routes.call(call(path, &message)).await;
        let (status, _) = match response {
            Ok(response) => answer(response).await,
            Err(never) => match never {},
        };
        assert_eq!(status.as_deref(), Some("12"), "{path}");
    }
    // The health service is still routed.
    let check = tonic_health::pb::HealthCheckRequest::default().encode_to_vec();
    let response = routes
        .call(call("/grpc.health.v1.Health/Check", &check))
        .await;
    let (status, _) = match response {
        Ok(response) => answer(response).await,
        Err(never) => match never {},
    };
    assert_eq!(status.as_deref(), Some("0"));
}
