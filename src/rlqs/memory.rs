//! The bytes RLQS buckets hold, against `--rlqs-max-bucket-bytes` (a pool of the
//! `--max-memory` plan): each bucket its key and its state, each group its counters.
//!
//! Counted, not estimated from a count: a bucket's id can be 16 KiB or 20 bytes, so a cap
//! on buckets alone let 10,460 buckets of the largest ids hold 659 MiB.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes held by every bucket and group of the service.
#[derive(Debug)]
pub struct BucketBytes {
    used: AtomicUsize,
    cap: usize,
}

impl BucketBytes {
    pub fn new(cap: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            cap,
        }
    }

    /// `bytes`, if they fit under the cap.
    pub fn try_charge(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.cap)
            })
            .ok()?;
        Some(Charge {
            pool: Arc::clone(self),
            bytes,
        })
    }

    /// `bytes` whether they fit or not: what an admitted bucket brings with it (its group),
    /// which the bucket's own check allowed for.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        Charge {
            pool: Arc::clone(self),
            bytes,
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// `--rlqs-max-bucket-bytes`.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl crate::admin::HeldBytes for BucketBytes {
    fn held(&self) -> u64 {
        self.used() as u64
    }

    fn budget(&self) -> u64 {
        self.cap as u64
    }
}

/// Bytes taken from [`BucketBytes`], given back when dropped.
#[derive(Debug)]
pub struct Charge {
    pool: Arc<BucketBytes>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pool.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
