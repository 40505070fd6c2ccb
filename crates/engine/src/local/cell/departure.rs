//! A cell leaving the table, for a regional origin that holds only the cells that left it.
//!
//! The in-process origin of a process alone in its region (the embedded default) needs no
//! copy of a live cell's count: the cell in the table is the region's whole count. Keeping
//! one per live cell cost 64 B of resident memory per cell. So such an origin keeps a count
//! only once its cell leaves the table (`RegionalOrigin::keep_evicted`, from the table's
//! eviction), and the replay sends it only the cells that left, or that were created without
//! reading it (their count must be merged back from it).
//!
//! Nothing accepted is lost in between: the eviction marks the cell, then reads its
//! cumulative count; a replay takes the count, then reads the mark (all sequentially
//! consistent). An accept the eviction's read missed was taken by a replay that read its
//! count after it, so that replay read its count after the eviction's read, and so it read the
//! mark too: it sends the cell to the origin.

use std::sync::atomic::Ordering;

use super::WindowCell;
use crate::pn::PnCount;

/// A bit of [`WindowCell::marks`]: the table evicted the cell; its count lives on in the
/// origin.
pub(super) const LEFT: u8 = 8;
/// A bit of [`WindowCell::marks`]: created empty without reading the origin (the global
/// sync's import of other regions' counts): the origin may keep a count of it.
pub(super) const UNSEEDED: u8 = 16;

impl WindowCell {
    /// The table evicts the cell: marks it, then returns this process's cumulative count
    /// for the origin to keep.
    pub fn leave_table(&self) -> PnCount {
        self.marks.fetch_or(LEFT, Ordering::SeqCst);
        let refunds = self.own_refunds.load(Ordering::SeqCst);
        PnCount::new(self.own.load(Ordering::SeqCst), refunds)
    }

    /// Created without reading the origin: its replays go to the origin, which may keep a
    /// count of it from before.
    pub fn mark_unseeded(&self) {
        self.marks.fetch_or(UNSEEDED, Ordering::SeqCst);
    }

    /// Whether an origin that holds only the cells that left the table needs this cell's
    /// replay: it left, or it was created without reading the origin. Read after
    /// [`take_for_replay`](WindowCell::take_for_replay).
    pub fn needs_origin(&self) -> bool {
        self.marks.load(Ordering::SeqCst) & (LEFT | UNSEEDED) != 0
    }
}
