//! A count that threads add to without sharing a cache line.
//!
//! A count written on every decision (a metric, the engine's tally of decisions on shared
//! cells) would, as one `AtomicU64`, be written by every core on every request: its line
//! would bounce between cores and the hot path would stop scaling with them. Here each thread
//! adds to its own slot (a padded atomic chosen once per thread), and a reader sums the
//! slots. A slot is leased to one live thread at a time, which then adds with a plain load and
//! store (no locked instruction); threads beyond the leased slots share the rest atomically.
//! The server's Prometheus counters (`telemetry::ShardedCounter`) are built on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Slots leased to one thread at a time: its adds are a plain load and store, no locked
/// read-modify-write (one fewer per metric per decision).
const LEASED_SLOTS: usize = 12;
/// Slots for threads beyond [`LEASED_SLOTS`] live at once (and for a thread whose lease is
/// already gone at its exit): shared round-robin, so their adds are atomic. 16 slots in all,
/// as before the leases: a count is 2 KiB, and the server keeps five per rule.
const SHARED_SLOTS: usize = 4;
const SLOTS: usize = LEASED_SLOTS + SHARED_SLOTS;

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

/// Which of the leased slots are taken (bit `i`: slot `i`), for every count at once: a thread
/// holds the same slot index in all of them.
static LEASED: AtomicU32 = AtomicU32::new(0);

/// A thread's slot: leased (only this thread writes it, in every count) or shared.
struct Lease {
    index: usize,
    leased: bool,
}

impl Lease {
    fn take() -> Self {
        const ALL: u32 = ((1u64 << LEASED_SLOTS) - 1) as u32;
        let mut taken = LEASED.load(Ordering::Relaxed);
        loop {
            let free = !taken & ALL;
            if free == 0 {
                return Self::shared();
            }
            let index = free.trailing_zeros();
            // Acquire: the previous holder's last adds (released below) are seen by ours.
            match LEASED.compare_exchange_weak(
                taken,
                taken | 1 << index,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Self {
                        index: index as usize,
                        leased: true,
                    };
                }
                Err(now) => taken = now,
            }
        }
    }

    /// One of the shared slots, round-robin.
    fn shared() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        Self {
            index: LEASED_SLOTS + NEXT.fetch_add(1, Ordering::Relaxed) % SHARED_SLOTS,
            leased: false,
        }
    }
}

impl Drop for Lease {
    /// The thread ends: its slot (with its counts, which stay) goes to the next thread.
    fn drop(&mut self) {
        if self.leased {
            LEASED.fetch_and(!(1 << self.index), Ordering::Release);
        }
    }
}

thread_local! {
    static LEASE: Lease = Lease::take();
}

impl ShardedCount {
    pub fn inc(&self) {
        self.add(1);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        // Only while the thread's lease lives; during its teardown, a shared slot.
        let (index, leased) = LEASE
            .try_with(|lease| (lease.index, lease.leased))
            .unwrap_or((LEASED_SLOTS, false));
        // The index is below SLOTS by construction: the check is one predictable branch.
        let Some(slot) = self.slots.get(index) else {
            return;
        };
        if leased {
            // This thread is the slot's only writer: no read-modify-write needed. Relaxed:
            // readers want a recent sum, not an order with anything else.
            let count = slot.0.load(Ordering::Relaxed);
            slot.0.store(count.wrapping_add(n), Ordering::Relaxed);
        } else {
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

    #[test]
    fn more_threads_than_leased_slots_all_count() {
        let count = ShardedCount::default();
        let threads = 3 * LEASED_SLOTS;
        // All alive at once: some must use the shared slots.
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                let (count, barrier) = (count.clone(), &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..1_000).for_each(|_| count.inc());
                    barrier.wait();
                });
            }
        });
        assert_eq!(count.get(), 3_000 * LEASED_SLOTS as u64);
    }

    #[test]
    fn a_slot_passed_to_a_later_thread_keeps_its_count() {
        let count = ShardedCount::default();
        // One after the other: each takes a slot an earlier one gave back.
        for _ in 0..2 * LEASED_SLOTS {
            let count = count.clone();
            std::thread::spawn(move || (0..100).for_each(|_| count.add(2)))
                .join()
                .expect("the thread counts");
        }
        assert_eq!(count.get(), 400 * LEASED_SLOTS as u64);
    }
}
