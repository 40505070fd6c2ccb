//! The fleet in the bounded mode: regions with the rights they hold (their Redis), processes
//! with theirs, and their exchanges: a region's asks to the ledger, the grants it receives, a
//! process's top-ups, and the decision on one request.

use std::collections::HashMap;

use super::holding::{ProcessCounter, RegionCounter};
use super::ledger::{Ask, Grant, Ledger, Terms};
use crate::scenario::Scenario;
use crate::tick::Tick;

/// Demands are scaled by this in the fair division, and a holder keeps this many times what
/// it expects to spend until its next exchange. More than 1 lets small consumers' bursts find
/// rights, but what they hold unspent when a cell ends is lost: 1.5 refused more in every
/// scenario than 1 (`concentrated`: 2.55 % against 1.22 % of the ideal's admissions).
pub(super) const HEADROOM: f64 = 1.0;

pub(super) struct Region {
    pub(super) counters: HashMap<usize, RegionCounter>,
    pub(super) members: Vec<usize>,
    pub(super) tick: Tick,
}

pub(super) struct Process {
    pub(super) region: usize,
    pub(super) counters: HashMap<usize, ProcessCounter>,
}

pub(super) struct Loop<'a> {
    pub(super) scenario: &'a Scenario,
    pub(super) terms: Terms,
    /// How long until a region's rights are topped up again: its next exchange and the lags.
    pub(super) reach_ms: u64,
    pub(super) copies: u64,
    pub(super) ledger: Ledger,
    pub(super) regions: Vec<Region>,
    pub(super) processes: Vec<Process>,
    pub(super) in_flight: HashMap<u64, (usize, Vec<Ask>)>,
    pub(super) replies: HashMap<u64, (usize, Vec<Grant>)>,
    pub(super) next_exchange: u64,
    pub(super) exchanges: u64,
    pub(super) rows: u64,
}

impl Loop<'_> {
    pub(super) fn window(&self) -> u64 {
        self.terms.window_ms.max(1)
    }

    /// Sends `asks` of `region` to the ledger: applied after the write lag.
    pub(super) fn send(&mut self, region: usize, asks: Vec<Ask>, at: u64) -> (u64, u64) {
        self.next_exchange += 1;
        self.exchanges += 1;
        self.rows += asks.len() as u64;
        self.in_flight.insert(self.next_exchange, (region, asks));
        (
            self.next_exchange,
            at + self.scenario.fleet.write_latency_ms,
        )
    }

    /// Region `region`'s asks at `at`: every counter it was offered or holds rights of; it
    /// gives back what it holds beyond what it expects to spend before its next exchange.
    pub(super) fn asks(&mut self, region: usize, at: u64) -> Vec<Ask> {
        let (window, terms, reach) = (self.window(), self.terms, self.reach_ms);
        let (sequence, elapsed) = (at / window, at % window);
        let write = self.scenario.fleet.write_latency_ms;
        let Some(r) = self.regions.get_mut(region) else {
            return Vec::new();
        };
        let mut asks = Vec::new();
        r.counters.retain(|&key, counter| {
            let holds = counter.expire(sequence);
            if counter.offered == 0 && !holds {
                return false;
            }
            let since = counter
                .last_exchange_ms
                .map_or(reach, |last| at.saturating_sub(last).max(1));
            let demand = counter.offered as f64 / since as f64;
            // Rights of this cell are worth keeping only until it ends.
            let until = reach.min(window - elapsed);
            let need = (demand * until as f64 * HEADROOM).ceil() as u64;
            let keep = counter.keep;
            let rights = counter.rights(sequence);
            let available = rights.available(&terms, elapsed);
            // Given back only while the ledger still takes rights of this cell back.
            let back = if elapsed + terms.close_lead_ms + write < window {
                available.saturating_sub(need.max(keep))
            } else {
                0
            };
            rights.take(&terms, elapsed, back);
            counter.offered = 0;
            counter.last_exchange_ms = Some(at);
            asks.push(Ask {
                key,
                demand,
                returns: (back > 0).then_some((sequence, back)),
                need: need.saturating_sub(available - back),
            });
            true
        });
        asks
    }

    pub(super) fn deliver(&mut self, region: usize, grants: &[Grant], at: u64) {
        let current = at / self.window();
        let copies = self.copies;
        if let Some(r) = self.regions.get_mut(region) {
            for grant in grants {
                let counter = r.counters.entry(grant.key).or_default();
                counter.asking = false;
                counter.receive(grant, current, copies);
            }
        }
    }

    /// A process of a region of several: gives back what it holds beyond a top-up's worth,
    /// or takes up to it from its region (one script call to the region's Redis). The
    /// periodic top-up measures the process's demand; one for a request that found no right
    /// takes at least one.
    pub(super) fn top_up(&mut self, p: usize, key: usize, at: u64, periodic: bool) -> bool {
        let (window, terms) = (self.window(), self.terms);
        let (sequence, elapsed) = (at / window, at % window);
        let replay = self.scenario.fleet.replay_ms.max(1);
        let Some(process) = self.processes.get_mut(p) else {
            return false;
        };
        let Some(region) = self.regions.get_mut(process.region) else {
            return false;
        };
        let Some(counter) = process.counters.get_mut(&key) else {
            return false;
        };
        counter.enter(sequence);
        if periodic {
            counter.demand = counter.offered as f64 / replay as f64;
            counter.offered = 0;
        }
        // A process offered less than a right per top-up holds none: it takes one when a
        // request comes, so a few rights are not scattered over the region's processes.
        let want = ((counter.demand * 2.0 * replay as f64 * HEADROOM).floor() as u64)
            .max(u64::from(!periodic));
        let Some(holding) = region.counters.get_mut(&key) else {
            return counter.rights > 0;
        };
        let rights = holding.rights(sequence);
        if counter.rights > want {
            rights.put_back(counter.rights - want);
            counter.rights = want;
        } else {
            counter.rights += rights.take(&terms, elapsed, want - counter.rights);
        }
        counter.rights > 0
    }

    /// The fleet's decision on one request to `key` at process `p`.
    pub(super) fn decide(&mut self, p: usize, key: usize, at: u64) -> (bool, Option<(u64, u64)>) {
        let (window, terms) = (self.window(), self.terms);
        let (sequence, elapsed) = (at / window, at % window);
        let Some(process) = self.processes.get_mut(p) else {
            return (false, None);
        };
        let region_id = process.region;
        let Some(region) = self.regions.get_mut(region_id) else {
            return (false, None);
        };
        let alone = region.members.len() == 1;
        let counter = region.counters.entry(key).or_default();
        counter.offered += 1;
        // The region's first request for the counter: ask for it at once, alone.
        let cold = !counter.asking && counter.last_exchange_ms.is_none();
        let mut ask = None;
        if cold {
            counter.asking = true;
            counter.last_exchange_ms = Some(at);
            let asks = vec![Ask {
                key,
                demand: 1.0 / self.reach_ms.max(1) as f64,
                returns: None,
                need: 1,
            }];
            ask = Some(self.send(region_id, asks, at));
        }
        let Some(region) = self.regions.get_mut(region_id) else {
            return (false, ask);
        };
        if alone {
            let counter = region.counters.entry(key).or_default();
            let got = counter.rights(sequence).take(&terms, elapsed, 1);
            return (got == 1, ask);
        }
        let Some(process) = self.processes.get_mut(p) else {
            return (false, ask);
        };
        let counter = process.counters.entry(key).or_default();
        counter.enter(sequence);
        counter.offered += 1;
        // Out of rights: take some from the region at once, as a cold cell reads its origin.
        if counter.rights == 0 && !self.top_up(p, key, at, false) {
            return (false, ask);
        }
        let Some(counter) = self
            .processes
            .get_mut(p)
            .and_then(|process| process.counters.get_mut(&key))
        else {
            return (false, ask);
        };
        let allowed = counter.rights > 0;
        counter.rights = counter.rights.saturating_sub(1);
        (allowed, ask)
    }
}
