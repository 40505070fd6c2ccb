//! The holders' side of a bounded counter: a region's rights (kept in its Redis, changed in
//! one script call each) and a process's.
//!
//! A holder spends only rights of the cell its clock is in; rights of a cell it has left are
//! gone (the ledger counted them in the next cell's `previous`).

use std::collections::BTreeMap;

use super::curve::{Segment, vested};
use super::ledger::{Grant, Terms};

/// A holder's rights of one cell.
#[derive(Debug, Default)]
pub struct Rights {
    previous: u64,
    lump: u64,
    segments: Vec<Segment>,
    /// Spent, handed on to a process, or given back.
    used: u64,
    /// What the segments had vested when last computed: they only vest more, so a decision
    /// recomputes only when this is not enough.
    vested: u64,
}

impl Rights {
    pub fn add(&mut self, grant: &Grant, copies: u64) {
        self.previous = grant.previous;
        self.lump += grant.lump * copies;
        for _ in 0..copies {
            self.segments.extend_from_slice(&grant.segments);
        }
    }

    /// Rights a process gives back to its region.
    pub fn put_back(&mut self, count: u64) {
        self.lump += count;
    }

    /// Holds rights (spendable later or now): the holder keeps asking for the counter.
    pub fn holds(&self) -> bool {
        self.lump > self.used || !self.segments.is_empty()
    }

    pub fn available(&mut self, terms: &Terms, elapsed_ms: u64) -> u64 {
        // Segments over by now have vested in full: they join the lump.
        let lump = &mut self.lump;
        self.segments.retain(|s| {
            let over = s.to_ms <= elapsed_ms;
            if over {
                *lump += s.rights();
            }
            !over
        });
        self.vested = vested(
            &self.segments,
            terms.limit,
            self.previous,
            terms.window_ms,
            elapsed_ms,
        );
        (self.lump + self.vested).saturating_sub(self.used)
    }

    /// Takes up to `count` rights: how many it got.
    pub fn take(&mut self, terms: &Terms, elapsed_ms: u64, count: u64) -> u64 {
        let mut got = (self.lump + self.vested)
            .saturating_sub(self.used)
            .min(count);
        if got < count {
            got = self.available(terms, elapsed_ms).min(count);
        }
        self.used += got;
        got
    }
}

/// One region's rights and demand for one counter.
#[derive(Debug, Default)]
pub struct RegionCounter {
    cells: BTreeMap<u64, Rights>,
    /// Requests offered since the last exchange.
    pub offered: u64,
    pub last_exchange_ms: Option<u64>,
    /// The exchange of this counter alone on its way (its first request found no rights):
    /// the requests that find no right meanwhile wait for its answer.
    pub asking: Option<u64>,
    /// Before this instant the region asks for the counter only at its sync
    /// (`fleet::URGENT_ASKS_PER_SYNC`).
    pub next_urgent_ms: u64,
    /// Rights the ledger lets the region keep (its last grant's `keep`).
    pub keep: u64,
}

impl RegionCounter {
    pub fn rights(&mut self, sequence: u64) -> &mut Rights {
        self.cells.entry(sequence).or_default()
    }

    pub fn receive(&mut self, grant: &Grant, current: u64, copies: u64) {
        if grant.sequence >= current {
            self.rights(grant.sequence).add(grant, copies);
            if grant.segments.is_empty() {
                self.keep = grant.keep;
            }
        }
    }

    /// Forgets cells before `current`; whether any right is left to ask about.
    pub fn expire(&mut self, current: u64) -> bool {
        self.cells.retain(|&s, _| s >= current);
        self.cells.values().any(Rights::holds)
    }
}

/// A process's rights of one counter (in a region of several processes): a few taken from
/// the region at a time.
#[derive(Debug, Default)]
pub struct ProcessCounter {
    pub sequence: u64,
    pub rights: u64,
    /// Requests offered since the last periodic top-up.
    pub offered: u64,
    /// Requests per ms, as the last periodic top-up measured.
    pub demand: f64,
}

impl ProcessCounter {
    /// Rights of cell `sequence`: those of an earlier cell are gone.
    pub fn enter(&mut self, sequence: u64) {
        if self.sequence != sequence {
            self.sequence = sequence;
            self.rights = 0;
        }
    }
}
