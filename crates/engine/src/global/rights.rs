//! The rights of `never_above` counters kept in the global counters' store, for every region
//! at once: with the global counters the engine takes from here instead of its regional
//! origin, so the fleet's admissions stay within one rule (`regional::rights`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{GlobalStore, StoreError};
use crate::regional::{OriginError, OriginFuture, RightsAsk, RightsKeeper, RightsReturn};

/// After a failed call, how long calls fail at once instead of trying: a decision that
/// needs a right waits for the store, and a store that does not answer must not hold every
/// such decision for a whole timeout.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long a take from the database should last a process at its measured demand: a take is
/// two statements on a database that may be a region away, so a busy counter takes about once
/// a second per process (a replay interval's worth, as from Redis, made every low-rate
/// request of ten regions a round trip: 50 takes a second for 50 requests).
pub const TAKE_HORIZON: Duration = Duration::from_secs(1);

/// A [`GlobalStore`] as a [`RightsKeeper`], each call bounded by `timeout`, none tried for
/// `RETRY_AFTER` after one failed.
pub struct GlobalRights {
    store: Arc<dyn GlobalStore>,
    timeout: Duration,
    started: Instant,
    /// Until when (ms after `started`) calls fail without trying.
    resting_until_ms: AtomicU64,
}

impl GlobalRights {
    pub fn new(store: Arc<dyn GlobalStore>, timeout: Duration) -> Self {
        Self {
            store,
            timeout,
            started: Instant::now(),
            resting_until_ms: AtomicU64::new(0),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, OriginError> {
        if self.elapsed_ms() < self.resting_until_ms.load(Ordering::Relaxed) {
            return Err(OriginError::CircuitOpen);
        }
        let outcome = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => Err(OriginError::Unavailable(error.to_string())),
            Err(_) => Err(OriginError::Timeout(self.timeout)),
        };
        let rest = u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
        self.resting_until_ms
            .store(self.elapsed_ms().saturating_add(rest), Ordering::Relaxed);
        outcome
    }
}

impl RightsKeeper for GlobalRights {
    fn name(&self) -> &'static str {
        self.store.name()
    }

    fn horizon(&self) -> Duration {
        TAKE_HORIZON
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn take<'a>(&'a self, ask: &'a RightsAsk) -> OriginFuture<'a, u64> {
        Box::pin(self.bounded(self.store.take_rights(ask)))
    }

    fn give_back<'a>(&'a self, returns: &'a [RightsReturn]) -> OriginFuture<'a, ()> {
        Box::pin(self.bounded(self.store.give_back_rights(returns)))
    }
}
