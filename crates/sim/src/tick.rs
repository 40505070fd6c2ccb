//! The jittered ticks of flush and sync, as the service's `global::cadence` draws them.

use std::time::Duration;

/// Jittered ticks around fixed targets, as the service's `global::cadence` draws them.
pub struct Tick {
    interval: u64,
    jitter: f64,
    target: u64,
    /// The instant the pending event was drawn for; an event at another instant was
    /// superseded by an earlier one (a probe brought it forward).
    pub pending: u64,
}

impl Tick {
    pub fn new(interval: u64, jitter: f64, first_target: u64) -> Self {
        Self {
            interval: interval.max(1),
            jitter: jitter.clamp(0.0, 0.5),
            target: first_target,
            pending: 0,
        }
    }

    /// Like `Cadence::set_interval`: a shorter interval brings the target forward.
    fn set_interval(&mut self, interval: Duration, now: u64) {
        let interval = millis(interval);
        if interval != self.interval {
            self.interval = interval;
            self.target = self.target.min(now + interval);
        }
    }

    pub fn next(&mut self, now: u64, unit: f64) -> u64 {
        let spread = (self.interval as f64 * self.jitter) as u64;
        while self.target + spread < now {
            self.target += self.interval;
        }
        let offset = (self.interval as f64 * self.jitter * (2.0 * unit - 1.0).abs()) as u64;
        let fire = if unit < 0.5 {
            self.target.saturating_sub(offset)
        } else {
            self.target + offset
        };
        self.target += self.interval;
        fire.max(now)
    }

    /// After the job ran at `now`: the next instant at the interval the counters ask for now.
    pub fn reschedule(&mut self, every: Duration, now: u64, unit: f64) -> u64 {
        self.set_interval(every, now);
        self.pending = self.next(now + 1, unit);
        self.pending
    }

    /// A probe, as `GlobalCounters::run`'s: a shorter interval brings the pending instant
    /// forward; returns the new one if it did.
    pub fn bring_forward(
        &mut self,
        every: Duration,
        now: u64,
        unit: impl FnOnce() -> f64,
    ) -> Option<u64> {
        if millis(every) >= self.interval {
            return None;
        }
        self.set_interval(every, now);
        let next = self.next(now + 1, unit());
        (next < self.pending).then(|| {
            self.pending = next;
            next
        })
    }
}

/// A duration as whole milliseconds, at least 1.
pub fn millis(every: Duration) -> u64 {
    u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests;
