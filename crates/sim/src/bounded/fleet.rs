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

/// The ledger keeps a region's demand as an average over this many horizons
/// ([`Terms::demand_memory_ms`]): 10.5 s at a sync of 1 s. Against the last exchange's
/// measure alone (seeds 1–3, with the spare of a cell's growth shared evenly and a lone
/// consumer judged by the last measure): `concentrated` 1.44–1.54 % refused vs ideal →
/// 0.68–0.93 %, `zipf` 7.2–7.3 % → 1.33–1.36 %, `rfc` 1.03–1.06 % → 0.87 %. With a lone
/// consumer judged by the average instead, `bursts` went from 0.00–0.03 % to about 22 %
/// (a memory of 4 s): every region's average stays above 0 between bursts, so none is ever
/// alone.
pub(super) const DEMAND_MEMORY_HORIZONS: u64 = 5;

/// A region that holds no right of a counter asks for it alone at once (the request waits
/// for the answer), at most this many times per sync interval and counter. Measured against
/// asking only at the sync (seed 1): refused vs ideal 1.78 → 1.52 % at 10 regions 2×,
/// 14.1 → 7.6 % in `zipf`, 1.38 → 1.11 % in `rfc`, for twice the exchanges (10 → 20 a second
/// at 10 regions 2×); `concentrated` refuses more (1.22 → 1.54 %): its small regions' asks
/// bring rights that expire unspent. Once a sync refused more; four times cost half as many
/// exchanges again for about the same refusals.
const URGENT_ASKS_PER_SYNC: u64 = 2;

/// In a cell's last `LAST_STRETCH_MS`, a request that finds no right (and no ask to wait
/// for) waits `VEST_WAIT_MS` for one to vest at its holder, then is decided again. Rights
/// that vest in a cell's last moments expire unless a request of their holder comes after
/// them; a request just refused is one that came before. Measured at 10 regions offered 2×
/// (seeds 1–3, before the ledger averaged demand): refused vs ideal 0.93, 0.88, 1.07 % →
/// 0.78, 0.81, 0.94 %, at the price of 100 ms on requests refused in the window's last
/// second.
const LAST_STRETCH_MS: u64 = 1_000;
const VEST_WAIT_MS: u64 = 100;

pub(super) struct Region {
    pub(super) counters: HashMap<usize, RegionCounter>,
    pub(super) members: Vec<usize>,
    pub(super) tick: Tick,
}

/// What the fleet does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    Allowed,
    Denied,
    /// No right held, and an ask of the counter alone is on its way: the request waits for
    /// its answer (by the exchange's number), as a service's decision waits for its take.
    Waits(u64),
    /// No right held in the cell's last stretch: decided again at this instant, once a right
    /// may have vested ([`VEST_WAIT_MS`]).
    Rechecks(u64),
}

impl Decision {
    fn of(allowed: bool) -> Self {
        if allowed { Self::Allowed } else { Self::Denied }
    }
}

pub(super) struct Process {
    pub(super) region: usize,
    pub(super) counters: HashMap<usize, ProcessCounter>,
}

/// What a region's ask for one counter depends on besides the counter.
#[derive(Clone, Copy)]
struct AskContext {
    window: u64,
    terms: Terms,
    reach: u64,
    write: u64,
}

impl AskContext {
    /// The region's ask for one counter at `at`: its demand since its last exchange, what it
    /// needs until its next one, and what it holds beyond that, given back.
    fn ask(&self, key: usize, counter: &mut RegionCounter, at: u64) -> Ask {
        let (window, terms, reach) = (self.window, self.terms, self.reach);
        let (sequence, elapsed) = (at / window, at % window);
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
        let back = if elapsed + terms.close_lead_ms + self.write < window {
            available.saturating_sub(need.max(keep))
        } else {
            0
        };
        rights.take(&terms, elapsed, back);
        counter.offered = 0;
        counter.last_exchange_ms = Some(at);
        Ask {
            key,
            demand,
            returns: (back > 0).then_some((sequence, back)),
            need: need.saturating_sub(available - back),
        }
    }
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

    fn ask_context(&self) -> AskContext {
        AskContext {
            window: self.window(),
            terms: self.terms,
            reach: self.reach_ms,
            write: self.scenario.fleet.write_latency_ms,
        }
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
        let context = self.ask_context();
        let sequence = at / context.window;
        let Some(r) = self.regions.get_mut(region) else {
            return Vec::new();
        };
        let mut asks = Vec::new();
        r.counters.retain(|&key, counter| {
            let holds = counter.expire(sequence);
            if counter.offered == 0 && !holds {
                return false;
            }
            asks.push(context.ask(key, counter, at));
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
                counter.asking = None;
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

    /// The fleet's decision on one request to `key` at process `p`, and the exchange this
    /// request sent, if any (its number, and when it reaches the ledger).
    pub(super) fn decide(
        &mut self,
        p: usize,
        key: usize,
        at: u64,
    ) -> (Decision, Option<(u64, u64)>) {
        let Some(region_id) = self.processes.get(p).map(|process| process.region) else {
            return (Decision::Denied, None);
        };
        let Some(region) = self.regions.get_mut(region_id) else {
            return (Decision::Denied, None);
        };
        let counter = region.counters.entry(key).or_default();
        counter.offered += 1;
        // The region's first request for the counter: ask for it at once, alone.
        let cold = counter.asking.is_none() && counter.last_exchange_ms.is_none();
        let mut ask = None;
        if cold {
            counter.last_exchange_ms = Some(at);
            let asks = vec![Ask {
                key,
                demand: 1.0 / self.reach_ms.max(1) as f64,
                returns: None,
                need: 1,
            }];
            let sent = self.send(region_id, asks, at);
            if let Some(counter) = self
                .regions
                .get_mut(region_id)
                .and_then(|region| region.counters.get_mut(&key))
            {
                counter.asking = Some(sent.0);
            }
            ask = Some(sent);
        }
        let alone = self
            .regions
            .get(region_id)
            .is_none_or(|region| region.members.len() == 1);
        if !alone && let Some(process) = self.processes.get_mut(p) {
            process.counters.entry(key).or_default().offered += 1;
        }
        if self.spend(p, key, at) {
            return (Decision::Allowed, ask);
        }
        let context = self.ask_context();
        let Some(counter) = self
            .regions
            .get_mut(region_id)
            .and_then(|region| region.counters.get_mut(&key))
        else {
            return (Decision::Denied, ask);
        };
        if let Some(id) = counter.asking {
            return (Decision::Waits(id), ask);
        }
        // Out of rights: ask for the counter alone at once and wait for the answer, as a
        // service's process takes from the store, at most `URGENT_ASKS_PER_SYNC` times a sync.
        if at >= counter.next_urgent_ms {
            counter.next_urgent_ms = at + self.scenario.fleet.sync_ms / URGENT_ASKS_PER_SYNC;
            let mut urgent = context.ask(key, counter, at);
            urgent.need = urgent.need.max(1);
            let (id, apply_at) = self.send(region_id, vec![urgent], at);
            if let Some(counter) = self
                .regions
                .get_mut(region_id)
                .and_then(|region| region.counters.get_mut(&key))
            {
                counter.asking = Some(id);
            }
            return (Decision::Waits(id), Some((id, apply_at)));
        }
        let (window, elapsed) = (self.window(), at % self.window());
        if elapsed + LAST_STRETCH_MS >= window && elapsed + VEST_WAIT_MS < window {
            return (Decision::Rechecks(at + VEST_WAIT_MS), ask);
        }
        (Decision::Denied, ask)
    }

    /// A request that waited for an ask of its counter (decided when the answer came) or for
    /// a right to vest.
    pub(super) fn decide_after_wait(&mut self, p: usize, key: usize, at: u64) -> Decision {
        Decision::of(self.spend(p, key, at))
    }

    /// The exchange `id` was answered (with or without rights): requests no longer wait for
    /// it.
    pub(super) fn answered(&mut self, region: usize, id: u64) {
        if let Some(r) = self.regions.get_mut(region) {
            for counter in r.counters.values_mut() {
                if counter.asking == Some(id) {
                    counter.asking = None;
                }
            }
        }
    }

    /// Spends one right of `key` at process `p`: its region's, when the region is one
    /// process; else the process's, taken from the region at once when it holds none (as a
    /// cold cell reads its origin). Whether it could.
    fn spend(&mut self, p: usize, key: usize, at: u64) -> bool {
        let (window, terms) = (self.window(), self.terms);
        let (sequence, elapsed) = (at / window, at % window);
        let Some(region_id) = self.processes.get(p).map(|process| process.region) else {
            return false;
        };
        let Some(region) = self.regions.get_mut(region_id) else {
            return false;
        };
        if region.members.len() == 1 {
            let counter = region.counters.entry(key).or_default();
            return counter.rights(sequence).take(&terms, elapsed, 1) == 1;
        }
        let Some(process) = self.processes.get_mut(p) else {
            return false;
        };
        let counter = process.counters.entry(key).or_default();
        counter.enter(sequence);
        if counter.rights == 0 && !self.top_up(p, key, at, false) {
            return false;
        }
        let Some(counter) = self
            .processes
            .get_mut(p)
            .and_then(|process| process.counters.get_mut(&key))
        else {
            return false;
        };
        let allowed = counter.rights > 0;
        counter.rights = counter.rights.saturating_sub(1);
        allowed
    }
}
