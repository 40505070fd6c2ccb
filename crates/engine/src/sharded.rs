//! A count that threads add to without sharing a cache line.
//!
//! A count written on every decision (a metric, the engine's tally of decisions on shared
//! cells) would, as one `AtomicU64`, be written by every core on every request: its line
//! would bounce between cores and the hot path would stop scaling with them. Here each thread
//! adds to its own slot (a padded atomic chosen once per thread), and a reader sums the
//! slots. The server's Prometheus counters (`telemetry::ShardedCounter`) are built on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots per count: enough that the threads of a typical machine rarely share one.
const SLOTS: usize = 16;

/// One slot per cache line (128 bytes: adjacent-line prefetching pairs 64-byte lines).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A monotonic count; clones share it.
#[derive(Debug, Clone)]
pub struct ShardedCount {
    slots: Arc<[Slot; SLOTS]>,
}

impl Default for ShardedCount {
    fn default() -> Self {
        Self {
            slots: Arc::new(std::array::from_fn(|_| Slot::default())),
        }
    }
}

/// This thread's slot index, handed out round-robin on first use.
fn slot_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    SLOT.with(|slot| *slot)
}

impl ShardedCount {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        // `slot_index` is below SLOTS by construction: the check is one predictable branch.
        if let Some(slot) = self.slots.get(slot_index()) {
            slot.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The sum of the slots (relaxed reads: a count in progress may be missed, never torn).
    pub fn get(&self) -> u64 {
        self.slots.iter().fold(0u64, |sum, slot| {
            sum.wrapping_add(slot.0.load(Ordering::Relaxed))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_from_many_threads_all_count() {
        let count = ShardedCount::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                let count = count.clone();
                s.spawn(move || (0..1_000).for_each(|_| count.inc()));
            }
        });
        assert_eq!(count.get(), 8_000);
    }
}
