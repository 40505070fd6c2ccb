//! What [`Engine::check`](super::Engine::check) returns: a verdict already taken (the warm
//! path) or the slow path still to run.
//!
//! A warm decision awaits nothing, so it is taken synchronously when `check` is called and
//! only the slow path (a cold cell, a refresh, the region's penalty box) is a future, boxed.
//! Before, `check` was an `async fn`: every warm decision built its whole future (the size of
//! its largest state) and moved it into the caller's, ~160 instructions of a ~700-instruction
//! decision. `.await` works on a [`Check`] as it did on the future
//! ([`IntoFuture`]), so there is one way to use it: call, then await.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Verdict;

/// The slow path of a decision, boxed: its future is large, and it is rare.
pub type SlowCheck<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// A decision: taken already ([`Check::Ready`]) or still to take ([`Check::Slow`]).
/// `.await` it for the verdict; a `Slow` check dropped unawaited decides nothing (no count
/// is consumed), as a dropped future did.
#[must_use = "a check decides nothing until it is awaited"]
pub enum Check<'a> {
    /// Decided from memory; the count is already consumed.
    Ready(Verdict),
    /// Reads the origin (or waits for another caller's read) before deciding.
    Slow(SlowCheck<'a>),
}

impl<'a> IntoFuture for Check<'a> {
    type Output = Verdict;
    type IntoFuture = CheckFuture<'a>;

    #[inline]
    fn into_future(self) -> CheckFuture<'a> {
        CheckFuture(self)
    }
}

/// A [`Check`] being awaited: ready at once, or the slow path's future. Two words and a tag,
/// so the caller's own future stays small.
#[must_use = "futures do nothing unless polled"]
pub struct CheckFuture<'a>(Check<'a>);

impl Future for CheckFuture<'_> {
    type Output = Verdict;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        match &mut self.get_mut().0 {
            Check::Ready(verdict) => Poll::Ready(*verdict),
            Check::Slow(slow) => slow.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(remaining: u64) -> Verdict {
        Verdict {
            allowed: true,
            remaining,
            until_reset_ms: 5,
            seen: 0,
        }
    }

    /// One poll, as an executor's first.
    fn poll_once(check: Check<'_>) -> Poll<Verdict> {
        let mut future = check.into_future();
        Pin::new(&mut future).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_ready_check_awaits_to_its_verdict() {
        assert_eq!(poll_once(Check::Ready(verdict(3))), Poll::Ready(verdict(3)));
    }

    #[test]
    fn a_slow_check_awaits_its_future() {
        let slow = Check::Slow(Box::pin(async { verdict(7) }));
        assert_eq!(poll_once(slow), Poll::Ready(verdict(7)));
    }

    #[test]
    fn a_slow_check_is_pending_while_its_future_is() {
        let slow = Check::Slow(Box::pin(std::future::pending::<Verdict>()));
        assert_eq!(poll_once(slow), Poll::Pending);
    }
}
