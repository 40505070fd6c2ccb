//! The common `ShouldRateLimit` call read and answered without tonic's `Grpc::unary`: one
//! uncompressed message that fills the request's first DATA frame, which ends the stream.
//!
//! For that call tonic boxes the body, reads it into an 8 KiB buffer and copies the message
//! out, builds the request's metadata, then encodes the answer through a second 8 KiB buffer
//! and a body state machine: ~2,900 instructions and four allocations per request
//! (BENCHMARKS.md, "The cost of a request"). Here the message is a slice of the frame hyper
//! read, and the answer is framed once. The answer is the same on the wire: `content-type:
//! application/grpc`, the framed message, `grpc-status: 0` in the trailers; a refusal is
//! tonic's trailers-only answer (`Status::into_http`).
//!
//! Anything else (a `grpc-encoding`, a compressed or oversized message, a message split over
//! frames, trailers, an error of the body) goes to tonic as before, the frame already read
//! replayed in front of the rest of the body ([`Replay`]): its checks, refusals and counting
//! are tonic's, unchanged.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use prost::Message;
use tonic::Status;

use crate::transport::GrpcBody;

use super::super::Answer;

/// gRPC's message prefix: a compression flag, then the length (big-endian `u32`).
const PREFIX: usize = 5;
/// The largest answer framed on the stack before it is copied out (one descriptor: ~40 bytes).
const STACK_ANSWER_BYTES: usize = 256;
const GRPC_ENCODING: http::HeaderName = http::HeaderName::from_static("grpc-encoding");
const GRPC_CONTENT_TYPE: http::HeaderValue = http::HeaderValue::from_static("application/grpc");

/// What [`read`] found.
pub(super) enum Read<B: HttpBody> {
    /// The request's one message, whole.
    Whole(Bytes),
    /// Anything else: the request for tonic, as it came (boxed: the common call's future
    /// stays small).
    Other(Box<http::Request<Replay<B>>>),
}

/// The request's message when it is the common call (see the module's doc); otherwise the
/// request, its body unchanged for tonic. A named future, so that the route's future is one
/// too: it lives in hyper's stream task, with no allocation of its own.
pub(super) fn read<B: HttpBody>(request: http::Request<B>, max_request_bytes: usize) -> Reading<B> {
    Reading {
        request: Some(request.into_parts()),
        max_request_bytes,
    }
}

/// [`read`]'s future.
pub(super) struct Reading<B> {
    /// `None` once read.
    request: Option<(http::request::Parts, B)>,
    max_request_bytes: usize,
}

impl<B> Future for Reading<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Output = Read<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Read<B>> {
        let this = self.get_mut();
        let Some((parts, body)) = &mut this.request else {
            // Polled after it was read: a future may then wait forever.
            return Poll::Pending;
        };
        let first = if parts.headers.contains_key(&GRPC_ENCODING) {
            None
        } else {
            let first = ready!(Pin::new(&mut *body).poll_frame(cx));
            if let Some(Ok(frame)) = &first
                && let Some(data) = frame.data_ref()
                && let Some(message) = whole_message(data, this.max_request_bytes)
                && body.is_end_stream()
            {
                // The body goes now, and what its budget held.
                this.request = None;
                return Poll::Ready(Read::Whole(message));
            }
            Some(first)
        };
        // `Some`: it was matched above, and only a whole message took it.
        let Some((parts, inner)) = this.request.take() else {
            return Poll::Pending;
        };
        Poll::Ready(Read::Other(Box::new(http::Request::from_parts(
            parts,
            Replay { first, inner },
        ))))
    }
}

/// The message of an uncompressed gRPC frame of at most `max` bytes that fills `data`.
fn whole_message(data: &Bytes, max: usize) -> Option<Bytes> {
    let (prefix, message) = data.split_at_checked(PREFIX)?;
    let [0, length @ ..] = prefix else {
        return None;
    };
    let length = usize::try_from(u32::from_be_bytes(length.try_into().ok()?)).ok()?;
    (length <= max && length == message.len()).then(|| data.slice(PREFIX..))
}

/// The handler's answer as tonic's `Grpc::unary` would send it.
pub(super) fn respond(answer: Result<Answer, Status>) -> http::Response<GrpcBody> {
    let framed = answer.and_then(|answer| {
        framed(&answer)
            .map_err(|error| Status::internal(format!("cannot encode the response: {error}")))
    });
    match framed {
        Ok(message) => {
            let mut response = http::Response::new(GrpcBody::answer(message));
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
            response
        }
        Err(status) => status.into_http(),
    }
}

/// `answer` with gRPC's prefix, encoded on the stack when small and copied out once (written
/// into a growing buffer, each varint byte is a `put_slice` and a `memcpy`).
fn framed(answer: &Answer) -> Result<Bytes, prost::EncodeError> {
    let mut stack = [0u8; PREFIX + STACK_ANSWER_BYTES];
    let (prefix, mut room) = stack.split_at_mut(PREFIX);
    // prost checks the room against the answer's length before writing anything.
    if answer.encode(&mut room).is_ok() {
        let length = STACK_ANSWER_BYTES - room.len();
        prefix.copy_from_slice(&frame_prefix(length));
        if let Some(framed) = stack.get(..PREFIX + length) {
            return Ok(Bytes::copy_from_slice(framed));
        }
    }
    let length = answer.encoded_len();
    let mut framed = BytesMut::with_capacity(PREFIX + length);
    framed.put_slice(&frame_prefix(length));
    answer.encode(&mut framed)?;
    Ok(framed.freeze())
}

/// gRPC's prefix of an uncompressed message of `length` bytes; an answer is far below 4 GiB.
fn frame_prefix(length: usize) -> [u8; PREFIX] {
    let [a, b, c, d] = u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes();
    [0, a, b, c, d]
}

/// What polling a body gave: a frame, its error or its end (`None`).
type Polled<B> = Option<Result<Frame<<B as HttpBody>::Data>, <B as HttpBody>::Error>>;

/// A request body with the frame [`read`] took from it put back in front.
pub(super) struct Replay<B: HttpBody> {
    /// `Some` until replayed.
    first: Option<Polled<B>>,
    inner: B,
}

impl<B> HttpBody for Replay<B>
where
    B: HttpBody + Unpin,
    B::Data: Unpin,
    B::Error: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.first.take() {
            Some(first) => Poll::Ready(first),
            None => Pin::new(&mut self.inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.first {
            Some(None) => true,
            Some(Some(_)) => false,
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.first {
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;
