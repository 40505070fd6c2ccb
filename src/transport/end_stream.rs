//! A request body that tells a client's reset from the end of its request.
//!
//! hyper ends an HTTP/2 body cleanly on `END_STREAM` and also on `RST_STREAM(NO_ERROR)`: RFC
//! 9113 (§8.1) lets a server answer early that way, and hyper reads the reset alike on both
//! sides. A client that resets its stream has not finished its request, whatever the reason
//! code: gRPC's HTTP/2 mapping reads a client's reset as the call's cancellation. Read as the
//! request's end, the message before the reset would be decided and counted. So when the body
//! ends, the stream's state says which end it was; ended without `END_STREAM`, the body ends
//! with [`ResetBeforeEnd`] instead, which [`super::messages`] answers as it answers a
//! `RST_STREAM(CANCEL)`: the call ends undecided.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body as HttpBody, Frame, SizeHint};
use tower::BoxError;

/// The client reset its stream before its request ended (`RST_STREAM(NO_ERROR)`, which
/// hyper reports as the body's end).
#[derive(Debug, thiserror::Error)]
#[error("the client reset the stream before its request ended")]
pub struct ResetBeforeEnd;

/// A request body whose end is checked against the stream's state (see the module's doc).
/// Its inner body must say truly whether `END_STREAM` came (`is_end_stream` once it has
/// ended), as hyper's HTTP/2 body does.
pub struct EndStreamChecked<B> {
    inner: B,
}

impl<B> EndStreamChecked<B> {
    pub(super) fn new(inner: B) -> Self {
        Self { inner }
    }
}

impl<B> HttpBody for EndStreamChecked<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        Poll::Ready(match frame {
            None if !self.inner.is_end_stream() => Some(Err(ResetBeforeEnd.into())),
            None => None,
            Some(frame) => Some(frame.map_err(Into::into)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;

    use super::*;

    /// A body of one frame whose `is_end_stream` says what the test sets.
    struct Ended {
        frame: Option<Bytes>,
        end_stream_seen: bool,
    }

    impl HttpBody for Ended {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.frame.take().map(|data| Ok(Frame::data(data))))
        }

        fn is_end_stream(&self) -> bool {
            self.frame.is_none() && self.end_stream_seen
        }
    }

    async fn read(end_stream_seen: bool) -> Vec<Result<Bytes, String>> {
        let mut body = EndStreamChecked::new(Ended {
            frame: Some(Bytes::from_static(b"message")),
            end_stream_seen,
        });
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            let done = frame.is_err();
            read.push(
                frame
                    .map(|frame| frame.into_data().unwrap_or_default())
                    .map_err(|error| error.to_string()),
            );
            if done {
                break;
            }
        }
        read
    }

    #[tokio::test]
    async fn a_body_that_ended_with_end_stream_ends_cleanly() {
        assert_eq!(read(true).await, [Ok(Bytes::from_static(b"message"))]);
    }

    #[tokio::test]
    async fn a_body_that_ended_without_end_stream_ends_with_the_reset() {
        assert_eq!(
            read(false).await,
            [
                Ok(Bytes::from_static(b"message")),
                Err(ResetBeforeEnd.to_string())
            ]
        );
    }
}
