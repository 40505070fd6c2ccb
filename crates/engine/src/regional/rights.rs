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

use xxhash_rust::xxh3::Xxh3;

use super::OriginFuture;
use crate::cell_key::CellKey;

/// Where `never_above` rights are kept when it is not the regional origin: the global
/// counters' store, shared by every region (`global::GlobalRights`). The engine takes from
/// it instead of the origin once one is set (`Engine::keep_rights_in`).
pub trait RightsKeeper: Send + Sync + 'static {
    /// A short name for logs ("mysql", "postgres", "sqlite", "memory").
    fn name(&self) -> &'static str;

    /// How long a take should last a process at its measured demand: it asks for twice that.
    /// A store far away wants fewer, larger takes than the regional origin (whose takes
    /// last a replay interval).
    fn horizon(&self) -> std::time::Duration;

    /// The longest a decision waits for rights from here, its turn behind another
    /// decision's take included: past it, the decision is refused.
    fn timeout(&self) -> std::time::Duration;

    /// As [`RegionalOrigin::take_rights`](super::RegionalOrigin::take_rights).
    fn take<'a>(&'a self, ask: &'a RightsAsk) -> OriginFuture<'a, u64>;

    /// As [`RegionalOrigin::give_back_rights`](super::RegionalOrigin::give_back_rights).
    fn give_back<'a>(&'a self, returns: &'a [RightsReturn]) -> OriginFuture<'a, ()>;
}

/// A counter's rights as a store keeps them in one row: the newest cell taken from, its
/// takes, and the takes of the cell before it (what weighs on the newest). A take of an
/// older cell is refused (it is closed); a take of a later one moves the row on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RightsRow {
    pub newest: u64,
    pub taken: u64,
    pub previous_taken: u64,
}

impl RightsRow {
    /// What a take of `ask` grants from `row` (`None`: the counter has none yet), and the row
    /// to write after it (`None`: nothing changes).
    pub fn take(row: Option<Self>, ask: &RightsAsk) -> (u64, Option<Self>) {
        let sequence = ask.cell.sequence;
        let row = row.unwrap_or(Self {
            newest: sequence,
            ..Self::default()
        });
        let (taken, previous) = if sequence == row.newest {
            (row.taken, row.previous_taken)
        } else if sequence > row.newest {
            let previous = if sequence == row.newest + 1 {
                row.taken
            } else {
                0
            };
            (0, previous)
        } else {
            // A later cell's room was computed from this one's takes: closed.
            return (0, None);
        };
        let weighs = if ask.sliding { previous } else { 0 };
        let granted = ask.want.min(room(
            ask.limit,
            taken,
            weighs,
            ask.cell.duration_ms,
            ask.elapsed_ms,
        ));
        if granted == 0 && sequence == row.newest {
            return (0, None);
        }
        let next = Self {
            newest: sequence,
            taken: taken + granted,
            previous_taken: previous,
        };
        (granted, Some(next))
    }

    /// The row after `count` unspent rights of cell `sequence` came back (`None`: nothing
    /// changes; rights of a cell that no longer weighs are simply gone).
    pub fn give_back(self, sequence: u64, count: u64) -> Option<Self> {
        if sequence == self.newest {
            Some(Self {
                taken: self.taken.saturating_sub(count),
                ..self
            })
        } else if sequence + 1 == self.newest {
            Some(Self {
                previous_taken: self.previous_taken.saturating_sub(count),
                ..self
            })
        } else {
            None
        }
    }

    /// When the row stops mattering (ms since the epoch): two windows after its newest cell
    /// began, no take weighs it.
    pub fn expires_at_ms(&self, duration_ms: u64) -> u64 {
        self.newest
            .saturating_add(2)
            .saturating_mul(duration_ms.max(1))
    }
}

/// The 128-bit identity of a cell's counter under which a store keeps its rights: every
/// process and version computes the same (golden-tested below).
pub fn counter_id(cell: &CellKey) -> [u8; 16] {
    let strings = [&**cell.workspace(), &**cell.namespace(), &*cell.identifier];
    identity_hash(strings, cell.duration_ms, b"rights").to_be_bytes()
}

/// A 128-bit hash of a counter's strings and window, then `tail` (what a cell's sequence, a
/// penalty or its rights add to the counter's identity). Each string goes behind its length:
/// the fields cannot run together.
pub(super) fn identity_hash(strings: [&str; 3], duration_ms: u64, tail: &[u8]) -> u128 {
    let mut hasher = Xxh3::new();
    for field in strings {
        hasher.update(&(field.len() as u64).to_le_bytes());
        hasher.update(field.as_bytes());
    }
    hasher.update(&duration_ms.to_le_bytes());
    hasher.update(tail);
    hasher.digest128()
}

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

    fn ask(sequence: u64, elapsed_ms: u64, want: u64) -> RightsAsk {
        RightsAsk {
            cell: CellKey::new("d", "1:k/", "1:a", 1_000, sequence),
            limit: 100,
            elapsed_ms,
            sliding: true,
            want,
        }
    }

    #[test]
    fn a_row_grants_by_the_rule_moves_on_and_closes_older_cells() {
        let (granted, row) = RightsRow::take(None, &ask(5, 900, 60));
        assert_eq!(granted, 60);
        let row = row.expect("a new row");
        // the next cell, a quarter in: 45 of the 60 weigh
        let (granted, next) = RightsRow::take(Some(row), &ask(6, 250, 100));
        assert_eq!(granted, 55);
        let next = next.expect("moved on");
        assert_eq!((next.newest, next.taken, next.previous_taken), (6, 55, 60));
        // the cell before is closed; nothing left now
        assert_eq!(RightsRow::take(Some(next), &ask(5, 999, 1)), (0, None));
        assert_eq!(RightsRow::take(Some(next), &ask(6, 250, 1)), (0, None));
        // a give-back of either cell lowers what weighs; of an older one, nothing
        assert_eq!(next.give_back(6, 5).map(|r| r.taken), Some(50));
        assert_eq!(next.give_back(5, 20).map(|r| r.previous_taken), Some(40));
        assert_eq!(next.give_back(4, 1), None);
        // a cell two windows on: nothing weighs
        let (granted, _) = RightsRow::take(Some(next), &ask(8, 0, 100));
        assert_eq!(granted, 100);
        assert_eq!(next.expires_at_ms(1_000), 8_000);
    }

    /// Stores keep rights under this id: changing it would split a counter's rights during a
    /// rolling deploy.
    #[test]
    fn the_counter_id_is_stable_and_ignores_the_sequence() {
        let id = counter_id(&CellKey::new("d", "1:k/", "1:a", 1_000, 7));
        assert_eq!(id, counter_id(&CellKey::new("d", "1:k/", "1:a", 1_000, 8)));
        assert_ne!(id, counter_id(&CellKey::new("d", "1:k/", "1:b", 1_000, 7)));
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "1e49a505daefa13fec4fcb6d9d507822");
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
