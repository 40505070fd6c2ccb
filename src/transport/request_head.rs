//! Whether a request is a gRPC call at all, from its head alone, before anything is read,
//! waited for or decided.
//!
//! gRPC over HTTP/2 is a `POST` with a `content-type` of `application/grpc` (with or without a
//! `+subtype` or parameters). Anything else is answered as the spec's HTTP mapping says, so
//! that a client that is not speaking gRPC does not read a gRPC refusal (HTTP 200) as a
//! success: another method is HTTP 405 with `allow: POST`, another content type HTTP 415.
//! Both carry `grpc-status` too (`INTERNAL` and `INVALID_ARGUMENT`, as grpc-go answers) for a
//! gRPC client, and no body, so a `HEAD` never gets one.
//!
//! The checks are a comparison of the method and one header lookup: no allocation for a
//! call, and the refusals are built only when sent.

use http::{HeaderValue, Method, StatusCode};

use super::body::GrpcBody;

const GRPC: &[u8] = b"application/grpc";
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: http::HeaderName = http::HeaderName::from_static("grpc-message");

/// The answer to a request that is not a gRPC call; `None` for one.
pub(super) fn refusal<B>(request: &http::Request<B>) -> Option<http::Response<GrpcBody>> {
    if request.method() != Method::POST {
        let mut response = refused(
            StatusCode::METHOD_NOT_ALLOWED,
            tonic::Code::Internal,
            "gRPC calls are POST requests",
        );
        response
            .headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
        return Some(response);
    }
    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| is_grpc(value.as_bytes()));
    if !grpc {
        return Some(refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            "gRPC calls have the content-type application/grpc",
        ));
    }
    None
}

/// `application/grpc`, alone, with a subtype (`+proto`) or with parameters (`;`); media types
/// are case-insensitive.
fn is_grpc(content_type: &[u8]) -> bool {
    // What gRPC clients send (Envoy, grpc-go, tonic): one comparison of 16 bytes.
    if content_type == GRPC {
        return true;
    }
    match content_type.split_at_checked(GRPC.len()) {
        Some((base, rest)) => {
            base.eq_ignore_ascii_case(GRPC) && matches!(rest.first(), None | Some(b'+' | b';'))
        }
        None => false,
    }
}

/// An HTTP refusal with no body, its gRPC status in the headers.
fn refused(
    status: StatusCode,
    code: tonic::Code,
    message: &'static str,
) -> http::Response<GrpcBody> {
    let mut response = http::Response::new(GrpcBody::default());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(GRPC_STATUS, HeaderValue::from(code as i32));
    headers.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    response
}

#[cfg(test)]
mod tests;
