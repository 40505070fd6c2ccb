//! The scenarios: who sends what to which region, and the fleet's settings.

use serde::Serialize;

/// The fleet and its settings.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    /// Processes in each region (its length is the number of regions).
    pub processes: Vec<usize>,
    pub flush_ms: u64,
    pub sync_ms: u64,
    /// ± fraction of the interval each flush or sync may move.
    pub jitter: f64,
    pub publish_floor: f64,
    // The global counters' settings of the same names (`GlobalSettings`, where each is
    // described), the intervals in ms.
    pub contended_speedup: u32,
    pub contended_overload: f64,
    pub onset_fraction: f64,
    pub onset_min_hits: u64,
    pub onset_interval_ms: u64,
    pub urgent_divisor: u32,
    pub full_sync_ms: u64,
    /// How far before its previous read's mark an incremental sync starts
    /// (`SqlSettings::sync_overlap`).
    pub sync_overlap_ms: u64,
    pub write_latency_ms: u64,
    pub read_latency_ms: u64,
    /// The engine's replay to the regional origin.
    pub replay_ms: u64,
}

impl Default for Fleet {
    /// The accuracy targets' set-up: flush and sync every second (the service's default is
    /// 10 s), the service's publish floor and jitter, and a database 50 ms away for writes
    /// and reads.
    fn default() -> Self {
        Self {
            processes: vec![1],
            flush_ms: 1_000,
            sync_ms: 1_000,
            jitter: 0.2,
            publish_floor: gcounter_engine::global::DEFAULT_PUBLISH_FLOOR,
            contended_speedup: gcounter_engine::global::DEFAULT_CONTENDED_SPEEDUP,
            contended_overload: gcounter_engine::global::DEFAULT_CONTENDED_OVERLOAD,
            onset_fraction: gcounter_engine::global::DEFAULT_ONSET_FRACTION,
            onset_min_hits: gcounter_engine::global::DEFAULT_ONSET_MIN_HITS,
            onset_interval_ms: gcounter_engine::global::DEFAULT_ONSET_INTERVAL.as_millis() as u64,
            urgent_divisor: gcounter_engine::global::DEFAULT_ONSET_URGENT_DIVISOR,
            full_sync_ms: gcounter_engine::global::DEFAULT_FULL_SYNC_INTERVAL.as_millis() as u64,
            sync_overlap_ms: gcounter_engine::global::DEFAULT_SYNC_OVERLAP.as_millis() as u64,
            write_latency_ms: 50,
            read_latency_ms: 50,
            replay_ms: 100,
        }
    }
}

/// When a source sends, as a multiple of its rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Shape {
    Constant,
    /// Silent before this many ms into the run.
    From(u64),
    /// Only within `width_ms` either side of a window boundary.
    Boundaries {
        width_ms: u64,
    },
}

/// Which counter an arrival hits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Pick {
    Key(usize),
    /// Key `i` with probability ∝ 1 / (i + 1)^s, over `keys` keys.
    Zipf {
        keys: usize,
        s: f64,
    },
}

/// A Poisson stream of cost-1 requests.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    pub pick: Pick,
    /// Each arrival goes to one of these regions (uniformly), then to one of its processes.
    pub regions: Vec<usize>,
    /// Requests per second (while the shape allows).
    pub rate: f64,
    pub shape: Shape,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub about: String,
    pub fleet: Fleet,
    pub keys: usize,
    pub limit: u64,
    pub window_ms: u64,
    pub run_ms: u64,
    pub sources: Vec<Source>,
}

/// The hot-key scenarios' limit: 600 per 20 s (the accuracy targets' set-up).
const HOT_LIMIT: u64 = 600;
const HOT_WINDOW_MS: u64 = 20_000;

/// `load` × the limit per window, as requests per second.
fn per_second(load: f64, limit: u64, window_ms: u64) -> f64 {
    load * limit as f64 * 1_000.0 / window_ms as f64
}

fn hot(
    name: &str,
    about: &str,
    regions: usize,
    processes: usize,
    loads: &[(usize, f64, Shape)],
) -> Scenario {
    Scenario {
        name: name.into(),
        about: about.into(),
        fleet: Fleet {
            processes: vec![processes; regions],
            ..Fleet::default()
        },
        keys: 1,
        limit: HOT_LIMIT,
        window_ms: HOT_WINDOW_MS,
        run_ms: 10 * 60_000,
        sources: loads
            .iter()
            .map(|&(region, load, shape)| Source {
                pick: Pick::Key(0),
                regions: vec![region],
                rate: per_second(load, HOT_LIMIT, HOT_WINDOW_MS),
                shape,
            })
            .collect(),
    }
}

/// Even spread of `total` × the limit over `regions` regions.
fn even(name: &str, regions: usize, total: f64) -> Scenario {
    let loads: Vec<_> = (0..regions)
        .map(|r| (r, total / regions as f64, Shape::Constant))
        .collect();
    hot(
        name,
        &format!("one key, {total}× its limit spread evenly over {regions} regions"),
        regions,
        1,
        &loads,
    )
}

/// `total` × the limit spread evenly over `regions` regions, starting everywhere at once
/// when the run starts: the same traffic as [`even`], named for its onset window (the
/// report's `onset_sliding`), which `even`'s figures leave out.
fn onset(name: &str, regions: usize, total: f64) -> Scenario {
    let mut scenario = even(name, regions, total);
    scenario.about = format!(
        "one key, {total}× its limit spread evenly over {regions} regions, starting in every region at once"
    );
    scenario
}

/// The design's load model: 33 processes in 10 regions, ~24,000 active windows (limit 100 per
/// minute), ~5 % of them used from 2–3 regions, a few percent of requests denied; flush and
/// sync every 10 s (the service's default).
fn rfc(seed: u64) -> Scenario {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_0f0c);
    let processes = vec![4, 4, 4, 3, 3, 3, 3, 3, 3, 3];
    let regions = processes.len();
    let (limit, window_ms) = (100, 60_000);
    let keys = 24_000;
    let sources = (0..keys)
        .map(|key| {
            let home = rng.usize(..regions);
            let mut used = vec![home];
            if rng.f64() < 0.05 {
                while used.len() < 2 + rng.usize(..2) {
                    let other = rng.usize(..regions);
                    if !used.contains(&other) {
                        used.push(other);
                    }
                }
            }
            // Most windows are quiet (a handful of calls); some warm, a few over the limit.
            let class = rng.f64();
            let load = if class < 0.88 {
                0.01 + 0.05 * rng.f64()
            } else if class < 0.993 {
                0.3 + 0.6 * rng.f64()
            } else {
                1.1 + 0.9 * rng.f64()
            };
            Source {
                pick: Pick::Key(key),
                regions: used,
                rate: per_second(load, limit, window_ms),
                shape: Shape::Constant,
            }
        })
        .collect();
    Scenario {
        name: "rfc".into(),
        about: "the design's load model: 33 processes in 10 regions, 24,000 keys (100/min), 5 % multi-region, flush and sync every 10 s".into(),
        fleet: Fleet {
            processes,
            flush_ms: 10_000,
            sync_ms: 10_000,
            ..Fleet::default()
        },
        keys,
        limit,
        window_ms,
        run_ms: 5 * 60_000,
        sources,
    }
}

impl Scenario {
    /// Another limit and window for a scenario of one limit: each source keeps its load as a
    /// multiple of the limit per window. A burst at the boundaries keeps its width, so only
    /// the limit scales its rate.
    pub fn rescale(&mut self, limit: u64, window_ms: u64) {
        let (limit, window_ms) = (limit.max(1), window_ms.max(1));
        let by_limit = limit as f64 / self.limit as f64;
        let by_window = self.window_ms as f64 / window_ms as f64;
        for source in &mut self.sources {
            match &mut source.shape {
                Shape::Boundaries { .. } => source.rate *= by_limit,
                Shape::From(start) => {
                    source.rate *= by_limit * by_window;
                    *start = *start * window_ms / self.window_ms;
                }
                Shape::Constant => source.rate *= by_limit * by_window,
            }
        }
        self.limit = limit;
        self.window_ms = window_ms;
    }
}

/// Every scenario, by name, in the order `all` runs them.
pub const NAMES: &[&str] = &[
    "even-10x2",
    "even-10x5",
    "even-10x10",
    "onset-10x2",
    "onset-10x5",
    "onset-10x10",
    "onset-10x20",
    "three-x2",
    "three-x5",
    "concentrated",
    "single",
    "join",
    "bursts",
    "zipf",
    "rfc",
];

pub fn named(name: &str, seed: u64) -> Option<Scenario> {
    let c = Shape::Constant;
    Some(match name {
        "even-10x2" => even(name, 10, 2.0),
        "even-10x5" => even(name, 10, 5.0),
        "even-10x10" => even(name, 10, 10.0),
        "three-x2" => even(name, 3, 2.0),
        "three-x5" => even(name, 3, 5.0),
        "concentrated" => hot(
            name,
            "one key: one region at 2× its limit, two at 0.1×",
            3,
            1,
            &[(0, 2.0, c), (1, 0.1, c), (2, 0.1, c)],
        ),
        "single" => hot(
            name,
            "one key at 2× its limit in one region of 3 processes",
            1,
            3,
            &[(0, 2.0, c)],
        ),
        "join" => hot(
            name,
            "one key at 1× in each of two regions; a third joins at 2× in the middle of window 5",
            3,
            1,
            &[
                (0, 1.0, c),
                (1, 1.0, c),
                (2, 2.0, Shape::From(5 * HOT_WINDOW_MS + HOT_WINDOW_MS / 2)),
            ],
        ),
        "bursts" => {
            // 5× the limit per window over 10 regions, all of it within 1 s of a boundary.
            let width_ms = 1_000;
            let share = 5.0 / 10.0 * HOT_WINDOW_MS as f64 / (2 * width_ms) as f64;
            let loads: Vec<_> = (0..10)
                .map(|r| (r, share, Shape::Boundaries { width_ms }))
                .collect();
            hot(
                name,
                "one key, 5× its limit over 10 regions, sent within 1 s either side of each window boundary",
                10,
                1,
                &loads,
            )
        }
        "zipf" => {
            let (keys, limit) = (1_000, HOT_LIMIT);
            let total = per_second(50.0, limit, HOT_WINDOW_MS);
            let mut s = hot(name, "", 10, 3, &[]);
            s.about = "1,000 keys, Zipf(1.1) popularity, 50× one limit in total, each request to a random one of 10 regions of 3 processes".into();
            s.keys = keys;
            s.sources = (0..10)
                .map(|r| Source {
                    pick: Pick::Zipf { keys, s: 1.1 },
                    regions: vec![r],
                    rate: total / 10.0,
                    shape: Shape::Constant,
                })
                .collect();
            s
        }
        "rfc" => rfc(seed),
        // `even-<regions>x<load>`, e.g. `even-5x5`, and `onset-<regions>x<load>`: what
        // scripts/accuracy_regions.py runs.
        other => {
            let (build, spec): (fn(&str, usize, f64) -> Scenario, _) =
                match other.strip_prefix("even-") {
                    Some(spec) => (even, spec),
                    None => (onset, other.strip_prefix("onset-")?),
                };
            let (regions, load) = spec.split_once('x')?;
            let (regions, load) = (regions.parse().ok()?, load.parse().ok()?);
            if !((1..=1_000).contains(&regions) && load > 0.0 && load <= 1_000.0) {
                return None;
            }
            build(name, regions, load)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests offered per window, whatever the shape.
    fn offered_per_window(scenario: &Scenario) -> f64 {
        scenario
            .sources
            .iter()
            .map(|source| match source.shape {
                Shape::Boundaries { width_ms } => source.rate * (2 * width_ms) as f64 / 1_000.0,
                _ => source.rate * scenario.window_ms as f64 / 1_000.0,
            })
            .sum()
    }

    #[test]
    fn a_rescaled_scenario_offers_the_same_multiple_of_its_limit() {
        for name in ["bursts", "even-10x5"] {
            let mut scenario = named(name, 1).expect("a scenario");
            let before = offered_per_window(&scenario) / scenario.limit as f64;
            scenario.rescale(600, 60_000);
            let after = offered_per_window(&scenario) / 600.0;
            assert!((after - before).abs() < 1e-9, "{name}: {before} → {after}");
        }
    }
}
