//! Timeouts and a circuit breaker around any regional origin.
//!
//! A slow origin must not hold cold reads (they sit in front of a decision) and a dead one must
//! not be hammered: after `failure_threshold` consecutive failures the circuit opens and calls
//! fail at once with [`OriginError::CircuitOpen`]; after the cool-down one probe goes through
//! (half-open); its success closes the circuit, its failure reopens it for a longer cool-down.
//!
//! Slow is sick: a call that answers but takes longer than `slow_call` (the read timeout by
//! default) counts as a failure, so a Redis slowed down keeps the circuit open for cold reads
//! (which would each wait the whole read timeout) even while slow replays still succeed.
//! A probe that fails at once (the dropped connection of an origin that just came back) is
//! tried a second time within its deadline, so recovery takes one cool-down (at most
//! `max_open_cooldown`), not two. The final replay at shutdown bypasses the breaker
//! ([`RegionalOrigin::replay_final`]): it is the last chance for its cells.
//!
//! The breaker is a few atomics rather than the `failsafe` crate: failsafe's half-open state
//! lets every call through (not one probe), its state cannot be read for a gauge, and its clock
//! cannot be driven by Tokio's test clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{CellRead, OriginError, OriginFuture, RegionalOrigin};
use crate::cell_key::CellKey;

/// Timeouts and breaker tuning. The defaults are the production values.
#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// A cold read waits at most this long before the engine decides from local counts.
    pub read_timeout: Duration,
    /// A replay batch waits at most this long; its work is queued again on failure.
    pub replay_timeout: Duration,
    /// Consecutive failures that open the circuit.
    pub failure_threshold: u32,
    /// How long the circuit stays open the first time; doubled on each failed probe.
    pub open_cooldown: Duration,
    /// The cool-down never grows past this.
    pub max_open_cooldown: Duration,
    /// A call that succeeds but takes longer than this counts as a failure. `None`: the
    /// read timeout.
    pub slow_call: Option<Duration>,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            read_timeout: Duration::from_millis(50),
            replay_timeout: Duration::from_secs(1),
            failure_threshold: 5,
            open_cooldown: Duration::from_secs(1),
            max_open_cooldown: Duration::from_secs(10),
            slow_call: None,
        }
    }
}

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

/// Any origin behind timeouts and a circuit breaker; itself a [`RegionalOrigin`].
///
/// `O` may be unsized: `GuardedOrigin<dyn RegionalOrigin>` wraps an `Arc<dyn RegionalOrigin>`.
pub struct GuardedOrigin<O: RegionalOrigin + ?Sized> {
    inner: Arc<O>,
    read_timeout: Duration,
    replay_timeout: Duration,
    slow_call: Duration,
    breaker: Breaker,
}

impl<O: RegionalOrigin + ?Sized> GuardedOrigin<O> {
    pub fn new(inner: Arc<O>, settings: GuardSettings) -> Self {
        Self {
            inner,
            read_timeout: settings.read_timeout,
            replay_timeout: settings.replay_timeout,
            slow_call: settings.slow_call.unwrap_or(settings.read_timeout),
            breaker: Breaker::new(&settings),
        }
    }

    pub fn inner(&self) -> &Arc<O> {
        &self.inner
    }

    pub fn circuit_state(&self) -> CircuitState {
        self.breaker.state()
    }

    /// Admits, times and records one call. `call` runs only if admitted, so an open circuit
    /// sends nothing to the origin. A probe that fails fast is tried once more within `limit`.
    async fn guarded<'a, T>(
        &'a self,
        limit: Duration,
        call: impl Fn() -> OriginFuture<'a, T>,
    ) -> Result<T, OriginError> {
        let Some(permit) = self.breaker.admit() else {
            return Err(OriginError::CircuitOpen);
        };
        let started = Instant::now();
        let deadline = started + limit;
        let mut outcome = Self::timed(deadline, limit, call()).await;
        if permit.probe && is_outage(&outcome) && Instant::now() < deadline {
            outcome = Self::timed(deadline, limit, call()).await;
        }
        permit.settle(&outcome, started.elapsed() > self.slow_call);
        outcome
    }

    async fn timed<T>(
        deadline: Instant,
        limit: Duration,
        call: OriginFuture<'_, T>,
    ) -> Result<T, OriginError> {
        match tokio::time::timeout_at(deadline, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(OriginError::Timeout(limit)),
        }
    }
}

/// An error that says the origin is down (not a refused command or a bad value).
fn is_outage<T>(outcome: &Result<T, OriginError>) -> bool {
    matches!(outcome, Err(OriginError::Unavailable(_)))
}

impl<O: RegionalOrigin + ?Sized> RegionalOrigin for GuardedOrigin<O> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn circuit_state(&self) -> CircuitState {
        self.breaker.state()
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(self.guarded(self.read_timeout, move || self.inner.read(key)))
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
        Box::pin(self.guarded(self.replay_timeout, move || self.inner.replay(batch)))
    }

    /// Not admitted by the breaker: tried whatever its state, bounded by the replay timeout
    /// and `deadline`. A success still closes the circuit; a failure does not extend it.
    fn replay_final<'a>(
        &'a self,
        batch: &'a [(CellKey, u64)],
        deadline: Instant,
    ) -> OriginFuture<'a, Vec<u64>> {
        Box::pin(async move {
            let deadline = deadline.min(Instant::now() + self.replay_timeout);
            let outcome =
                Self::timed(deadline, self.replay_timeout, self.inner.replay(batch)).await;
            if outcome.is_ok() {
                self.breaker.on_success();
            }
            outcome
        })
    }
}

/// A consecutive-failures breaker in atomics: it sits on every origin call from many tasks.
struct Breaker {
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
    fn new(settings: &GuardSettings) -> Self {
        let base = millis(settings.open_cooldown);
        Self {
            threshold: settings.failure_threshold.max(1),
            base_cooldown_ms: base,
            max_cooldown_ms: millis(settings.max_open_cooldown).max(base),
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

    fn state(&self) -> CircuitState {
        match self.open_until_ms.load(Ordering::Acquire) {
            0 => CircuitState::Closed,
            until if self.now_ms() < until => CircuitState::Open,
            _ => CircuitState::HalfOpen,
        }
    }

    fn admit(&self) -> Option<Permit<'_>> {
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

    fn on_success(&self) {
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
struct Permit<'b> {
    breaker: &'b Breaker,
    probe: bool,
}

impl<'b> Permit<'b> {
    fn new(breaker: &'b Breaker, probe: bool) -> Self {
        Self { breaker, probe }
    }

    /// Records the outcome; `slow` turns an answer into a failure (see the module doc).
    fn settle<T>(self, outcome: &Result<T, OriginError>, slow: bool) {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[derive(Clone, Copy, Debug)]
    enum Act {
        Answer(u64),
        Fail,
        Hang(Duration),
        Garbage,
        /// One `Unavailable`, then answers with the number.
        FailOnce(u64),
    }

    /// Does what it is told and counts the calls that reached it.
    struct Scripted {
        act: Mutex<Act>,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(act: Act) -> Arc<Self> {
            Arc::new(Self {
                act: Mutex::new(act),
                calls: AtomicUsize::new(0),
            })
        }

        fn set(&self, act: Act) {
            *self.act.lock().unwrap_or_else(|e| e.into_inner()) = act;
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }

        fn run<T: Send + 'static>(
            &self,
            value: impl FnOnce(u64) -> T + Send + 'static,
        ) -> OriginFuture<'_, T> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let act = {
                let mut act = self.act.lock().unwrap_or_else(|e| e.into_inner());
                let now = *act;
                if let Act::FailOnce(n) = now {
                    *act = Act::Answer(n);
                    Act::Fail
                } else {
                    now
                }
            };
            Box::pin(async move {
                match act {
                    Act::Answer(n) => Ok(value(n)),
                    Act::Fail => Err(OriginError::Unavailable("scripted".into())),
                    Act::Hang(d) => {
                        tokio::time::sleep(d).await;
                        Ok(value(0))
                    }
                    Act::Garbage => Err(OriginError::InvalidValue("scripted".into())),
                    Act::FailOnce(n) => Ok(value(n)),
                }
            })
        }
    }

    impl RegionalOrigin for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }

        fn read<'a>(&'a self, _key: &'a CellKey) -> OriginFuture<'a, CellRead> {
            self.run(|n| CellRead { total: n, own: 0 })
        }

        fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
            let len = batch.len();
            self.run(move |n| vec![n; len])
        }
    }

    fn key() -> CellKey {
        CellKey {
            workspace: "d".into(),
            namespace: "1:k/".into(),
            identifier: "1:v".into(),
            duration_ms: 1_000,
            sequence: 1,
        }
    }

    fn guarded(act: Act) -> (Arc<Scripted>, GuardedOrigin<Scripted>) {
        let inner = Scripted::new(act);
        let guard = GuardedOrigin::new(Arc::clone(&inner), GuardSettings::default());
        (inner, guard)
    }

    /// Opens the circuit with the default five failures.
    async fn trip(inner: &Scripted, guard: &GuardedOrigin<Scripted>) {
        inner.set(Act::Fail);
        for _ in 0..5 {
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::Unavailable(_))
            ));
        }
        assert_eq!(guard.circuit_state(), CircuitState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_calls_time_out() {
        let (_inner, guard) = guarded(Act::Hang(Duration::from_secs(5)));
        let start = Instant::now();
        let read = guard.read(&key()).await;
        assert!(matches!(read, Err(OriginError::Timeout(d)) if d == Duration::from_millis(50)));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_millis(60));

        let start = Instant::now();
        let replay = guard.replay(&[(key(), 1)]).await;
        assert!(matches!(replay, Err(OriginError::Timeout(d)) if d == Duration::from_secs(1)));
        assert!(start.elapsed() >= Duration::from_secs(1));
        assert!(start.elapsed() < Duration::from_millis(1_010));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_pass_through() {
        let (_inner, guard) = guarded(Act::Answer(7));
        assert_eq!(guard.read(&key()).await.ok().map(|r| r.total), Some(7));
        assert_eq!(
            guard.replay(&[(key(), 1), (key(), 2)]).await.ok(),
            Some(vec![7, 7])
        );
        assert_eq!(guard.name(), "scripted");
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn n_consecutive_failures_open_the_circuit_and_calls_then_fail_fast() {
        let (inner, guard) = guarded(Act::Fail);
        for _ in 0..4 {
            assert!(guard.read(&key()).await.is_err());
        }
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
        assert!(guard.replay(&[(key(), 1)]).await.is_err());
        assert_eq!(guard.circuit_state(), CircuitState::Open);
        assert_eq!(inner.calls(), 5);

        inner.set(Act::Answer(1));
        for _ in 0..20 {
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::CircuitOpen)
            ));
            assert!(matches!(
                guard.replay(&[(key(), 1)]).await,
                Err(OriginError::CircuitOpen)
            ));
        }
        assert_eq!(inner.calls(), 5, "no call reached the origin while open");
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_failure_count() {
        let (inner, guard) = guarded(Act::Fail);
        for _ in 0..4 {
            assert!(guard.read(&key()).await.is_err());
        }
        inner.set(Act::Answer(1));
        assert!(guard.read(&key()).await.is_ok());
        inner.set(Act::Fail);
        for _ in 0..4 {
            assert!(guard.read(&key()).await.is_err());
        }
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_count_as_failures() {
        let (inner, guard) = guarded(Act::Hang(Duration::from_secs(5)));
        for _ in 0..5 {
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::Timeout(_))
            ));
        }
        assert_eq!(guard.circuit_state(), CircuitState::Open);
        assert_eq!(inner.calls(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn invalid_values_do_not_open_the_circuit() {
        let (inner, guard) = guarded(Act::Garbage);
        for _ in 0..20 {
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::InvalidValue(_))
            ));
        }
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
        assert_eq!(inner.calls(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_lets_one_probe_through_and_its_success_closes() {
        let (inner, guard) = guarded(Act::Fail);
        trip(&inner, &guard).await;
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(guard.circuit_state(), CircuitState::Open);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(guard.circuit_state(), CircuitState::HalfOpen);

        // The probe is slow; a call arriving meanwhile fails fast instead of piling on.
        inner.set(Act::Hang(Duration::from_millis(10)));
        let probe_key = key();
        let (probe, other) = tokio::join!(guard.read(&probe_key), async {
            tokio::task::yield_now().await;
            guard.read(&key()).await
        });
        assert_eq!(probe.ok().map(|r| r.total), Some(0));
        assert!(matches!(other, Err(OriginError::CircuitOpen)));
        assert_eq!(inner.calls(), 6, "only the probe reached the origin");
        assert_eq!(guard.circuit_state(), CircuitState::Closed);

        // Recovered: calls flow, and it takes a fresh run of failures to open again.
        inner.set(Act::Answer(3));
        for _ in 0..10 {
            assert_eq!(guard.read(&key()).await.ok().map(|r| r.total), Some(3));
        }
        inner.set(Act::Fail);
        for _ in 0..4 {
            assert!(guard.read(&key()).await.is_err());
        }
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_for_longer_up_to_the_cap() {
        let (inner, guard) = guarded(Act::Fail);
        trip(&inner, &guard).await;
        // Cool-downs double from 1 s and stop at 10 s.
        for cooldown_ms in [1_000, 2_000, 4_000, 8_000, 10_000, 10_000] {
            tokio::time::advance(Duration::from_millis(cooldown_ms - 1)).await;
            assert_eq!(
                guard.circuit_state(),
                CircuitState::Open,
                "{cooldown_ms} ms"
            );
            tokio::time::advance(Duration::from_millis(1)).await;
            assert_eq!(
                guard.circuit_state(),
                CircuitState::HalfOpen,
                "{cooldown_ms} ms"
            );
            let before = inner.calls();
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::Unavailable(_))
            ));
            // A probe that fails at once is tried a second time, right away.
            assert_eq!(inner.calls(), before + 2, "one probe per cool-down");
            assert_eq!(guard.circuit_state(), CircuitState::Open);
        }
        // Once the cause is gone, the next probe closes the circuit.
        tokio::time::advance(Duration::from_secs(10)).await;
        inner.set(Act::Answer(1));
        assert_eq!(guard.read(&key()).await.ok().map(|r| r.total), Some(1));
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_frees_the_probe_slot() {
        let (inner, guard) = guarded(Act::Fail);
        trip(&inner, &guard).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        inner.set(Act::Hang(Duration::from_secs(60)));
        // The caller gives up on the probe before the guard's own timeout.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), guard.read(&key())).await;
        assert!(gave_up.is_err());
        assert_eq!(guard.circuit_state(), CircuitState::HalfOpen);
        inner.set(Act::Answer(2));
        assert_eq!(guard.read(&key()).await.ok().map(|r| r.total), Some(2));
        assert_eq!(guard.circuit_state(), CircuitState::Closed);
    }

    /// Issue 15, break 13: Redis slowed to 200 ms answers every replay within its 1 s timeout.
    /// Those slow successes must not close the circuit, or every cold read pays the 50 ms read
    /// timeout for the whole slow period.
    #[tokio::test(start_paused = true)]
    async fn slow_successes_keep_the_circuit_open_for_reads() {
        let (inner, guard) = guarded(Act::Hang(Duration::from_millis(200)));
        // Reads time out: the circuit opens.
        for _ in 0..5 {
            assert!(matches!(
                guard.read(&key()).await,
                Err(OriginError::Timeout(_))
            ));
        }
        assert_eq!(guard.circuit_state(), CircuitState::Open);
        let mut read_attempts = 0;
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(100)).await;
            // The replay loop: each replay answers, slowly.
            let replay = guard.replay(&[(key(), 1)]).await;
            assert!(
                matches!(replay, Ok(_) | Err(OriginError::CircuitOpen)),
                "{replay:?}"
            );
            let before = inner.calls();
            let _ = guard.read(&key()).await;
            read_attempts += inner.calls() - before;
        }
        assert_ne!(
            guard.circuit_state(),
            CircuitState::Closed,
            "slow answers must not close the circuit"
        );
        assert!(
            read_attempts <= 2,
            "cold reads must not wait on a slow origin: {read_attempts} reached it in 10 s"
        );
    }

    /// Issue 15, break 13: after an outage the origin answers again, but the first call on it
    /// fails at once (the connection to reopen). The circuit must close within one cool-down
    /// (the README's cap, 10 s) of the origin's return, not after a second one.
    #[tokio::test(start_paused = true)]
    async fn recovery_takes_at_most_one_capped_cool_down() {
        let (inner, guard) = guarded(Act::Fail);
        trip(&inner, &guard).await;
        // A long outage: the cool-down reaches its 10 s cap.
        for _ in 0..6 {
            tokio::time::advance(Duration::from_secs(10)).await;
            let _ = guard.read(&key()).await;
        }
        assert_eq!(guard.circuit_state(), CircuitState::Open);
        // The origin is back; its next answer is a dropped connection, then it works.
        let back = Instant::now();
        inner.set(Act::FailOnce(3));
        let closed_at = loop {
            tokio::time::advance(Duration::from_millis(100)).await;
            let _ = guard.read(&key()).await;
            if guard.circuit_state() == CircuitState::Closed {
                break back.elapsed();
            }
            assert!(back.elapsed() < Duration::from_secs(60), "never closed");
        };
        assert!(
            closed_at <= Duration::from_millis(10_100),
            "closed {closed_at:?} after the origin came back; the README promises at most 10 s"
        );
    }

    /// Issue 15, break 8: SIGTERM soon after an outage: the origin answers again but the
    /// circuit is still open. The final replay must reach it anyway.
    #[tokio::test(start_paused = true)]
    async fn the_final_replay_goes_through_an_open_circuit() {
        let (inner, guard) = guarded(Act::Fail);
        trip(&inner, &guard).await;
        inner.set(Act::Answer(9));
        assert!(matches!(
            guard.replay(&[(key(), 1)]).await,
            Err(OriginError::CircuitOpen)
        ));
        let deadline = Instant::now() + Duration::from_secs(5);
        let last = guard.replay_final(&[(key(), 1)], deadline).await;
        assert_eq!(last.ok(), Some(vec![9]));
        assert_eq!(guard.circuit_state(), CircuitState::Closed);

        // A dead origin: the final replay gives up at its deadline, not later.
        inner.set(Act::Hang(Duration::from_secs(60)));
        let started = Instant::now();
        let deadline = started + Duration::from_millis(300);
        assert!(guard.replay_final(&[(key(), 1)], deadline).await.is_err());
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn wraps_a_dyn_origin() {
        let inner: Arc<dyn RegionalOrigin> = Scripted::new(Act::Answer(4));
        let guard: Arc<dyn RegionalOrigin> =
            Arc::new(GuardedOrigin::new(inner, GuardSettings::default()));
        assert_eq!(guard.read(&key()).await.ok().map(|r| r.total), Some(4));
    }
}
