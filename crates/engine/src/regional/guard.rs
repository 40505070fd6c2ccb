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
//! The breaker's state machine is in [`super::breaker`]; this module holds the timeouts and
//! what counts as a failure.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Breaker, CircuitState};
use super::{CellRead, OriginError, OriginFuture, RegionalOrigin};
use crate::cell_key::{CellKey, CounterKey};
use crate::pn::PnCount;
use crate::reachability::Reachability;

/// The span of one call to the origin (exported when tracing is on; disabled, and nearly
/// free, when it is off). `keys`: the cells or counters the call is about.
macro_rules! origin_span {
    ($name:literal, $origin:expr, $keys:expr) => {
        tracing::info_span!(
            target: crate::SPAN_TARGET,
            $name,
            rls.origin = $origin,
            rls.keys = $keys,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        )
    };
}

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

/// Any origin behind timeouts and a circuit breaker; itself a [`RegionalOrigin`].
///
/// `O` may be unsized: `GuardedOrigin<dyn RegionalOrigin>` wraps an `Arc<dyn RegionalOrigin>`.
pub struct GuardedOrigin<O: RegionalOrigin + ?Sized> {
    inner: Arc<O>,
    read_timeout: Duration,
    replay_timeout: Duration,
    slow_call: Duration,
    breaker: Breaker,
    /// Logs the first answer, the circuit opening, and the first answer after it.
    reachability: Reachability,
}

impl<O: RegionalOrigin + ?Sized> GuardedOrigin<O> {
    pub fn new(inner: Arc<O>, settings: GuardSettings) -> Self {
        let reachability = Reachability::new(
            format!("the regional origin ({})", inner.name()),
            "decisions go on from local counts",
        );
        Self {
            reachability,
            inner,
            read_timeout: settings.read_timeout,
            replay_timeout: settings.replay_timeout,
            slow_call: settings.slow_call.unwrap_or(settings.read_timeout),
            breaker: Breaker::new(
                settings.failure_threshold,
                settings.open_cooldown,
                settings.max_open_cooldown,
            ),
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
        match &outcome {
            Ok(_) | Err(OriginError::InvalidValue(_)) => {
                self.reachability.reached();
            }
            Err(error) if self.breaker.state() == CircuitState::Open => {
                self.reachability.lost(error);
            }
            Err(_) => {}
        }
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

/// Runs `call` in `span`, marking the span failed when the call fails.
async fn traced<T>(
    span: tracing::Span,
    call: impl Future<Output = Result<T, OriginError>>,
) -> Result<T, OriginError> {
    if span.is_disabled() {
        return call.await;
    }
    let outcome = tracing::Instrument::instrument(call, span.clone()).await;
    if let Err(error) = &outcome {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", tracing::field::display(error));
    }
    outcome
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

    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        let span = origin_span!("regional.read", self.inner.name(), 1);
        Box::pin(traced(
            span,
            self.guarded(self.read_timeout, move || self.inner.read(key)),
        ))
    }

    fn read_cold<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        let span = origin_span!("regional.read", self.inner.name(), 1);
        Box::pin(traced(
            span,
            self.guarded(self.read_timeout, move || self.inner.read_cold(key)),
        ))
    }

    fn seed<'a>(&'a self, key: &'a CellKey, carried: u64) -> OriginFuture<'a, CellRead> {
        let span = origin_span!("regional.seed", self.inner.name(), 1);
        Box::pin(traced(
            span,
            self.guarded(self.read_timeout, move || self.inner.seed(key, carried)),
        ))
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        let span = origin_span!("regional.replay", self.inner.name(), batch.len());
        Box::pin(traced(
            span,
            self.guarded(self.replay_timeout, move || self.inner.replay(batch)),
        ))
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        let span = origin_span!("regional.penalize", self.inner.name(), penalties.len());
        Box::pin(traced(
            span,
            self.guarded(self.replay_timeout, move || self.inner.penalize(penalties)),
        ))
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        let span = origin_span!("regional.penalty_until", self.inner.name(), 1);
        Box::pin(traced(
            span,
            self.guarded(self.read_timeout, move || self.inner.penalty_until(counter)),
        ))
    }

    fn shares_rights(&self) -> bool {
        self.inner.shares_rights()
    }

    /// Bounded like a read: a decision waits for it.
    fn take_rights<'a>(&'a self, ask: &'a super::RightsAsk) -> OriginFuture<'a, u64> {
        let span = origin_span!("regional.take_rights", self.inner.name(), 1);
        Box::pin(traced(
            span,
            self.guarded(self.read_timeout, move || self.inner.take_rights(ask)),
        ))
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [super::RightsReturn]) -> OriginFuture<'a, ()> {
        let span = origin_span!(
            "regional.give_back_rights",
            self.inner.name(),
            returns.len()
        );
        Box::pin(traced(
            span,
            self.guarded(self.replay_timeout, move || {
                self.inner.give_back_rights(returns)
            }),
        ))
    }

    /// Not admitted by the breaker: tried whatever its state, bounded by the replay timeout
    /// and `deadline`. A success still closes the circuit; a failure does not extend it.
    fn replay_final<'a>(
        &'a self,
        batch: &'a [(CellKey, PnCount)],
        deadline: Instant,
    ) -> OriginFuture<'a, Vec<PnCount>> {
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

#[cfg(test)]
mod tests;
