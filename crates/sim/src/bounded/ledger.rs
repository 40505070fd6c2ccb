//! The global store's side of a bounded counter: one ledger per counter, changed in one
//! atomic step per region's exchange (one transaction in the database).
//!
//! For each window cell the ledger keeps the previous cell's bound `previous` (at most what
//! the fleet could have admitted in it), the `pool` of rights no region holds, and the
//! `frontier`: the instant of the cell up to which the budget's growth has been shared out
//! among the regions as [`Segment`]s. What the regions may spend of the cell is then at most
//! `budget(frontier) − pool`, and never more than the budget at any instant: segments vest
//! as the budget grows, the pool holds the budget at the cell's start and rights given back.
//!
//! Part of the growth no region demands (the spare) the ledger keeps as its own **reserve**,
//! vesting as the regions' shares do and granted only to asks the pool cannot meet: a region
//! that meets a light counter for the first time in a while finds rights at the ledger, and
//! what nobody asked for was never anyone's to spend.
//!
//! A cell is closed once its growth is shared out to its end, within one horizon of it: no
//! right of it is granted after that, so `budget(window) − pool − the reserve never granted`
//! bounds what the fleet admitted in it, and becomes the next cell's `previous`. The next
//! cell is opened at once, its rights granted ahead (spendable only once a holder's clock is
//! in it).

use std::collections::{BTreeMap, HashMap};

use super::curve::{
    SHARE_UNITS, Segment, budget, interleave, max_min, reserve_of_spare, split, vested,
};

/// The part of a stretch's spare growth the ledger keeps as its reserve. Against none (seed
/// 1, refused vs the ideal limiter): `zipf` 1.36 → 0.51 %, `rfc` 0.87 → 0.49 % (a tenth:
/// 0.60 %, 0.56 %; a half: 0.54 %, 0.49 %); the hot-key scenarios, contended, keep none and
/// are unchanged.
const RESERVE_OF_SPARE: f64 = 0.25;

/// One region's exchange for one counter.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub key: usize,
    /// Requests per ms the region was offered since its last exchange of the counter.
    pub demand: f64,
    /// Rights of a cell given back (sequence, count).
    pub returns: Option<(u64, u64)>,
    /// Rights wanted beyond what the region holds, for the current and the next cell.
    pub need: u64,
}

/// Rights of one cell granted to one region.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub key: usize,
    pub sequence: u64,
    /// The cell's `previous`: its budget curve, which the segments vest along.
    pub previous: u64,
    pub lump: u64,
    pub segments: Vec<Segment>,
    /// Rights the region may hold without giving them back: its share of the pool when the
    /// ledger has more than the askers need (all of it for a lone consumer).
    pub keep: u64,
}

/// The ledger's settings, the same for every counter.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    pub limit: u64,
    pub window_ms: u64,
    /// How far ahead of an exchange growth is shared out.
    pub horizon_ms: u64,
    /// How long before a cell's end it is closed and the next cell opened: every region
    /// exchanges at least once in that time, so it holds the next cell's rights when it
    /// starts.
    pub close_lead_ms: u64,
    /// A region that has not exchanged a counter for this long gets no more of its growth.
    pub member_ttl_ms: u64,
    /// The time constant of a region's demand as the ledger keeps it: each exchange's measure
    /// weighs `1 − e^(−elapsed ÷ this)` against what the ledger had, so the demand is an
    /// average over time, not over exchanges (an ask at once when out of rights measures a
    /// short interval).
    pub demand_memory_ms: u64,
    /// Demands are scaled by this before the fair division: a small consumer's random bursts
    /// find rights; what it does not use it gives back.
    pub headroom: f64,
}

#[derive(Debug)]
struct Cell {
    previous: u64,
    pool: u64,
    frontier_ms: u64,
    closed: bool,
    /// The ledger's share of the growth, vesting as a region's does.
    reserve: Vec<Segment>,
    /// What of the reserve was granted.
    reserve_granted: u64,
}

impl Cell {
    fn new(previous: u64, pool: u64) -> Self {
        Self {
            previous,
            pool,
            frontier_ms: 0,
            closed: false,
            reserve: Vec::new(),
            reserve_granted: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Member {
    /// Requests per ms, averaged over time ([`Terms::demand_memory_ms`]).
    demand: f64,
    /// The last exchange's measure alone: whether the region still sends requests.
    latest: f64,
    seen_ms: u64,
}

#[derive(Debug, Default)]
struct Book {
    cells: BTreeMap<u64, Cell>,
    members: BTreeMap<usize, Member>,
}

/// Grants not yet picked up, per region (rows of the region in the database).
type Unsent = HashMap<usize, Vec<Grant>>;

/// Every counter's book, as the database holds it.
#[derive(Debug)]
pub struct Ledger {
    terms: Terms,
    books: HashMap<usize, Book>,
    unsent: Unsent,
}

impl Ledger {
    pub fn new(terms: Terms) -> Self {
        Self {
            terms,
            books: HashMap::new(),
            unsent: HashMap::new(),
        }
    }

    /// Region `region`'s exchange at `now_ms`, one atomic step: its returns and demands in,
    /// its grants out (every counter's, not only those it asked about).
    pub fn exchange(&mut self, region: usize, asks: &[Ask], now_ms: u64) -> Vec<Grant> {
        for ask in asks {
            let terms = self.terms;
            let book = self.books.entry(ask.key).or_default();
            let mut out = Out {
                key: ask.key,
                unsent: &mut self.unsent,
            };
            book.apply(&terms, region, ask, now_ms, &mut out);
        }
        self.unsent.remove(&region).unwrap_or_default()
    }
}

/// Where a book's grants go: each region's unsent rows.
struct Out<'a> {
    key: usize,
    unsent: &'a mut Unsent,
}

impl Out<'_> {
    fn push(&mut self, region: usize, grant: Grant) {
        let grant = Grant {
            key: self.key,
            ..grant
        };
        self.unsent.entry(region).or_default().push(grant);
    }
}

impl Book {
    fn apply(&mut self, terms: &Terms, region: usize, ask: &Ask, now_ms: u64, out: &mut Out) {
        let window = terms.window_ms.max(1);
        let (sequence, elapsed) = (now_ms / window, now_ms % window);
        let latest = ask.demand.max(0.0);
        let demand = self.members.get(&region).map_or(latest, |member| {
            let elapsed = now_ms.saturating_sub(member.seen_ms) as f64;
            let kept = (-elapsed / terms.demand_memory_ms.max(1) as f64).exp();
            member.demand * kept + latest * (1.0 - kept)
        });
        self.members.insert(
            region,
            Member {
                demand,
                latest,
                seen_ms: now_ms,
            },
        );
        let ttl = terms.member_ttl_ms;
        self.members
            .retain(|_, m| m.seen_ms.saturating_add(ttl) >= now_ms);
        if let Some((returned, count)) = ask.returns
            && let Some(cell) = self.cells.get_mut(&returned)
            && !cell.closed
        {
            cell.pool += count;
        }
        self.open(terms, sequence);
        let ahead = elapsed.saturating_add(terms.horizon_ms);
        // Shared out a horizon ahead once less than half of one is left: fewer, longer
        // segments.
        let frontier = self.cells.get(&sequence).map_or(0, |cell| cell.frontier_ms);
        if frontier < elapsed.saturating_add(terms.horizon_ms / 2) {
            self.extend(terms, sequence, ahead, terms.headroom, out);
        }
        let lone = self.lone(region);
        self.grant_lump(terms, (sequence, elapsed), region, ask, lone, out);
        if elapsed.saturating_add(terms.close_lead_ms) >= window {
            // The rest of the cell's growth goes as demand is, without headroom: what a
            // holder does not spend now is lost with the cell.
            self.extend(terms, sequence, window, 1.0, out);
            self.close(terms, sequence);
            self.extend(
                terms,
                sequence + 1,
                ahead.saturating_sub(window),
                terms.headroom,
                out,
            );
            self.grant_lump(terms, (sequence + 1, 0), region, ask, lone, out);
        }
        // Earlier cells can no longer be spent.
        self.cells.retain(|&s, _| s + 1 >= sequence);
    }

    /// The only member that asks for anything is `region`: the others sent no request since
    /// their last exchange (by that exchange's measure, not the average, which a region whose
    /// requests stopped keeps for a while).
    fn lone(&self, region: usize) -> bool {
        self.members
            .iter()
            .all(|(&r, m)| r == region || m.latest <= 0.0)
    }

    /// Opens cell `sequence` if it is not: its `previous` is what the previous cell's holders
    /// could have spent (closing it if it is still open: its time is over), or 0 if no right
    /// of it was ever granted.
    fn open(&mut self, terms: &Terms, sequence: u64) {
        if self.cells.contains_key(&sequence) {
            return;
        }
        if let Some(before) = sequence.checked_sub(1)
            && self.cells.contains_key(&before)
        {
            self.close(terms, before);
        }
        // Closing opened it; else no right of the previous cell was granted: nothing weighs.
        self.cells
            .entry(sequence)
            .or_insert_with(|| Cell::new(0, terms.limit));
    }

    /// Closes cell `sequence` (no right of it granted again) and opens the next with the
    /// bound of what the closed cell's holders could spend.
    fn close(&mut self, terms: &Terms, sequence: u64) {
        let Some(cell) = self.cells.get_mut(&sequence) else {
            return;
        };
        if cell.closed {
            return;
        }
        cell.closed = true;
        let spendable = budget(
            terms.limit,
            cell.previous,
            terms.window_ms,
            cell.frontier_ms,
        )
        .saturating_sub(cell.pool);
        // The reserve never granted was nobody's to spend.
        let reserved: u64 = cell.reserve.iter().map(Segment::rights).sum();
        let spendable = spendable.saturating_sub(reserved.saturating_sub(cell.reserve_granted));
        let previous = spendable.min(terms.limit);
        let pool = budget(terms.limit, previous, terms.window_ms, 0);
        self.cells
            .entry(sequence + 1)
            .or_insert_with(|| Cell::new(previous, pool));
    }

    /// Shares out cell `sequence`'s growth up to `to_ms` among the members, max-min fair by
    /// their demands (scaled by `headroom`).
    fn extend(&mut self, terms: &Terms, sequence: u64, to_ms: u64, headroom: f64, out: &mut Out) {
        let to_ms = to_ms.min(terms.window_ms);
        let Some(cell) = self.cells.get_mut(&sequence) else {
            return;
        };
        if cell.closed || to_ms <= cell.frontier_ms {
            return;
        }
        let from_ms = cell.frontier_ms;
        cell.frontier_ms = to_ms;
        let growth = budget(terms.limit, cell.previous, terms.window_ms, to_ms)
            - budget(terms.limit, cell.previous, terms.window_ms, from_ms);
        if growth == 0 {
            return;
        }
        // The growth per ms: demands as shares of it.
        let rate = cell.previous as f64 / terms.window_ms.max(1) as f64;
        let members: Vec<(usize, f64)> = self
            .members
            .iter()
            .map(|(&r, m)| (r, m.demand * headroom / rate * SHARE_UNITS as f64))
            .collect();
        let demands: Vec<f64> = members.iter().map(|&(_, d)| d).collect();
        let previous = cell.previous;
        let mut shares = max_min(&demands);
        let reserve = reserve_of_spare(&mut shares, &demands, RESERVE_OF_SPARE);
        shares.push(reserve);
        let mut units = interleave(&split(growth, &shares));
        if let Some(kept) = units.pop().filter(|kept| !kept.is_empty()) {
            cell.reserve.push(Segment {
                vests_at: kept,
                from_ms,
                to_ms,
            });
        }
        for ((region, _), vests_at) in members.into_iter().zip(units) {
            if vests_at.is_empty() {
                continue;
            }
            let segment = Segment {
                vests_at,
                from_ms,
                to_ms,
            };
            out.push(region, Grant::of_segment(sequence, previous, segment));
        }
    }

    /// Grants `region` rights of cell `sequence` (at `elapsed_ms` of it) from the pool: all
    /// of it to a lone consumer, else what it needs or its share of the pool by demand, the
    /// larger: a counter far below its limit spreads over the regions that use it. What the
    /// pool cannot meet of the need comes from the reserve vested by now.
    fn grant_lump(
        &mut self,
        terms: &Terms,
        at: (u64, u64),
        region: usize,
        ask: &Ask,
        lone: bool,
        out: &mut Out,
    ) {
        let ((sequence, elapsed_ms), need) = (at, ask.need);
        let Some(cell) = self.cells.get_mut(&sequence).filter(|cell| !cell.closed) else {
            return;
        };
        let fair = if lone {
            cell.pool
        } else {
            let demands: f64 = self.members.values().map(|m| m.demand).sum();
            let mine = self.members.get(&region).map_or(0.0, |m| m.demand);
            let members = self.members.len().max(1) as u64;
            if demands > 0.0 {
                (cell.pool as f64 * mine / demands) as u64
            } else {
                cell.pool / members
            }
        };
        let mut lump = cell.pool.min(need.max(fair));
        cell.pool -= lump;
        if lump < need {
            let vested = vested(
                &cell.reserve,
                terms.limit,
                cell.previous,
                terms.window_ms,
                elapsed_ms,
            );
            let from_reserve = vested.saturating_sub(cell.reserve_granted).min(need - lump);
            cell.reserve_granted += from_reserve;
            lump += from_reserve;
        }
        out.push(
            region,
            Grant {
                key: 0,
                sequence,
                previous: cell.previous,
                lump,
                segments: Vec::new(),
                keep: fair,
            },
        );
    }
}

impl Grant {
    fn of_segment(sequence: u64, previous: u64, segment: Segment) -> Self {
        Self {
            key: 0,
            sequence,
            previous,
            lump: 0,
            segments: vec![segment],
            keep: 0,
        }
    }
}

#[cfg(test)]
mod tests;
