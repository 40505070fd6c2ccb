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
mod tests;
