//! Surges at their onset: cells whose unpublished regional count grows fast, handed to the
//! global counters so they publish and sync them at a fast cadence before the normal tick.
//!
//! Until a region's count is flushed and synced by the others, each region admits alone: when
//! a surge starts in every region at once, the window it starts in admits about the fleet's
//! rate times that delay on top of the limit. The overload cadence shortens the delay only
//! once a process sees denials, which at the onset it does not. This watch looks at the only
//! thing a region knows then, its own count: an admission that takes a cell's unpublished
//! count across the onset threshold, soon after the last flush, queues the cell. One
//! comparison per admission; a lock only for a queued cell (a few per surge).
//!
//! It also queues contended cells: a cell another region also counts, denied here, once per
//! fast tick ([`OnsetWatch::note_contended`]), with its denials counted in the cell, so the
//! global counters can hold the cells that are offered far over their limit at the fast
//! cadence, each by its own overload.
//!
//! The queue holds at most [`MAX_QUEUED`] keys between two fast ticks: a flood of keys that
//! each cross the threshold (many clients surging at once, or one client spreading over
//! identifiers) cannot make it grow with the request rate while the store is slow. A cell
//! left out is no less counted: it publishes and syncs on the normal tick.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Engine;
use super::cell::WindowCell;
use crate::cell_key::{CellKey, CellKeyRef};

/// Keys queued between two takes at the most: far more cells than surge at once in practice
/// (one per hot counter), and a fast tick that publishes this many rows is still one
/// statement of the store's chunk size.
pub const MAX_QUEUED: usize = 1_000;

/// What makes a cell's growth an onset: `threshold(limit)` unpublished hits within
/// `gate` of a flush. Disabled (the default) until the global counters enable it.
#[derive(Default)]
pub struct OnsetWatch {
    /// The fraction of a limit, as `f64` bits; 0: disabled.
    fraction: AtomicU64,
    min_hits: AtomicU64,
    /// Crossings count only before this instant (ms): the last flush plus the span.
    open_until_ms: AtomicU64,
    queued: Mutex<Vec<CellKey>>,
    /// Shared cells denied since the last take (see [`OnsetWatch::note_contended`]).
    contended: Mutex<Vec<CellKey>>,
}

impl OnsetWatch {
    /// Queue cells whose unpublished count reaches `max(⌈fraction × limit⌉, min_hits)`
    /// (again at each multiple of it) while the gate is open; `fraction` 0 disables it.
    pub fn enable(&self, fraction: f64, min_hits: u64) {
        let fraction = if fraction.is_finite() && fraction > 0.0 {
            fraction
        } else {
            0.0
        };
        self.min_hits.store(min_hits.max(1), Ordering::Relaxed);
        self.fraction.store(fraction.to_bits(), Ordering::Relaxed);
    }

    /// The unpublished hits that make an onset of a cell of `limit`; `None`: disabled.
    pub fn threshold(&self, limit: u64) -> Option<u64> {
        let fraction = f64::from_bits(self.fraction.load(Ordering::Relaxed));
        if fraction <= 0.0 {
            return None;
        }
        let of_limit = (limit as f64 * fraction).ceil() as u64;
        Some(of_limit.max(self.min_hits.load(Ordering::Relaxed)))
    }

    /// Count crossings until `until_ms` (the global counters call it after each flush).
    pub fn open_until(&self, until_ms: u64) {
        self.open_until_ms.fetch_max(until_ms, Ordering::Relaxed);
    }

    /// After an admission of `cost` in `cell`: queue its key when the admission took the
    /// unpublished count across the threshold. Only across it, not across each multiple: a
    /// count already over it (merged from a sibling, or left unpublished since long before
    /// the flush) says nothing about the rate since the flush; once queued, the global
    /// counters keep the cell held while it grows by the threshold in each hold.
    pub(super) fn note(
        &self,
        cell: &WindowCell,
        key: &CellKeyRef<'_>,
        cost: u64,
        limit: u64,
        now_ms: u64,
    ) {
        if cost == 0 || now_ms >= self.open_until_ms.load(Ordering::Relaxed) {
            return;
        }
        let Some(threshold) = self.threshold(limit) else {
            return;
        };
        let unpublished = cell.unpublished();
        if unpublished >= threshold && unpublished.saturating_sub(cost) < threshold {
            let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
            if queued.len() < MAX_QUEUED {
                queued.push(key.to_owned_key());
            }
        }
    }

    /// After a denial on `cell`, which another region also counts: queue its key once until
    /// the global counters release it (see `WindowCell::hold`), so the fast cadence holds
    /// the cell while its regions race for what the sliding window frees, and count the
    /// denial in the cell (the per-cell overload). A relaxed add per such denial; a lock once
    /// per cell per fast tick.
    pub(super) fn note_contended(&self, cell: &WindowCell, key: &CellKeyRef<'_>) {
        if !self.is_enabled() {
            return;
        }
        cell.note_denied();
        if !cell.hold() {
            return;
        }
        let mut contended = self
            .contended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if contended.len() < MAX_QUEUED {
            contended.push(key.to_owned_key());
        } else {
            cell.release_hold();
        }
    }

    /// The contended cells queued since the last call.
    pub fn take_contended(&self) -> Vec<CellKey> {
        std::mem::take(
            &mut *self
                .contended
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn is_enabled(&self) -> bool {
        self.fraction.load(Ordering::Relaxed) != 0
    }

    /// The cells queued since the last call.
    pub fn take(&self) -> Vec<CellKey> {
        std::mem::take(&mut *self.queued.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Engine {
    /// The watch for surges at their onset (see [`OnsetWatch`]).
    pub fn onset(&self) -> &OnsetWatch {
        &self.onset
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pn::PnCount;

    fn key() -> CellKey {
        CellKey::new("w", "n", "i", 1_000, 7)
    }

    #[test]
    fn an_admission_across_the_threshold_queues_the_cell() {
        let watch = OnsetWatch::default();
        let cell = WindowCell::default();
        let key = key();
        watch.note(&cell, &key.borrowed(), 1, 600, 0);
        assert!(watch.take().is_empty(), "disabled by default");
        watch.enable(0.02, 20);
        assert_eq!(watch.threshold(600), Some(20));
        assert_eq!(watch.threshold(10_000), Some(200));
        watch.open_until(1_000);
        let at = |hits: u64| WindowCell::seeded(PnCount::new(hits, 0), PnCount::default());
        watch.note(&at(19), &key.borrowed(), 1, 600, 500);
        assert!(watch.take().is_empty(), "19 of 20");
        watch.note(&at(20), &key.borrowed(), 1, 600, 500);
        assert_eq!(watch.take(), vec![key.clone()]);
        watch.note(&at(21), &key.borrowed(), 1, 600, 500);
        assert!(watch.take().is_empty(), "once");
        watch.note(&at(40), &key.borrowed(), 1, 600, 500);
        assert!(
            watch.take().is_empty(),
            "a count that was over the threshold before (merged from the region, or \
             unpublished since long before the flush) is no onset"
        );
        watch.note(&at(20), &key.borrowed(), 1, 600, 1_000);
        assert!(watch.take().is_empty(), "the gate closed");
        let published = at(60);
        published.mark_published(PnCount::new(60, 0));
        watch.open_until(2_000);
        watch.note(&published, &key.borrowed(), 1, 600, 1_500);
        assert!(watch.take().is_empty(), "published counts are no onset");
    }

    #[test]
    fn the_queue_is_bounded_between_two_takes() {
        let watch = OnsetWatch::default();
        watch.enable(0.02, 1);
        watch.open_until(1_000);
        let crossed = WindowCell::seeded(PnCount::new(1, 0), PnCount::default());
        for identifier in 0..MAX_QUEUED + 10 {
            let key = CellKey::new("w", "n", &identifier.to_string(), 1_000, 7);
            watch.note(&crossed, &key.borrowed(), 1, 10, 500);
        }
        assert_eq!(watch.take().len(), MAX_QUEUED);
        let key = key();
        watch.note(&crossed, &key.borrowed(), 1, 10, 500);
        assert_eq!(watch.take(), vec![key], "room again after a take");
    }
}
