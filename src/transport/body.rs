//! The gRPC server's response body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::Status;

/// A response body of the gRPC server: a unary answer as it is, or tonic's body.
///
/// The common call's answer (one framed message, then `grpc-status: 0` in the trailers) is
/// sent unboxed: tonic's `Body::new` boxes any body, an allocation per answer and a dynamic
/// call per frame (BENCHMARKS.md, "The cost of a request"). It holds only its message, so a
/// response moves cheaply through the layers; the trailers are made when they are sent.
/// Every other call and every refusal keep tonic's body.
#[derive(Debug)]
pub enum GrpcBody {
    /// The framed message (`None` once sent), then the OK status.
    Answer {
        message: Option<Bytes>,
        status_sent: bool,
    },
    Tonic(tonic::body::Body),
}

const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

impl GrpcBody {
    /// One framed gRPC message, then `grpc-status: 0`.
    pub fn answer(message: Bytes) -> Self {
        Self::Answer {
            message: Some(message),
            status_sent: false,
        }
    }
}

/// Empty: the body of a trailers-only answer (`Status::into_http`).
impl Default for GrpcBody {
    fn default() -> Self {
        Self::Tonic(tonic::body::Body::empty())
    }
}

impl From<tonic::body::Body> for GrpcBody {
    fn from(body: tonic::body::Body) -> Self {
        Self::Tonic(body)
    }
}

impl HttpBody for GrpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.get_mut() {
            Self::Answer {
                message,
                status_sent,
            } => Poll::Ready(match message.take() {
                Some(message) => Some(Ok(Frame::data(message))),
                None if !*status_sent => {
                    *status_sent = true;
                    let mut trailers = http::HeaderMap::with_capacity(1);
                    trailers.insert(GRPC_STATUS, http::HeaderValue::from_static("0"));
                    Some(Ok(Frame::trailers(trailers)))
                }
                None => None,
            }),
            Self::Tonic(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Answer {
                message,
                status_sent,
            } => message.is_none() && *status_sent,
            Self::Tonic(body) => body.is_end_stream(),
        }
    }

    /// An answer has no exact size, so hyper adds no `content-length` header, which tonic's
    /// answer does not have (and no response pays for encoding one).
    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Answer { .. } => SizeHint::default(),
            Self::Tonic(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;
