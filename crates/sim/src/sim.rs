//! The discrete-event loop: every process of every region is a real `Engine` with its real
//! `GlobalCounters`, all on one `ManualClock`; the loop moves the clock from event to event
//! (a request, a replay to the region, a flush, a sync, a reap) and calls the engine and the
//! global counters as the service's background tasks would.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use gcounter_engine::cell_key::CounterKeyRef;
use gcounter_engine::global::{GlobalCounters, GlobalSettings, GlobalStore};
use gcounter_engine::recorder::{NoRecorder, Recorder};
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Engine, EngineSettings, Hit, ManualClock, Verdict};
use serde::Serialize;

use crate::error::SimError;
use crate::oracle::{FalseDenial, NeverBelow};
use crate::scenario::{Pick, Scenario, Shape};
use crate::sliding::{most_in_a_window_starting_before, most_in_any_window};
use crate::store::{LaggedStore, Load};
use crate::tick::Tick;

/// Virtual time starts here: a multiple of every window, so windows start with the run.
pub(crate) const T0_MS: u64 = 1_800_000_000_000;
const REAP_MS: u64 = 5_000;
const CLEANUP_MS: u64 = 60_000;

/// The two periodic jobs of the global counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Job {
    Flush,
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(usize),
    Replay(usize),
    Job(usize, Job),
    Reap(usize),
    /// Look for contention at the fast interval (only with a contended speedup), as
    /// `GlobalCounters::run` does.
    Probe(usize),
    /// The fast tick of cells at their onset (`GlobalCounters::onset_tick`).
    Onset(usize),
    Cleanup,
}

struct Process {
    engine: Arc<Engine>,
    counters: GlobalCounters,
    flush: Tick,
    sync: Tick,
}

impl Process {
    fn tick(&mut self, job: Job) -> &mut Tick {
        match job {
            Job::Flush => &mut self.flush,
            Job::Sync => &mut self.sync,
        }
    }

    /// The interval `job` runs at now (the overload cadence may shorten it).
    fn every(&self, job: Job) -> Duration {
        let (flush, sync) = self.counters.intervals();
        match job {
            Job::Flush => flush,
            Job::Sync => sync,
        }
    }
}

/// min / median / max of per-window ratios.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub windows: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((values.len() - 1) as f64 * q).round() as usize;
            values.get(index).copied().unwrap_or_default()
        };
        Self {
            windows: values.len(),
            min: at(0.0),
            median: at(0.5),
            max: at(1.0),
        }
    }
}

/// One scenario's result. Deterministic for a seed (no wall-clock figures in it).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub regions: usize,
    pub processes: usize,
    pub publish_floor: f64,
    pub flush_ms: u64,
    pub sync_ms: u64,
    pub contended_speedup: u32,
    pub contended_overload: f64,
    pub write_latency_ms: u64,
    pub read_latency_ms: u64,
    pub virtual_s: u64,
    /// Admitted ÷ limit per fixed window, over the (key, window)s whose offered load exceeded
    /// the limit (the first window, with no previous one, is left out).
    pub per_window: Spread,
    /// The most admitted in any interval of one window's length, ÷ limit (same keys).
    pub worst_sliding: f64,
    /// The run's first window (traffic starts with the run), admitted ÷ limit, over the keys
    /// offered more than the limit in it: the onset, which `per_window` leaves out.
    pub onset_window: f64,
    /// The most admitted in an interval of one window's length that starts in the first
    /// window (so holds some of the onset), ÷ limit (same keys as `onset_window`).
    pub onset_sliding: f64,
    pub requests: u64,
    pub denied_fraction: f64,
    /// Requests denied although the fleet's true counts (every region's admits, no lag)
    /// had room for them, judged by [`NeverBelow`]: must be 0 ("never below").
    pub false_denials: u64,
    /// The first of them, if any: which request, key and instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_false_denial: Option<FalseDenial>,
    /// Requests admitted although the fleet's true counts were full at that instant: decisions
    /// the lags changed (0 when one process is the whole fleet: the engine alone is exact).
    /// Under overload most admits are borderline, so this counts disagreements, not excess:
    /// the excess is `per_window` and `worst_sliding`.
    pub over_admissions: u64,
    pub upserts_per_s: f64,
    pub rows_written_per_s: f64,
    pub syncs_per_s: f64,
    pub rows_read_per_s: f64,
    pub load: Load,
}

/// Run one scenario to the end.
pub fn run(scenario: &Scenario, seed: u64) -> Result<Report, SimError> {
    run_with(scenario, seed, &mut |_, verdict| verdict.allowed)
}

/// [`run`], with `answer` deciding from each of the engine's verdicts (and the request's
/// number in the run) whether the request counts as admitted: the engine's own answer in
/// [`run`]; a test plants a wrong one to show that the oracle reports it.
pub(crate) fn run_with(
    scenario: &Scenario,
    seed: u64,
    answer: &mut dyn FnMut(u64, &Verdict) -> bool,
) -> Result<Report, SimError> {
    // Every store and origin call is a ready future; the runtime is there for the engine's
    // yields and the global counters' timeouts.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(SimError::Runtime)?;
    runtime.block_on(simulate(scenario, seed, answer))
}

/// The cumulative distribution of Zipf(s) over `keys` keys.
pub(crate) fn zipf_cdf(keys: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (0..keys).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

/// One of `items`, uniformly (`None` when empty).
pub(crate) fn pick<T: Copy>(rng: &mut fastrand::Rng, items: &[T]) -> Option<T> {
    if items.is_empty() {
        return None;
    }
    items.get(rng.usize(..items.len())).copied()
}

pub(crate) fn exponential(rng: &mut fastrand::Rng, rate_per_s: f64) -> u64 {
    let gap_s = -(1.0 - rng.f64()).ln() / rate_per_s;
    (gap_s * 1_000.0).round().max(1.0) as u64
}

pub(crate) fn active(shape: Shape, t_ms: u64, window_ms: u64) -> bool {
    match shape {
        Shape::Constant => true,
        Shape::From(start) => t_ms >= start,
        Shape::Boundaries { width_ms } => {
            let into = t_ms % window_ms;
            into < width_ms || into >= window_ms.saturating_sub(width_ms)
        }
    }
}

async fn simulate(
    scenario: &Scenario,
    seed: u64,
    answer: &mut dyn FnMut(u64, &Verdict) -> bool,
) -> Result<Report, SimError> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let fleet = &scenario.fleet;
    let clock = Arc::new(ManualClock::new(T0_MS));
    let store = Arc::new(LaggedStore::new(
        fleet.write_latency_ms,
        fleet.read_latency_ms,
        Duration::from_millis(fleet.sync_overlap_ms),
    ));
    let metrics: Arc<dyn Recorder> = Arc::new(NoRecorder);
    let settings = GlobalSettings {
        flush_interval: Duration::from_millis(fleet.flush_ms),
        sync_interval: Duration::from_millis(fleet.sync_ms),
        jitter: fleet.jitter,
        publish_floor: fleet.publish_floor,
        contended_speedup: fleet.contended_speedup,
        contended_overload: fleet.contended_overload,
        onset_fraction: fleet.onset_fraction,
        onset_min_hits: fleet.onset_min_hits,
        onset_interval: Duration::from_millis(fleet.onset_interval_ms),
        onset_urgent_divisor: fleet.urgent_divisor,
        full_sync_interval: Duration::from_millis(fleet.full_sync_ms),
        ..GlobalSettings::default()
    };
    let max_cells = 200_000;
    let mut processes = Vec::new();
    let mut by_region: Vec<Vec<usize>> = Vec::new();
    for (region, &count) in fleet.processes.iter().enumerate() {
        let first = InProcessOrigin::new(max_cells);
        let mut members = Vec::new();
        for p in 0..count.max(1) {
            // The first process is the origin's own ("local"); the others are its siblings.
            let name = if p == 0 {
                "local".to_owned()
            } else {
                format!("p{p}")
            };
            let origin = first
                .sibling(&name)
                .ok_or(SimError::TooManyProcesses { region, count })?;
            let engine = Arc::new(Engine::new(
                EngineSettings {
                    max_cells,
                    ..EngineSettings::default()
                },
                Arc::new(origin),
                clock.clone(),
                metrics.clone(),
            ));
            let counters = GlobalCounters::new(
                store.clone() as Arc<dyn GlobalStore>,
                engine.clone(),
                format!("r{region}"),
                settings.clone(),
                metrics.clone(),
            );
            members.push(processes.len());
            processes.push(Process {
                engine,
                counters,
                flush: Tick::new(
                    fleet.flush_ms,
                    fleet.jitter,
                    T0_MS + rng.u64(..fleet.flush_ms.max(1)),
                ),
                sync: Tick::new(
                    fleet.sync_ms,
                    fleet.jitter,
                    T0_MS + rng.u64(..fleet.sync_ms.max(1)),
                ),
            });
        }
        by_region.push(members);
    }

    let end = T0_MS + scenario.run_ms;
    let speedup = u64::from(fleet.contended_speedup.max(1));
    let probe_ms = (fleet.flush_ms.min(fleet.sync_ms) / speedup).max(1);
    let onset_ms = fleet.onset_interval_ms.max(1);
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
    for (p, process) in processes.iter_mut().enumerate() {
        for job in [Job::Flush, Job::Sync] {
            let tick = process.tick(job);
            tick.pending = tick.next(T0_MS, rng.f64());
            push(&mut events, tick.pending, Event::Job(p, job));
        }
        if speedup > 1 {
            push(&mut events, T0_MS + probe_ms, Event::Probe(p));
        }
        if process.counters.onset_enabled() {
            push(&mut events, T0_MS + onset_ms, Event::Onset(p));
        }
        push(
            &mut events,
            T0_MS + rng.u64(..fleet.replay_ms.max(1)),
            Event::Replay(p),
        );
        push(&mut events, T0_MS + rng.u64(..REAP_MS), Event::Reap(p));
    }
    push(&mut events, T0_MS + CLEANUP_MS, Event::Cleanup);

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
    let window = scenario.window_ms;
    // (key, sequence) → (offered, admitted), and each key's admit instants.
    let mut cells: HashMap<(usize, u64), (u64, u64)> = HashMap::new();
    let mut admits: Vec<Vec<u64>> = vec![Vec::new(); scenario.keys];
    let mut oracle = NeverBelow::new(scenario.limit, window);
    let (mut requests, mut denied) = (0u64, 0u64);

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
                let next = at + exponential(&mut rng, source.rate);
                push(&mut events, next, Event::Arrival(i));
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
                .min(scenario.keys - 1);
                let process = pick(&mut rng, &source.regions)
                    .and_then(|region| by_region.get(region))
                    .and_then(|members| pick(&mut rng, members))
                    .and_then(|p| processes.get(p));
                let (Some(process), Some(identifier)) = (process, identifiers.get(key)) else {
                    continue;
                };
                let sequence = at / window;
                let verdict = process
                    .engine
                    .check(Hit {
                        counter: CounterKeyRef::new(&scope, identifier, window),
                        limit: scenario.limit,
                        cost: 1,
                        exact: false,
                    })
                    .await;
                let allowed = answer(requests, &verdict);
                oracle.record(requests, key, at, 1, allowed);
                requests += 1;
                let cell = cells.entry((key, sequence)).or_default();
                cell.0 += 1;
                if allowed {
                    cell.1 += 1;
                    if let Some(admits) = admits.get_mut(key) {
                        admits.push(at);
                    }
                } else {
                    denied += 1;
                }
            }
            Event::Replay(p) => {
                if let Some(process) = processes.get(p) {
                    process.engine.convergence().replay_now().await;
                    push(&mut events, at + fleet.replay_ms.max(1), Event::Replay(p));
                }
            }
            Event::Job(p, job) => {
                if let Some(process) = processes.get_mut(p)
                    && process.tick(job).pending == at
                {
                    match job {
                        Job::Flush => {
                            process.counters.flush().await;
                        }
                        Job::Sync => {
                            process.counters.sync().await;
                        }
                    }
                    let every = process.every(job);
                    let next = process.tick(job).reschedule(every, at, rng.f64());
                    push(&mut events, next, Event::Job(p, job));
                }
            }
            Event::Probe(p) => {
                if let Some(process) = processes.get_mut(p) {
                    for job in [Job::Flush, Job::Sync] {
                        let every = process.every(job);
                        if let Some(next) = process.tick(job).bring_forward(every, at, || rng.f64())
                        {
                            push(&mut events, next, Event::Job(p, job));
                        }
                    }
                    push(&mut events, at + probe_ms, Event::Probe(p));
                }
            }
            Event::Onset(p) => {
                if let Some(process) = processes.get(p) {
                    process.counters.onset_tick().await;
                    let wait = process.counters.onset_wait().as_millis();
                    push(
                        &mut events,
                        at + u64::try_from(wait).unwrap_or(onset_ms).max(1),
                        Event::Onset(p),
                    );
                }
            }
            Event::Reap(p) => {
                if let Some(process) = processes.get(p) {
                    process.engine.reap().await;
                    push(&mut events, at + REAP_MS, Event::Reap(p));
                }
            }
            Event::Cleanup => {
                let _ = store.cleanup(at, 1_000).await;
                push(&mut events, at + CLEANUP_MS, Event::Cleanup);
            }
        }
    }

    // Measured: whole windows after the first (which has no previous window to slide over).
    let first = T0_MS / window + 1;
    let last = end / window; // exclusive: the window `end` falls in is partial or empty
    let mut ratios = Vec::new();
    let mut worst = 0.0f64;
    let (mut onset_window, mut onset_sliding) = (0.0f64, 0.0f64);
    let limit = scenario.limit as f64;
    for (key, times) in admits.iter().enumerate() {
        if let Some(&(offered, admitted)) = cells.get(&(key, first - 1))
            && offered > scenario.limit
        {
            onset_window = onset_window.max(admitted as f64 / limit);
            let most = most_in_a_window_starting_before(times, window, first * window);
            onset_sliding = onset_sliding.max(most as f64 / limit);
        }
        let mut over = false;
        for sequence in first..last {
            if let Some(&(offered, admitted)) = cells.get(&(key, sequence))
                && offered > scenario.limit
            {
                over = true;
                ratios.push(admitted as f64 / scenario.limit as f64);
            }
        }
        if over {
            let from = first * window;
            let times: Vec<u64> = times
                .iter()
                .copied()
                .filter(|&t| t >= from && t < last * window)
                .collect();
            let most = most_in_any_window(&times, window);
            worst = worst.max(most as f64 / scenario.limit as f64);
        }
    }

    let load = store.load();
    let seconds = scenario.run_ms as f64 / 1_000.0;
    let round = |x: f64| (x * 1_000.0).round() / 1_000.0;
    let per_window = Spread::of(ratios);
    Ok(Report {
        scenario: scenario.name.clone(),
        seed,
        regions: fleet.processes.len(),
        processes: processes.len(),
        publish_floor: fleet.publish_floor,
        flush_ms: fleet.flush_ms,
        sync_ms: fleet.sync_ms,
        contended_speedup: fleet.contended_speedup,
        contended_overload: fleet.contended_overload,
        write_latency_ms: fleet.write_latency_ms,
        read_latency_ms: fleet.read_latency_ms,
        virtual_s: scenario.run_ms / 1_000,
        per_window: Spread {
            windows: per_window.windows,
            min: round(per_window.min),
            median: round(per_window.median),
            max: round(per_window.max),
        },
        worst_sliding: round(worst),
        onset_window: round(onset_window),
        onset_sliding: round(onset_sliding),
        requests,
        denied_fraction: round(denied as f64 / requests.max(1) as f64),
        false_denials: oracle.false_denials().len() as u64,
        first_false_denial: oracle.false_denials().first().copied(),
        over_admissions: oracle.over_admissions(),
        upserts_per_s: round(load.upsert_statements as f64 / seconds),
        rows_written_per_s: round(load.rows_written as f64 / seconds),
        syncs_per_s: round(load.sync_statements as f64 / seconds),
        rows_read_per_s: round(load.rows_read as f64 / seconds),
        load,
    })
}

#[cfg(test)]
mod tests;
