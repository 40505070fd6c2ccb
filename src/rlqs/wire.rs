//! An RLQS stream on the wire, read and written here rather than by tonic's streaming
//! server: reports decoded from the request body's whole messages, responses framed, and the
//! stream's end with its status and message in the trailers.
//!
//! With tonic, an error of the request body or of decoding ended the stream with
//! `grpc-status: 0` and no message (the handler saw the error and returned); a message over
//! `--max-request-bytes`, a body refused by the budget, bytes that are not a protobuf or a
//! compressed flag without `grpc-encoding` each looked like a clean end to Envoy. Here every
//! one of them ends the stream with its own status: `RESOURCE_EXHAUSTED` for what a bound
//! refused, `INVALID_ARGUMENT` for what the client got wrong. tonic also kept each stream's
//! decode buffer at the size of the largest report it ever received, for as long as the
//! stream lived; here a report is decoded from the frame that carries it. A compressed
//! report (the stream's `grpc-encoding`: gzip or deflate) is decompressed within
//! `--max-request-bytes`, as tonic bounds the calls it frames.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use http_body::{Body as HttpBody, Frame, SizeHint};
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tower::BoxError;

use crate::transport::{Compression, decompress};

/// gRPC's message prefix: a compression flag, then the length (big-endian `u32`).
const PREFIX: usize = 5;

/// The reports of one stream, from a request body whose frames hold whole messages (the
/// transport's `BudgetedBody` assembles them).
pub struct Reports<B> {
    body: B,
    /// Whole messages of the last frame not decoded yet.
    frame: Bytes,
    ended: bool,
    /// What the stream's compressed reports are compressed with (its `grpc-encoding`).
    compression: Option<Compression>,
    /// The most bytes a report may decompress to (`--max-request-bytes`).
    max_report_bytes: usize,
}

impl<B> Reports<B> {
    pub fn new(body: B, compression: Option<Compression>, max_report_bytes: usize) -> Self {
        Self {
            body,
            frame: Bytes::new(),
            ended: false,
            compression,
            max_report_bytes,
        }
    }
}

impl<B> futures_util::Stream for Reports<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Item = Result<RateLimitQuotaUsageReports, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if !this.frame.is_empty() {
                let next = next_report(&mut this.frame, this.compression, this.max_report_bytes);
                if next.is_err() {
                    this.ended = true;
                    this.frame = Bytes::new();
                }
                return Poll::Ready(Some(next));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                None => this.ended = true,
                Some(Err(error)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(Status::from_error(error.into()))));
                }
                // Trailers of a request carry nothing a report needs.
                Some(Ok(frame)) => this.frame = frame.into_data().unwrap_or_default(),
            }
        }
    }
}

/// The first message of `frame`, decoded (decompressed first when its flag says so, to at
/// most `max` bytes); `frame` keeps what follows it.
fn next_report(
    frame: &mut Bytes,
    compression: Option<Compression>,
    max: usize,
) -> Result<RateLimitQuotaUsageReports, Status> {
    let (flag, len) = match frame.get(..PREFIX) {
        Some([flag, a, b, c, d]) => (*flag, u32::from_be_bytes([*a, *b, *c, *d]) as usize),
        _ => return Err(split_message()),
    };
    if frame.len() < PREFIX + len {
        return Err(split_message());
    }
    let message = frame.split_to(PREFIX + len).slice(PREFIX..);
    let message = match (flag, compression) {
        (0, _) => message,
        (1, Some(compression)) => decompress(compression, &message, max)?,
        (1, None) => {
            return Err(Status::invalid_argument(
                "a compressed message on a stream that named no grpc-encoding",
            ));
        }
        (other, _) => {
            return Err(Status::invalid_argument(format!(
                "invalid compression flag {other} (0 and 1 are valid)"
            )));
        }
    };
    RateLimitQuotaUsageReports::decode(message).map_err(|error| {
        Status::invalid_argument(format!(
            "the message is not a valid RateLimitQuotaUsageReports: {error}"
        ))
    })
}

/// A frame that ends inside a message: the transport hands on whole messages, so only a
/// server wired without it sees one.
fn split_message() -> Status {
    Status::internal("a request message split over frames reached the RLQS service")
}

/// The task's side of a stream: its responses, then the status it ends with.
pub struct Outbound {
    pub responses: mpsc::Sender<RateLimitQuotaResponse>,
    end: oneshot::Sender<Status>,
}

impl Outbound {
    /// Ends the stream with `status` once its queued responses are sent.
    pub fn end_with(self, status: Status) {
        let _ = self.end.send(status);
    }
}

/// A stream's two sides; at most `capacity` responses wait for the client.
pub fn stream(capacity: usize) -> (Outbound, Responses) {
    let (responses, sent) = mpsc::channel(capacity);
    let (end, ended) = oneshot::channel();
    (
        Outbound { responses, end },
        Responses {
            sent,
            ended,
            done: false,
        },
    )
}

/// The response body of one stream: each response framed as the task sends it, then the
/// trailers: the status the task ended with, `OK` when it just stopped.
pub struct Responses {
    sent: mpsc::Receiver<RateLimitQuotaResponse>,
    ended: oneshot::Receiver<Status>,
    done: bool,
}

impl HttpBody for Responses {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(response) = ready!(self.sent.poll_recv(cx)) {
            return Poll::Ready(Some(Ok(Frame::data(framed(&response)))));
        }
        // Every response is sent; the task is gone or going.
        let status = ready!(Pin::new(&mut self.ended).poll(cx)).unwrap_or_else(|_| Status::ok(""));
        self.done = true;
        let mut trailers = http::HeaderMap::with_capacity(2);
        if let Err(unencodable) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = Status::internal(unencodable.message().to_owned()).add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// `response` with gRPC's prefix.
fn framed(response: &RateLimitQuotaResponse) -> Bytes {
    let len = response.encoded_len();
    let mut framed = BytesMut::with_capacity(PREFIX + len);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // The buffer holds `len` bytes more: encoding cannot run out of room.
    let _ = response.encode(&mut framed);
    framed.freeze()
}

#[cfg(test)]
mod tests;
