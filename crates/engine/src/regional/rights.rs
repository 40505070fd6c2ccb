//! Rights of `never_above` counters, shared by the processes of one region through its
//! origin (docs/bounded-counter.md, "Across the processes of a region").
//!
//! The origin keeps, per window cell of such a counter, how many rights its processes have
//! **taken**. A process spends a right per unit of cost it admits, and takes more when it
//! has none left. A take is granted only while the sliding rule holds for what was taken:
//!
//! ```text
//! taken(s) + granted + ⌊taken(s − 1) × (window − elapsed) ÷ window⌋ ≤ limit
//! ```
//!
//! Every admission spends a right taken before it, so the region's admissions in a cell never
//! exceed its takes, and the rule on the takes is the rule on the admissions (the weight only
//! decays within a cell: the room at a take is at most the room at any later instant of the
//! cell). Two rules keep that true:
//!
//! - **A cell is closed to takes once a later cell of its counter was taken from.** The later
//!   cell's room was computed from this cell's takes: a take after it would weigh nowhere.
//! - **Only unspent rights go back.** A process gives back rights it will never spend (idle,
//!   of a cell its clock has left, at shutdown): the region's takes shrink, never below what
//!   it admitted. A right given back after its cell was weighed only lowers a later weight.
//!
//! What a process held when it was killed is never given back: it counts as spent until its
//! cell ends, and its weight on the next cell decays to nothing by that cell's end.

use crate::cell_key::CellKey;

/// A process's ask for rights of one cell of a `never_above` counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightsAsk {
    /// The cell: the counter and the window the asking process's clock is in.
    pub cell: CellKey,
    pub limit: u64,
    /// Where the asking process's clock is in the cell (ms since its start).
    pub elapsed_ms: u64,
    /// The previous cell weighs on this one (sliding windows); with fixed windows it does not.
    pub sliding: bool,
    /// How many rights the process wants; it may get fewer (0: the room is spent).
    pub want: u64,
}

/// Rights of a cell that a process gives back: never spent, and never to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightsReturn {
    pub cell: CellKey,
    pub count: u64,
}

/// What a take may grant: the limit less the cell's takes and the previous cell's weight at
/// `elapsed_ms` (the sliding window's rule of `decide`, on takes instead of admissions).
pub fn room(limit: u64, taken: u64, previous_taken: u64, duration_ms: u64, elapsed_ms: u64) -> u64 {
    let duration = u128::from(duration_ms.max(1));
    let left = duration - u128::from(elapsed_ms).min(duration);
    let weight = u128::from(previous_taken) * left / duration;
    u128::from(limit)
        .saturating_sub(weight)
        .saturating_sub(u128::from(taken))
        .try_into()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_is_the_sliding_rule_on_takes() {
        // 100 a window, 60 taken of the previous cell, a quarter in: 45 of it still weighs.
        assert_eq!(room(100, 0, 60, 1_000, 250), 55);
        assert_eq!(room(100, 50, 60, 1_000, 250), 5);
        assert_eq!(room(100, 56, 60, 1_000, 250), 0);
        // the weight decays: more room later in the cell, all of it at the end
        assert_eq!(room(100, 50, 60, 1_000, 750), 35);
        assert_eq!(room(100, 50, 60, 1_000, 1_000), 50);
        // rounded down, as one process deciding alone rounds it
        assert_eq!(room(10, 0, 3, 1_000, 500), 9);
    }

    #[test]
    fn a_huge_window_and_count_do_not_overflow() {
        let year = 366 * 24 * 3_600 * 1_000;
        assert_eq!(
            room(u64::MAX, 0, u64::MAX, year, year / 2),
            u64::MAX - u64::MAX / 2
        );
    }
}
