//! Strict mode: after a denial, the counter's next decisions read the origin first.
//!
//! A denial means the region is at its limit, where a few stale counts matter most; so until
//! `now + duration` every decision on that counter refreshes its current cell from the
//! regional origin. Keyed by the counter (`CounterKey`, no sequence), it survives the window
//! rollover.

use super::deadlines::CounterDeadlines;
use crate::cell_key::CounterKeyRef;

/// An evicted deadline only means the counter's next decisions trust the local count until
/// the cell goes stale, as before the denial.
pub struct StrictMode {
    deadlines: CounterDeadlines,
}

impl StrictMode {
    pub fn new(max_bytes: u64) -> Self {
        Self {
            deadlines: CounterDeadlines::new(max_bytes),
        }
    }

    pub fn is_strict(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> bool {
        self.deadlines.ahead(counter, now_ms).is_some()
    }

    pub fn enter(&self, counter: &CounterKeyRef<'_>, until_ms: u64) {
        self.deadlines.insert(counter.to_owned_key(), until_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::budget::DEADLINE_ENTRY_BYTES;
    use std::sync::Arc;

    #[test]
    fn strict_mode_lasts_a_duration_across_rollover() {
        let strict = StrictMode::new(10 * DEADLINE_ENTRY_BYTES);
        let (ws, ns): (Arc<str>, Arc<str>) = ("d".into(), "1:k/".into());
        let counter = CounterKeyRef::new(&ws, &ns, "1:a", 1_000);
        assert!(!strict.is_strict(&counter, 5_500));
        strict.enter(&counter, 6_500);
        assert!(strict.is_strict(&counter, 6_000), "the next window too");
        assert!(!strict.is_strict(&counter, 6_500));
    }
}
