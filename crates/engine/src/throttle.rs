//! A warning that repeats (every replay tick of an outage, every failed flush) is logged once
//! per interval with the count of the ones suppressed meanwhile: an outage must not flood the
//! log, yet the log must still say it lasted and how often it hit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Lets one occurrence through per interval; counts the others.
#[derive(Debug)]
pub struct Throttle {
    interval_ms: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` before which occurrences are suppressed.
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            epoch: Instant::now(),
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when this occurrence is to be logged, `n` being how many were suppressed
    /// since the last logged one; `None` when it is suppressed (and counted).
    pub fn allow(&self) -> Option<u64> {
        let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Acquire);
        if now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::AcqRel));
        }
        self.suppressed.fetch_add(1, Ordering::AcqRel);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_per_interval_with_the_suppressed_count() {
        let throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.allow(), Some(0));
        // An outage: a warning every 100 ms for 25 s.
        let mut logged = vec![];
        for _ in 0..250 {
            tokio::time::advance(Duration::from_millis(100)).await;
            if let Some(suppressed) = throttle.allow() {
                logged.push(suppressed);
            }
        }
        assert_eq!(
            logged,
            vec![99, 99],
            "one line per 10 s, each saying what it hid"
        );
    }
}
