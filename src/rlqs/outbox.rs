//! What a stream sends its Envoy, in responses of bounded size, with a bound on how long the
//! Envoy may leave them unread.
//!
//! A tick renews every bucket and each action carries its bucket's id: 20,000 buckets of the
//! largest ids are 320 MB of actions, which one response built them all into. Here actions
//! go out as responses of about [`RESPONSE_BYTES`] each, one waiting at a time, so a stream
//! holds at most one response and the transport's send buffer however many buckets it has.
//! An Envoy that stops reading (it never opens its flow-control window) used to block its
//! stream's task for good: no tick ran, so its buckets were never abandoned and kept their
//! places under the caps. Now a response left unread for `--rlqs-abandon-after` ends the
//! stream, and its buckets with it.

use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use prost::Message;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A response is sent once its actions make this many bytes.
pub const RESPONSE_BYTES: usize = 64 << 10;

/// Why actions could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsent {
    /// The Envoy read nothing for the whole wait.
    Stalled,
    /// The response stream is gone (the Envoy reset the stream).
    Gone,
}

/// Actions on their way to one Envoy.
pub struct Outbox<'a> {
    out: &'a mpsc::Sender<RateLimitQuotaResponse>,
    actions: Vec<BucketAction>,
    bytes: usize,
    /// The longest a response may wait for the Envoy to take it.
    wait: Duration,
    /// While sending, the service's shutdown stops the wait (`None`: the shutdown's own
    /// sends).
    shutdown: Option<&'a CancellationToken>,
}

impl<'a> Outbox<'a> {
    pub fn new(
        out: &'a mpsc::Sender<RateLimitQuotaResponse>,
        wait: Duration,
        shutdown: Option<&'a CancellationToken>,
    ) -> Self {
        Self {
            out,
            actions: Vec::new(),
            bytes: 0,
            wait,
            shutdown,
        }
    }

    /// Adds an action; sends what is gathered once it makes [`RESPONSE_BYTES`].
    pub async fn push(&mut self, action: BucketAction) -> Result<(), Unsent> {
        self.bytes += action.encoded_len();
        self.actions.push(action);
        if self.bytes >= RESPONSE_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Sends what is gathered, if anything.
    pub async fn flush(&mut self) -> Result<(), Unsent> {
        if self.actions.is_empty() {
            return Ok(());
        }
        let response = RateLimitQuotaResponse {
            bucket_action: std::mem::take(&mut self.actions),
        };
        self.bytes = 0;
        let send = tokio::time::timeout(self.wait, self.out.send(response));
        let sent = match self.shutdown {
            Some(shutdown) => tokio::select! {
                sent = send => sent,
                // The stream's loop sees the shutdown next and expires every bucket.
                () = shutdown.cancelled() => return Ok(()),
            },
            None => send.await,
        };
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Unsent::Gone),
            Err(_) => Err(Unsent::Stalled),
        }
    }
}

#[cfg(test)]
mod tests;
