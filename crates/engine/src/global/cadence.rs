//! When the next flush or sync runs: every `interval` with jitter, anchored to absolute
//! target times so a slow run does not drift the cadence; and which ticks a failing job
//! skips ([`Backoff`]).

use std::time::Duration;

use tokio::time::Instant;

/// Jittered ticks around fixed targets `start + n × interval`.
///
/// Jitter spreads the processes of all regions over the interval (no thundering herd on the
/// database at the same second); the anchor keeps the long-run rate exact whatever each run
/// costs. When a run overruns whole intervals, the missed ticks are skipped, not bunched.
///
/// [`next`](Self::next) advances the target: call it once per tick and keep the instant until
/// it fires (drawing it inside a `select!` loses the tick whenever another branch wins).
pub struct Cadence {
    interval: Duration,
    /// Fraction of the interval each tick may move, e.g. 0.2 for ±20 %.
    jitter: f64,
    target: Instant,
}

impl Cadence {
    pub fn new(interval: Duration, jitter: f64, now: Instant) -> Self {
        Self {
            interval: interval.max(Duration::from_millis(1)),
            jitter: jitter.clamp(0.0, 0.5),
            target: now + interval,
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Tick every `interval` from now on: a shorter one brings the next target forward to at
    /// most `now + interval`; a longer one lets the current target stand.
    pub fn set_interval(&mut self, interval: Duration, now: Instant) {
        let interval = interval.max(Duration::from_millis(1));
        if interval == self.interval {
            return;
        }
        self.interval = interval;
        self.target = self.target.min(now + interval);
    }

    /// The instant of the next tick; `unit` is a random draw in `[0, 1)`.
    pub fn next(&mut self, now: Instant, unit: f64) -> Instant {
        while self.target + self.interval.mul_f64(self.jitter) < now {
            self.target += self.interval;
        }
        let offset = self
            .interval
            .mul_f64(self.jitter * (2.0 * unit - 1.0).abs());
        let fire = if unit < 0.5 {
            self.target.checked_sub(offset).unwrap_or(self.target)
        } else {
            self.target + offset
        };
        self.target += self.interval;
        fire.max(now)
    }
}

/// A circuit breaker for a periodic job: after consecutive failures, skip a growing number
/// of ticks (1, 2, 4, up to 8), so a dead database is not hit on every tick by every process.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    failures: u32,
    skip: u32,
}

impl Backoff {
    pub(super) fn should_run(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    pub(super) fn record(&mut self, ok: bool) {
        if ok {
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.skip = 1 << (self.failures - 1).min(3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stay_within_the_jitter_of_fixed_targets() {
        let start = Instant::now();
        let mut cadence = Cadence::new(Duration::from_secs(10), 0.2, start);
        let fire = cadence.next(start, 0.0);
        assert_eq!(fire, start + Duration::from_secs(8));
        let fire = cadence.next(fire, 0.999_999);
        assert!(
            fire > start + Duration::from_millis(21_990) && fire <= start + Duration::from_secs(22)
        );
        // a run that overran two intervals does not bunch the missed ticks
        let late = start + Duration::from_secs(55);
        let fire = cadence.next(late, 0.5);
        assert_eq!(fire, start + Duration::from_secs(60));
    }

    #[test]
    fn a_shorter_interval_brings_the_next_tick_forward() {
        let start = Instant::now();
        let mut cadence = Cadence::new(Duration::from_secs(10), 0.0, start);
        let now = start + Duration::from_secs(1);
        cadence.set_interval(Duration::from_millis(500), now);
        assert_eq!(cadence.next(now, 0.5), now + Duration::from_millis(500));
        assert_eq!(cadence.next(now, 0.5), now + Duration::from_millis(1_000));
        // Back to the long interval: the target already drawn stands, then 10 s apart.
        cadence.set_interval(Duration::from_secs(10), now);
        assert_eq!(cadence.next(now, 0.5), now + Duration::from_millis(1_500));
        assert_eq!(cadence.next(now, 0.5), now + Duration::from_millis(11_500));
    }
}
