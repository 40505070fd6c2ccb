//! A gRPC request body as whole messages: every DATA frame it yields holds whole
//! length-prefixed messages, never part of one.
//!
//! A frame that holds whole messages (nearly every request: Envoy's fit in one frame) goes
//! through untouched. A message split over frames is assembled here, its bytes charged to
//! the budget as they arrive ([`super::budget`]), and handed on once whole: so whoever
//! decodes never reserves a message's announced length before its bytes came (tonic
//! reserves it on the prefix), and a message that stops arriving is cut after
//! `--request-timeout` (`DEADLINE_EXCEEDED`), its bytes given back, whatever the stream's
//! kind: a long-lived RLQS stream's pending message too, which no request deadline covers.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Sleep;
use tonic::Status;
use tower::BoxError;

use super::budget::{Class, ConnectionBudget, PREFIX};
use super::end_stream::ResetBeforeEnd;

/// A partial message's first allocation: most split messages are a few frames long.
const FIRST_CAPACITY: usize = 16 << 10;

/// A request body that hands on whole messages only (see the module's doc).
pub struct BudgetedBody<B> {
    inner: B,
    connection: Arc<ConnectionBudget>,
    class: Class,
    /// The message being assembled; empty between messages.
    partial: BytesMut,
    /// The message's whole length with its prefix, once the prefix is in `partial`.
    total: Option<usize>,
    /// Bytes taken from the budget for `partial` (its capacity).
    charged: usize,
    /// What is left of the last frame after the message it completed.
    rest: Bytes,
    /// When the message being assembled must be whole; made on the first split message.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Set once an error was returned: the body yields nothing more.
    failed: bool,
}

impl<B> BudgetedBody<B> {
    pub(super) fn new(inner: B, connection: Arc<ConnectionBudget>, class: Class) -> Self {
        Self {
            inner,
            connection,
            class,
            partial: BytesMut::new(),
            total: None,
            charged: 0,
            rest: Bytes::new(),
            deadline: None,
            failed: false,
        }
    }

    /// The bytes the body holds now against the budget.
    #[cfg(test)]
    pub(super) fn charged(&self) -> usize {
        self.charged
    }

    fn release(&mut self) {
        if self.charged > 0 {
            self.connection.give_back(self.class, self.charged);
            self.charged = 0;
        }
    }

    /// Ends the body with `status`: what it held goes back.
    fn fail(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.failed = true;
        self.partial = BytesMut::new();
        self.rest = Bytes::new();
        self.release();
        Poll::Ready(Some(Err(status)))
    }

    /// Whole messages at the front of `data`, from a message boundary: how many bytes they
    /// take. An announcement over the limit is refused here.
    fn whole_prefix(&self, data: &[u8]) -> Result<usize, Status> {
        let mut at = 0;
        while let Some(prefix) = data.get(at..at + PREFIX) {
            let len = announced(prefix);
            self.check_size(len)?;
            let end = at + PREFIX + len;
            if end > data.len() {
                break;
            }
            at = end;
        }
        Ok(at)
    }

    fn check_size(&self, len: usize) -> Result<(), Status> {
        let max = self.connection.max_message();
        if len > max {
            return Err(Status::resource_exhausted(format!(
                "request message larger than the server's limit of {max} bytes"
            )));
        }
        Ok(())
    }

    /// Grows `partial` to hold `more` bytes, charging the budget for the new capacity.
    fn grow(&mut self, more: usize) -> Result<(), Status> {
        let needed = self.partial.len() + more;
        if needed <= self.partial.capacity() {
            return Ok(());
        }
        let capacity = match self.total {
            // Doubling, from a frame's worth, never past the announced length.
            Some(total) => needed
                .max(self.partial.capacity() * 2)
                .max(FIRST_CAPACITY.min(total))
                .min(total.max(needed)),
            // The prefix itself arrives in pieces.
            None => PREFIX,
        };
        let extra = capacity - self.charged;
        self.connection.take(self.class, extra)?;
        self.charged += extra;
        let mut grown = BytesMut::with_capacity(capacity);
        grown.extend_from_slice(&self.partial);
        self.partial = grown;
        Ok(())
    }

    /// Feeds `data` to the message being assembled; returns the message once whole, with
    /// what is left of `data` in `self.rest`.
    fn assemble(&mut self, mut data: Bytes) -> Result<Option<Bytes>, Status> {
        if self.total.is_none() {
            let take = (PREFIX - self.partial.len()).min(data.len());
            self.grow(take)?;
            self.partial.extend_from_slice(&data.split_to(take));
            if let Some(prefix) = self.partial.get(..PREFIX) {
                let len = announced(prefix);
                self.check_size(len)?;
                self.total = Some(PREFIX + len);
            }
        }
        let Some(total) = self.total else {
            return Ok(None);
        };
        let take = (total - self.partial.len()).min(data.len());
        self.grow(take)?;
        self.partial.extend_from_slice(&data.split_to(take));
        self.rest = data;
        if self.partial.len() < total {
            return Ok(None);
        }
        self.total = None;
        let message = std::mem::take(&mut self.partial).freeze();
        self.release();
        Ok(Some(message))
    }

    /// Starts assembling a message whose first bytes are `data`: its deadline runs from now.
    fn begin(&mut self, data: Bytes) -> Result<Option<Bytes>, Status> {
        let timeout = self.connection.completion();
        let at = tokio::time::Instant::now() + timeout;
        match &mut self.deadline {
            Some(deadline) => deadline.as_mut().reset(at),
            None => self.deadline = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.assemble(data)
    }

    /// A frame's data from a message boundary: the whole messages it begins with, handed on
    /// as they are; a message it only begins is assembled.
    fn split_whole(&mut self, mut data: Bytes) -> Result<Option<Bytes>, Status> {
        let whole = self.whole_prefix(&data)?;
        if whole == data.len() {
            return Ok(Some(data));
        }
        let tail = data.split_off(whole);
        let assembled = self.begin(tail)?;
        if whole > 0 {
            // Cannot be whole already: `whole_prefix` stopped at it.
            debug_assert!(assembled.is_none());
            return Ok(Some(data));
        }
        Ok(assembled)
    }

    /// Whether the message being assembled missed its deadline; registers for the deadline
    /// when it has not.
    fn late(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline
            .as_mut()
            .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready())
    }
}

/// The length a gRPC prefix announces (`prefix` is 5 bytes).
fn announced(prefix: &[u8]) -> usize {
    match prefix {
        [_, a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]) as usize,
        _ => 0,
    }
}

/// The status a call ends with for an error of its request body. A client's reset
/// (`RST_STREAM(CANCEL)`) maps to `CANCELLED`, which tonic's request decoder reads as the
/// request's clean end: the message before the reset would be decided and counted as if the
/// client had finished its request. `ABORTED` instead: a call reset before its request is
/// whole ends undecided, on every path, whatever the reset's code ([`ResetBeforeEnd`]).
fn body_error(error: BoxError) -> Status {
    let reset = error.is::<ResetBeforeEnd>();
    let status = Status::from_error(error);
    if reset || status.code() == tonic::Code::Cancelled {
        return Status::aborted("the client reset the stream before its request was whole");
    }
    status
}

impl<B> Drop for BudgetedBody<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> HttpBody for BudgetedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        loop {
            // What followed the last message completed goes before any new frame.
            if !this.rest.is_empty() {
                let rest = std::mem::take(&mut this.rest);
                match this.split_whole(rest) {
                    Ok(Some(messages)) => return Poll::Ready(Some(Ok(Frame::data(messages)))),
                    Ok(None) => continue,
                    Err(status) => return this.fail(status),
                }
            }
            let assembling = this.total.is_some() || !this.partial.is_empty();
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    if assembling && this.late(cx) {
                        return this.fail(Status::deadline_exceeded(format!(
                            "a request message was not whole {:?} after its first bytes \
                             (--request-timeout)",
                            this.connection.completion()
                        )));
                    }
                    return Poll::Pending;
                }
            };
            let frame = match frame {
                None if assembling => {
                    return this.fail(Status::invalid_argument(
                        "the request ended inside a message",
                    ));
                }
                None => return Poll::Ready(None),
                Some(Err(error)) => return this.fail(body_error(error.into())),
                Some(Ok(frame)) => frame,
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) if assembling => {
                    drop(frame);
                    return this.fail(Status::invalid_argument(
                        "the request's trailers came inside a message",
                    ));
                }
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            };
            let handed = if assembling {
                this.assemble(data)
            } else {
                this.split_whole(data)
            };
            match handed {
                Ok(Some(messages)) => return Poll::Ready(Some(Ok(Frame::data(messages)))),
                Ok(None) => {}
                Err(status) => return this.fail(status),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.partial.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.rest.is_empty() && self.partial.is_empty() {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

#[cfg(test)]
mod tests;
