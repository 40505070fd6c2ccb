//! Strict mode: after a denial, the counter's next decisions read the origin first.
//!
//! A denial means the region is at its limit, where a few stale counts matter most; so until
//! `now + duration` every decision on that counter refreshes its current cell from the
//! regional origin. Keyed by the counter (`CounterKey`, no sequence), it survives the window
//! rollover.

use std::sync::atomic::{AtomicU64, Ordering};

use super::deadlines::CounterDeadlines;
use crate::cell_key::CounterKeyRef;

/// An evicted deadline only means the counter's next decisions trust the local count until
/// the cell goes stale, as before the denial.
pub struct StrictMode {
    deadlines: CounterDeadlines,
    /// The latest deadline ever entered: no counter is strict at or past it. Every warm
    /// decision with a Redis origin asks [`StrictMode::is_strict`]; while nothing was denied
    /// lately this answers without hashing the counter for a cache lookup (~100 instructions
    /// per decision, measured: BENCHMARKS.md, "The cost of a request").
    latest_until_ms: AtomicU64,
}

impl StrictMode {
    pub fn new(max_bytes: u64) -> Self {
        Self {
            deadlines: CounterDeadlines::new(max_bytes),
            latest_until_ms: AtomicU64::new(0),
        }
    }

    /// The entries' bytes and the most they may weigh.
    pub fn bytes(&self) -> (u64, u64) {
        (self.deadlines.bytes(), self.deadlines.max_bytes())
    }

    pub fn is_strict(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> bool {
        if now_ms >= self.latest_until_ms.load(Ordering::Acquire) {
            return false;
        }
        self.deadlines.ahead(counter, now_ms).is_some()
    }

    pub fn enter(&self, counter: &CounterKeyRef<'_>, until_ms: u64) {
        // Raised before the entry exists, so a reader that finds the entry also passes the
        // check above.
        self.latest_until_ms.fetch_max(until_ms, Ordering::AcqRel);
        self.deadlines.insert(counter.to_owned_key(), until_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::budget::DEADLINE_ENTRY_BYTES;

    #[test]
    fn strict_mode_lasts_a_duration_across_rollover() {
        let counter = CounterKeyRef::for_test("1:a");
        let strict = StrictMode::new(10 * DEADLINE_ENTRY_BYTES);
        assert!(!strict.is_strict(&counter, 5_500));
        strict.enter(&counter, 6_500);
        assert!(strict.is_strict(&counter, 6_000), "the next window too");
        assert!(!strict.is_strict(&counter, 6_500));
    }

    /// The shortcut past the latest deadline answers as the lookup would, for every counter.
    #[test]
    fn past_the_latest_deadline_nothing_is_strict() {
        let strict = StrictMode::new(10 * DEADLINE_ENTRY_BYTES);
        let a = CounterKeyRef::for_test("1:a");
        let b = CounterKeyRef::for_test("1:b");
        strict.enter(&a, 9_000);
        strict.enter(&b, 7_000);
        assert!(strict.is_strict(&a, 8_000));
        assert!(!strict.is_strict(&b, 8_000), "b's own deadline passed");
        assert!(strict.is_strict(&b, 6_999));
        // A later, shorter deadline for `a` replaces its entry; the latest stays an upper bound.
        strict.enter(&a, 7_500);
        assert!(!strict.is_strict(&a, 8_000));
        assert!(!strict.is_strict(&a, 9_000));
        assert!(!strict.is_strict(&b, 9_000));
    }
}
