//! A Prometheus counter that threads increment without sharing a cache line.
//!
//! Every decision increments a few counters. With one `AtomicU64` per counter, every core
//! would write the same cache line on every request, and the line would bounce between cores:
//! the hot path would stop scaling with cores because of its metrics. Here each thread adds
//! to its own slot (a padded atomic chosen once per thread), and a scrape sums the slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Slots per counter: enough that the threads of a typical machine rarely share one.
const SLOTS: usize = 16;

/// One slot per cache line (128 bytes: adjacent-line prefetching pairs 64-byte lines).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A monotonic counter; clones share the count (as `prometheus_client`'s `Counter`).
#[derive(Debug, Clone)]
pub struct ShardedCounter {
    slots: Arc<[Slot; SLOTS]>,
}

impl Default for ShardedCounter {
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

impl ShardedCounter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        // `slot_index` is below SLOTS by construction: the check is one predictable branch.
        if let Some(slot) = self.slots.get(slot_index()) {
            slot.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> u64 {
        self.slots.iter().fold(0u64, |sum, slot| {
            sum.wrapping_add(slot.0.load(Ordering::Relaxed))
        })
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_from_many_threads_all_count() {
        let counter = ShardedCounter::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                let counter = counter.clone();
                s.spawn(move || (0..1_000).for_each(|_| counter.inc()));
            }
        });
        assert_eq!(counter.get(), 8_000);
    }
}
