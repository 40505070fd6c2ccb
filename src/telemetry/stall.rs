//! The runtime's stall probe: how late a task that sleeps a fixed interval wakes up.
//!
//! A decision waits for a runtime thread. When a task holds one for milliseconds (a long walk
//! of the cell table between two yields, an allocator pass, a large drop) or the kernel takes
//! the thread away, every request queued behind it waits as long, and only the tail of the
//! request latency shows it. This task measures the runtime's side directly: it asks to wake
//! every `interval` and records in `rls_runtime_stall_seconds` how long after its deadline it
//! ran. Its resolution is the timer's (1 ms): wake-ups under 1 ms late are the timer rounding,
//! not a stall. With several workers it measures the worker that happens to run it.
//!
//! Off unless `--stall-probe-interval` is given: each wake-up costs a few microseconds, a
//! cost an operator chooses while looking for stalls.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::Metrics;

/// Wake every `interval`, record each wake-up's lateness, forever (the caller drops it).
pub async fn probe(interval: Duration, metrics: Arc<Metrics>) {
    let mut ticks = tokio::time::interval(interval);
    // After a stall, the next deadline is one interval after the late wake-up: a stall is one
    // sample, not a burst of catch-up ticks each recorded late.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let deadline = ticks.tick().await;
        metrics.runtime_stall(lateness(deadline, Instant::now()));
    }
}

/// How long after `deadline` the task ran.
fn lateness(deadline: Instant, woke: Instant) -> Duration {
    woke.saturating_duration_since(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stall histogram's samples: (all of them, those later than 16 ms).
    fn samples(metrics: &Metrics) -> (u64, u64) {
        let text = metrics.encode();
        let bucket = |le: &str| -> u64 {
            let prefix = format!("rls_runtime_stall_seconds_bucket{{le=\"{le}\"}} ");
            text.lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|count| count.split_whitespace().next())
                .and_then(|count| count.parse().ok())
                .unwrap_or_else(|| panic!("no bucket {le} in\n{text}"))
        };
        let all = bucket("+Inf");
        (all, all - bucket("0.016"))
    }

    /// A runtime thread held past the probe's deadline shows as one late sample; the
    /// following ones are on time again. Paused time: the clock only moves when told.
    #[tokio::test(start_paused = true)]
    async fn a_held_thread_is_recorded_as_one_late_wake_up() {
        let metrics = Arc::new(Metrics::new());
        let probe = tokio::spawn(probe(Duration::from_millis(10), Arc::clone(&metrics)));
        // wake-ups at 0, 10 and 20 ms, on time
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert_eq!(samples(&metrics), (3, 0));
        // the deadline at 30 ms passes while the probe cannot run: the clock jumps 40 ms
        // within this task's turn, as a 40 ms turn would
        tokio::time::advance(Duration::from_millis(40)).await;
        tokio::task::yield_now().await;
        assert_eq!(samples(&metrics), (4, 1));
        // then on time again, from the late wake-up on (no burst of catch-up ticks)
        tokio::time::sleep(Duration::from_millis(31)).await;
        assert_eq!(samples(&metrics), (7, 1));
        probe.abort();
    }

    #[test]
    fn an_early_wake_up_is_not_late() {
        let now = Instant::now();
        assert_eq!(
            lateness(now + Duration::from_millis(1), now),
            Duration::ZERO
        );
        assert_eq!(
            lateness(now, now + Duration::from_millis(3)),
            Duration::from_millis(3)
        );
    }
}
