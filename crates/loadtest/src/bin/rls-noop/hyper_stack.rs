//! The no-op answer on hyper's HTTP/2 server directly: the request's gRPC frame read whole,
//! decoded with prost, one OK status per descriptor encoded and framed, `grpc-status: 0` in
//! the trailers. No router, no tower layers, no per-request bounds: it is the floor under
//! any gRPC server on this HTTP/2 stack, not a server to run in front of Envoy.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prost::Message;
use tokio::net::TcpListener;

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// gRPC's message prefix: a compression flag byte, then the length (big-endian `u32`).
const FRAME_PREFIX: usize = 5;

/// gRPC status codes this server answers with.
const OK: &str = "0";
const INVALID_ARGUMENT: &str = "3";
const UNIMPLEMENTED: &str = "12";

/// Accepts connections until the listener fails, each served on its own task.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.timer(TokioTimer::new());
    loop {
        let (stream, _) = listener.accept().await?;
        // Small unary answers: without it each one waits on Nagle's delayed ACK.
        stream.set_nodelay(true)?;
        let connection = http2.serve_connection(TokioIo::new(stream), service_fn(answer));
        tokio::spawn(async move {
            // A peer's broken connection ends its own task and nothing else.
            let _ = connection.await;
        });
    }
}

async fn answer(
    request: Request<Incoming>,
) -> Result<Response<impl Body<Data = Bytes, Error = Infallible> + Send + use<>>, Infallible> {
    if request.uri().path() != SHOULD_RATE_LIMIT {
        return Ok(answer_with(None, UNIMPLEMENTED));
    }
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(answer_with(None, INVALID_ARGUMENT)),
    };
    let Some(message) = unframe(&body) else {
        return Ok(answer_with(None, INVALID_ARGUMENT));
    };
    let Ok(decoded) = RateLimitRequest::decode(message) else {
        return Ok(answer_with(None, INVALID_ARGUMENT));
    };
    Ok(answer_with(Some(frame(&super::all_ok(&decoded))), OK))
}

/// The message of one uncompressed gRPC frame that fills `body` exactly.
fn unframe(body: &[u8]) -> Option<&[u8]> {
    let (prefix, message) = body.split_at_checked(FRAME_PREFIX)?;
    let [compressed, length @ ..] = prefix else {
        return None;
    };
    let length = u32::from_be_bytes(length.try_into().ok()?);
    (*compressed == 0 && usize::try_from(length).ok()? == message.len()).then_some(message)
}

fn frame(reply: &RateLimitResponse) -> Bytes {
    let length = reply.encoded_len();
    let mut framed = BytesMut::with_capacity(FRAME_PREFIX + length);
    framed.put_u8(0);
    // A response of one status per request descriptor: far below 4 GiB.
    framed.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    reply.encode_raw(&mut framed);
    framed.freeze()
}

/// A gRPC answer: the framed message (if any), then the trailers with its status, as a stream
/// of frames (no exact size hint, so no `content-length`, as the service's answer).
fn answer_with(
    message: Option<Bytes>,
    code: &'static str,
) -> Response<impl Body<Data = Bytes, Error = Infallible> + Send + use<>> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(code));
    let frames = message
        .map(Frame::data)
        .into_iter()
        .chain([Frame::trailers(trailers)])
        .map(Ok);
    let mut response = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

#[cfg(test)]
mod tests;
