//! The circuit breaker: after `failure_threshold` consecutive failures the circuit opens and
//! calls fail at once with [`OriginError::CircuitOpen`]; after the cool-down one probe goes
//! through (half-open); its success closes the circuit, its failure reopens it for a longer
//! cool-down (doubling, up to a cap). [`super::GuardedOrigin`] decides what counts as a failure
//! (a slow answer does) and retries a probe that fails fast.
//!
//! The breaker is a few atomics rather than the `failsafe` crate: failsafe's half-open state
//! lets every call through (not one probe), its state cannot be read for a gauge, and its clock
//! cannot be driven by Tokio's test clock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::OriginError;

/// The breaker's state, for a metrics gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through.
    Closed,
    /// Calls fail at once until the cool-down ends.
    Open,
    /// The cool-down ended: the next call is a probe (others keep failing until it answers).
    HalfOpen,
}

impl CircuitState {
    /// 0 closed, 1 half-open, 2 open: higher is worse, for a gauge.
    pub fn as_gauge(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::HalfOpen => 1,
            CircuitState::Open => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::HalfOpen => "half_open",
            CircuitState::Open => "open",
        }
    }
}

/// A consecutive-failures breaker in atomics: it sits on every origin call from many tasks.
pub(super) struct Breaker {
    threshold: u32,
    base_cooldown_ms: u64,
    max_cooldown_ms: u64,
    epoch: Instant,
    /// Consecutive failures while closed.
    failures: AtomicU32,
    /// Milliseconds since `epoch` when the open circuit turns half-open; 0 while closed.
    open_until_ms: AtomicU64,
    /// Openings since the circuit last closed, to grow the cool-down.
    trips: AtomicU32,
    /// A half-open probe is in flight.
    probing: AtomicBool,
}

impl Breaker {
    /// Opens after `failure_threshold` consecutive failures, for `open_cooldown` the first
    /// time, doubled on each failed probe up to `max_open_cooldown`.
    pub(super) fn new(
        failure_threshold: u32,
        open_cooldown: Duration,
        max_open_cooldown: Duration,
    ) -> Self {
        let base = millis(open_cooldown);
        Self {
            threshold: failure_threshold.max(1),
            base_cooldown_ms: base,
            max_cooldown_ms: millis(max_open_cooldown).max(base),
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            trips: AtomicU32::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    /// When a circuit opened now for the `trips`-th time in a row turns half-open (never 0).
    fn deadline(&self, trips: u32) -> u64 {
        let doublings = trips.saturating_sub(1).min(32);
        let cooldown = self
            .base_cooldown_ms
            .saturating_mul(1 << doublings)
            .min(self.max_cooldown_ms);
        self.now_ms().saturating_add(cooldown).max(1)
    }

    pub(super) fn state(&self) -> CircuitState {
        match self.open_until_ms.load(Ordering::Acquire) {
            0 => CircuitState::Closed,
            until if self.now_ms() < until => CircuitState::Open,
            _ => CircuitState::HalfOpen,
        }
    }

    pub(super) fn admit(&self) -> Option<Permit<'_>> {
        match self.state() {
            CircuitState::Closed => Some(Permit::new(self, false)),
            CircuitState::Open => None,
            CircuitState::HalfOpen => {
                self.probing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .ok()?;
                // A probe that failed meanwhile may have reopened the circuit.
                if self.state() == CircuitState::Open {
                    self.probing.store(false, Ordering::Release);
                    return None;
                }
                Some(Permit::new(self, true))
            }
        }
    }

    pub(super) fn on_success(&self) {
        // The origin answered: whatever opened the circuit is over.
        self.failures.store(0, Ordering::Release);
        if self.open_until_ms.swap(0, Ordering::AcqRel) != 0 {
            self.trips.store(0, Ordering::Release);
        }
    }

    fn on_failure(&self, probe: bool) {
        if probe {
            let trips = self.trips.fetch_add(1, Ordering::AcqRel).saturating_add(1);
            self.open_until_ms
                .store(self.deadline(trips), Ordering::Release);
            return;
        }
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        // Late failures of calls admitted before the circuit opened do not extend it.
        if failures >= self.threshold && self.open_until_ms.load(Ordering::Acquire) == 0 {
            let trips = self.trips.load(Ordering::Acquire).saturating_add(1);
            if self
                .open_until_ms
                .compare_exchange(0, self.deadline(trips), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.trips.store(trips, Ordering::Release);
            }
        }
    }
}

/// One admitted call. Dropping it unsettled (the caller gave up) frees the probe slot, so a
/// cancelled probe cannot leave the circuit half-open forever.
pub(super) struct Permit<'b> {
    breaker: &'b Breaker,
    /// The half-open circuit's one probe.
    pub(super) probe: bool,
}

impl<'b> Permit<'b> {
    fn new(breaker: &'b Breaker, probe: bool) -> Self {
        Self { breaker, probe }
    }

    /// Records the outcome; `slow` turns an answer into a failure (see the guard's module doc).
    pub(super) fn settle<T>(self, outcome: &Result<T, OriginError>, slow: bool) {
        match outcome {
            // A bad value is an answer: the origin is up.
            Ok(_) | Err(OriginError::InvalidValue(_)) if !slow => self.breaker.on_success(),
            _ => self.breaker.on_failure(self.probe),
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
