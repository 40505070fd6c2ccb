//! The penalty box (Fastly Edge Rate Limiting's): a counter that went over a rule with a
//! `penalty` is denied for that long, whatever its window says meanwhile.
//!
//! Keyed by the counter (`CounterKey`, no sequence), so it survives the window rollover, like
//! strict mode. Entering the box is also sent to the regional origin (batched with the replay
//! cycle) so the other processes of the region deny the client too: they read the region's
//! box on a cold cell (every new window) and on a refresh. A failed send only leaves the
//! penalty local to this process.
//!
//! On the warm path a rule with a `penalty` costs one lookup of this box; its slow path one
//! read of the region's box (`RegionalOrigin::penalty_until`).

use std::sync::{Mutex, PoisonError};

use super::deadlines::CounterDeadlines;
use super::{Clock, Engine};
use crate::cell_key::{CounterKey, CounterKeyRef};

/// Penalties waiting for the next send to the origin, at most (a flood of distinct
/// clients entering the box between two replay cycles keeps the rest local).
pub const MAX_PENDING_PENALTIES: usize = 4_096;

/// The penalty box as the server reads it ([`Engine::penalties`]).
#[derive(Clone, Copy)]
pub struct Penalties<'e> {
    penalties: &'e PenaltyBox,
    clock: &'e dyn Clock,
}

impl Engine {
    /// The counters this process holds in its penalty box.
    pub fn penalties(&self) -> Penalties<'_> {
        Penalties {
            penalties: &self.penalties,
            clock: self.clock.as_ref(),
        }
    }
}

impl Penalties<'_> {
    /// Until when this process holds the counter in its penalty box, if it does now.
    pub fn held_until(&self, counter: &CounterKeyRef<'_>) -> Option<u64> {
        self.penalties.held_until(counter, self.clock.now_ms())
    }
}

/// An evicted penalty lets the client back as soon as its window does (documented: a flood
/// of penalized clients past its share of `--max-cell-bytes` forgets the oldest).
pub struct PenaltyBox {
    /// Counter → until when.
    until: CounterDeadlines,
    /// Entered here, not yet sent to the regional origin.
    pending: Mutex<Vec<(CounterKey, u64)>>,
}

impl PenaltyBox {
    pub fn new(max_bytes: u64) -> Self {
        Self {
            until: CounterDeadlines::new(max_bytes),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// The entries' bytes and the most they may weigh.
    pub fn bytes(&self) -> (u64, u64) {
        (self.until.bytes(), self.until.max_bytes())
    }

    /// Until when the counter is held, if it is held at `now_ms`.
    pub fn held_until(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> Option<u64> {
        self.until.ahead(counter, now_ms)
    }

    /// Hold the counter until `until_ms` (a later moment already held wins). `share`: also
    /// send it to the region (false for a penalty the region told us about).
    pub fn enter(&self, counter: &CounterKeyRef<'_>, until_ms: u64, share: bool) {
        if self.until.get(counter).is_some_and(|held| held >= until_ms) {
            return;
        }
        let owned = counter.to_owned_key();
        if share {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.len() < MAX_PENDING_PENALTIES {
                pending.push((owned.clone(), until_ms));
            }
        }
        self.until.insert(owned, until_ms);
    }

    /// The penalties to send to the origin now.
    pub fn take_pending(&self) -> Vec<(CounterKey, u64)> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A send failed: keep what fits for the next cycle (still in force at `now_ms`).
    pub fn give_back(&self, penalties: Vec<(CounterKey, u64)>, now_ms: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let room = MAX_PENDING_PENALTIES.saturating_sub(pending.len());
        pending.extend(
            penalties
                .into_iter()
                .filter(|(_, until)| now_ms < *until)
                .take(room),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::budget::DEADLINE_ENTRY_BYTES;

    #[test]
    fn a_penalty_lasts_its_time_across_rollover_and_is_sent_once() {
        let penalties = PenaltyBox::new(100 * DEADLINE_ENTRY_BYTES);
        let counter = CounterKeyRef::for_test("1:a");
        assert_eq!(penalties.held_until(&counter, 5_500), None);
        penalties.enter(&counter, 65_500, true);
        assert_eq!(penalties.held_until(&counter, 30_000), Some(65_500));
        assert_eq!(penalties.held_until(&counter, 65_500), None);
        // an earlier moment does not shorten it, nor is it sent again
        penalties.enter(&counter, 10_000, true);
        assert_eq!(penalties.held_until(&counter, 30_000), Some(65_500));
        let sent = penalties.take_pending();
        assert_eq!(sent.len(), 1);
        assert!(penalties.take_pending().is_empty());
        penalties.give_back(sent, 70_000);
        assert!(
            penalties.take_pending().is_empty(),
            "expired ones are dropped"
        );
    }

    #[test]
    fn the_pending_queue_is_bounded() {
        let penalties = PenaltyBox::new(1 << 30);
        for i in 0..MAX_PENDING_PENALTIES + 10 {
            let id = format!("{i}");
            penalties.enter(&CounterKeyRef::for_test(&id), 9_000, true);
        }
        assert_eq!(penalties.take_pending().len(), MAX_PENDING_PENALTIES);
    }
}
