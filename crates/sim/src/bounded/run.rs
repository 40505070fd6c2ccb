//! The event loop of the bounded mode: arrivals as in [`crate::sim`], each decided by the
//! rights its process or region holds and, for the reference, by one real engine deciding
//! alone; region exchanges with the ledger every sync interval (write lag there, read lag
//! back), processes' top-ups from their region every replay interval.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use gcounter_engine::cell_key::CounterKeyRef;
use gcounter_engine::recorder::NoRecorder;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Engine, EngineSettings, Hit, ManualClock};
use serde::Serialize;

use super::fleet::{DEMAND_MEMORY_HORIZONS, Decision, HEADROOM, Loop, Process, Region};
use super::ledger::{Ledger, Terms};
use crate::error::SimError;
use crate::never_above::{Admission, Judgement, judge};
use crate::scenario::{Pick, Scenario, Shape};
use crate::sim::{T0_MS, active, exponential, pick, zipf_cdf};
use crate::tick::Tick;

/// The ideal engine's housekeeping (its replay queue and reaper).
const HOUSEKEEPING_MS: u64 = 1_000;

/// One scenario's result in the bounded mode. Deterministic for a seed.
#[derive(Debug, Clone, Serialize)]
pub struct BoundedReport {
    pub scenario: String,
    pub seed: u64,
    pub regions: usize,
    pub processes: usize,
    pub sync_ms: u64,
    pub write_latency_ms: u64,
    pub read_latency_ms: u64,
    pub virtual_s: u64,
    /// (counter, window)s measured: whole windows after the first.
    pub windows: usize,
    /// Admitted by the ideal single limiter fed the same arrivals, and by the fleet, in them.
    pub ideal_admitted: u64,
    pub admitted: u64,
    /// Σ over those windows of what the ideal admitted beyond the fleet, ÷ the ideal's
    /// admissions: the refusals the single limiter would not have made.
    pub refused_vs_ideal: f64,
    /// The same over the run's first window (traffic starts with the run: the onset).
    pub onset_refused_vs_ideal: f64,
    /// "Never above", judged from the log of admissions (every window, the first included).
    pub never_above: Judgement,
    pub requests: u64,
    pub denied_fraction: f64,
    pub ideal_denied_fraction: f64,
    /// Exchanges with the global store (one transaction each) per second, and the counters
    /// they carry (asked and granted).
    pub exchanges_per_s: f64,
    pub rows_per_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(usize),
    /// A region's exchange with the ledger, every sync interval.
    Exchange(usize),
    /// An exchange reaches the ledger (by its number).
    Apply(u64),
    /// The ledger's grants reach the region.
    Deliver(u64),
    /// A process of a region of several gives back or tops up its rights.
    TopUp(usize),
    Housekeeping,
    /// A request (its process and key) that waited for a right to vest is decided again.
    Recheck(usize, usize),
}

/// Run one scenario in the bounded mode.
pub fn run(scenario: &Scenario, seed: u64) -> Result<BoundedReport, SimError> {
    run_granting(scenario, seed, 1)
}

/// [`run`] with every grant delivered twice: a fleet that spends rights it was never given.
#[cfg(test)]
pub(crate) fn run_double_granting(
    scenario: &Scenario,
    seed: u64,
) -> Result<BoundedReport, SimError> {
    run_granting(scenario, seed, 2)
}

fn run_granting(scenario: &Scenario, seed: u64, copies: u64) -> Result<BoundedReport, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(SimError::Runtime)?;
    runtime.block_on(simulate(scenario, seed, copies))
}

async fn simulate(scenario: &Scenario, seed: u64, copies: u64) -> Result<BoundedReport, SimError> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let fleet = &scenario.fleet;
    let window = scenario.window_ms.max(1);
    let sync_ms = fleet.sync_ms.max(1);
    let lags = fleet.write_latency_ms + fleet.read_latency_ms;
    let reach_ms = (sync_ms as f64 * (1.0 + fleet.jitter)).ceil() as u64 + lags;
    let horizon_ms = 2 * sync_ms + lags;
    let terms = Terms {
        limit: scenario.limit,
        window_ms: window,
        horizon_ms,
        close_lead_ms: reach_ms + fleet.write_latency_ms,
        member_ttl_ms: 2 * horizon_ms,
        demand_memory_ms: DEMAND_MEMORY_HORIZONS * horizon_ms,
        headroom: HEADROOM,
    };
    let mut regions = Vec::new();
    let mut processes = Vec::new();
    for (region, &count) in fleet.processes.iter().enumerate() {
        let mut members = Vec::new();
        for _ in 0..count.max(1) {
            members.push(processes.len());
            processes.push(Process {
                region,
                counters: HashMap::new(),
            });
        }
        regions.push(Region {
            counters: HashMap::new(),
            members,
            tick: Tick::new(sync_ms, fleet.jitter, T0_MS + rng.u64(..sync_ms)),
        });
    }
    let mut state = Loop {
        scenario,
        terms,
        reach_ms,
        copies,
        ledger: Ledger::new(terms),
        regions,
        processes,
        in_flight: HashMap::new(),
        replies: HashMap::new(),
        next_exchange: 0,
        exchanges: 0,
        rows: 0,
    };

    // The reference: one real engine deciding every request alone.
    let clock = Arc::new(ManualClock::new(T0_MS));
    let ideal = Engine::new(
        EngineSettings {
            max_cells: 200_000,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(200_000)),
        clock.clone(),
        Arc::new(NoRecorder),
    );

    let end = T0_MS + scenario.run_ms;
    let mut events = BinaryHeap::new();
    let mut order = 0u64;
    let mut push = |events: &mut BinaryHeap<Reverse<(u64, u64, Event)>>, at: u64, event: Event| {
        order += 1;
        events.push(Reverse((at, order, event)));
    };
    for (i, source) in scenario.sources.iter().enumerate() {
        if source.rate > 0.0 {
            let start = match source.shape {
                Shape::From(start) => T0_MS + start,
                _ => T0_MS,
            };
            push(
                &mut events,
                start + exponential(&mut rng, source.rate),
                Event::Arrival(i),
            );
        }
    }
    for (r, region) in state.regions.iter_mut().enumerate() {
        region.tick.pending = region.tick.next(T0_MS, rng.f64());
        push(&mut events, region.tick.pending, Event::Exchange(r));
        if region.members.len() > 1 {
            for &p in &region.members {
                let first = T0_MS + rng.u64(..fleet.replay_ms.max(1));
                push(&mut events, first, Event::TopUp(p));
            }
        }
    }
    push(&mut events, T0_MS + HOUSEKEEPING_MS, Event::Housekeeping);

    let zipf: HashMap<usize, Vec<f64>> = scenario
        .sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s.pick {
            Pick::Zipf { keys, s } => Some((i, zipf_cdf(keys, s))),
            Pick::Key(_) => None,
        })
        .collect();
    let scope = gcounter_engine::cell_key::Scope::new("sim", "3:key/");
    let identifiers: Vec<String> = (0..scenario.keys).map(|k| format!("k{k}")).collect();
    // (key, sequence) of every arrival → the ideal's admissions there
    let mut cells: HashMap<(usize, u64), u64> = HashMap::new();
    let mut outcomes = Outcomes::default();
    // An ask on its way (by its exchange's number) → the requests waiting for its answer.
    let mut waiting: HashMap<u64, Vec<(usize, usize)>> = HashMap::new();
    let (mut requests, mut ideal_denied) = (0u64, 0u64);

    while let Some(Reverse((at, _, event))) = events.pop() {
        if at >= end {
            break;
        }
        clock.set(at);
        match event {
            Event::Arrival(i) => {
                let Some(source) = scenario.sources.get(i) else {
                    continue;
                };
                push(
                    &mut events,
                    at + exponential(&mut rng, source.rate),
                    Event::Arrival(i),
                );
                if !active(source.shape, at - T0_MS, window) {
                    continue;
                }
                let key = match source.pick {
                    Pick::Key(key) => key,
                    Pick::Zipf { .. } => {
                        let u = rng.f64();
                        zipf.get(&i)
                            .map_or(0, |cdf| cdf.partition_point(|&c| c < u))
                    }
                }
                .min(scenario.keys.saturating_sub(1));
                let process = pick(&mut rng, &source.regions)
                    .and_then(|region| state.regions.get(region))
                    .and_then(|region| pick(&mut rng, &region.members));
                let (Some(p), Some(identifier)) = (process, identifiers.get(key)) else {
                    continue;
                };
                let reference = ideal
                    .check(Hit {
                        counter: CounterKeyRef::new(&scope, identifier, window),
                        limit: scenario.limit,
                        cost: 1,
                        exact: false,
                    })
                    .await;
                let (decision, ask) = state.decide(p, key, at);
                if let Some((id, apply_at)) = ask {
                    push(&mut events, apply_at, Event::Apply(id));
                }
                requests += 1;
                let ideal_cell = cells.entry((key, at / window)).or_default();
                if reference.allowed {
                    *ideal_cell += 1;
                } else {
                    ideal_denied += 1;
                }
                match decision {
                    Decision::Waits(id) => waiting.entry(id).or_default().push((p, key)),
                    Decision::Rechecks(when) => push(&mut events, when, Event::Recheck(p, key)),
                    decided => outcomes.record(decided, key, at, window),
                }
            }
            Event::Exchange(r) => {
                let asks = state.asks(r, at);
                let (id, apply_at) = state.send(r, asks, at);
                push(&mut events, apply_at, Event::Apply(id));
                if let Some(region) = state.regions.get_mut(r) {
                    let next = region.tick.next(at + 1, rng.f64());
                    region.tick.pending = next;
                    push(&mut events, next, Event::Exchange(r));
                }
            }
            Event::Apply(id) => {
                if let Some((region, asks)) = state.in_flight.remove(&id) {
                    let grants = state.ledger.exchange(region, &asks, at);
                    state.rows += grants.len() as u64;
                    state.replies.insert(id, (region, grants));
                    push(&mut events, at + fleet.read_latency_ms, Event::Deliver(id));
                }
            }
            Event::Deliver(id) => {
                if let Some((region, grants)) = state.replies.remove(&id) {
                    state.deliver(region, &grants, at);
                    state.answered(region, id);
                }
                // Admitted (or not) now: the oracle and the windows see them at this time.
                for (p, key) in waiting.remove(&id).unwrap_or_default() {
                    let decided = state.decide_after_wait(p, key, at);
                    outcomes.record(decided, key, at, window);
                }
            }
            Event::TopUp(p) => {
                let keys: Vec<usize> = state
                    .processes
                    .get(p)
                    .map(|process| process.counters.keys().copied().collect())
                    .unwrap_or_default();
                for key in keys {
                    state.top_up(p, key, at, true);
                }
                if let Some(process) = state.processes.get_mut(p) {
                    let sequence = at / window;
                    process
                        .counters
                        .retain(|_, c| c.sequence == sequence && (c.rights > 0 || c.demand > 0.0));
                }
                push(&mut events, at + fleet.replay_ms.max(1), Event::TopUp(p));
            }
            Event::Recheck(p, key) => {
                let decided = state.decide_after_wait(p, key, at);
                outcomes.record(decided, key, at, window);
            }
            Event::Housekeeping => {
                ideal.convergence().replay_now().await;
                ideal.reap().await;
                push(&mut events, at + HOUSEKEEPING_MS, Event::Housekeeping);
            }
        }
    }

    // Measured: whole windows after the first; the first is the onset.
    let first = T0_MS / window + 1;
    let last = end / window;
    let (mut windows, mut ideal_admitted, mut admitted, mut short) = (0, 0, 0, 0);
    let (mut onset_ideal, mut onset_short) = (0, 0);
    let mut keys: Vec<&(usize, u64)> = cells.keys().chain(outcomes.cells.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    for &(key, sequence) in keys {
        let by_ideal = cells.get(&(key, sequence)).copied().unwrap_or(0);
        let by_fleet = outcomes.cells.get(&(key, sequence)).copied().unwrap_or(0);
        let shortfall = by_ideal.saturating_sub(by_fleet);
        if sequence + 1 == first {
            onset_ideal += by_ideal;
            onset_short += shortfall;
        } else if (first..last).contains(&sequence) {
            windows += 1;
            ideal_admitted += by_ideal;
            admitted += by_fleet;
            short += shortfall;
        }
    }
    let seconds = scenario.run_ms as f64 / 1_000.0;
    let ratio = |part: u64, whole: u64| round(part as f64 / whole.max(1) as f64);
    Ok(BoundedReport {
        scenario: scenario.name.clone(),
        seed,
        regions: fleet.processes.len(),
        processes: state.processes.len(),
        sync_ms,
        write_latency_ms: fleet.write_latency_ms,
        read_latency_ms: fleet.read_latency_ms,
        virtual_s: scenario.run_ms / 1_000,
        windows,
        ideal_admitted,
        admitted,
        refused_vs_ideal: ratio(short, ideal_admitted),
        onset_refused_vs_ideal: ratio(onset_short, onset_ideal),
        never_above: judge(scenario.limit, window, &outcomes.log),
        requests,
        denied_fraction: ratio(outcomes.denied, requests),
        ideal_denied_fraction: ratio(ideal_denied, requests),
        exchanges_per_s: round(state.exchanges as f64 / seconds),
        rows_per_s: round(state.rows as f64 / seconds),
    })
}

/// The fleet's side of the run: admissions by the window they happened in, the log the
/// oracle judges, and the denials.
#[derive(Default)]
struct Outcomes {
    /// (key, sequence) → admitted.
    cells: HashMap<(usize, u64), u64>,
    log: Vec<Admission>,
    denied: u64,
}

impl Outcomes {
    fn record(&mut self, decision: Decision, key: usize, at: u64, window: u64) {
        if decision == Decision::Allowed {
            *self.cells.entry((key, at / window)).or_default() += 1;
            self.log.push(Admission { key, at_ms: at });
        } else {
            self.denied += 1;
        }
    }
}

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests;
