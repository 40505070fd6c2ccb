//! Engine micro-benchmarks: the cost of one decision, without gRPC.
//!
//! `cargo bench --bench engine` (BENCHMARKS.md has the figures). Every decision here is on a
//! limit that is never reached, so each one takes the full accept path (compare-and-swap,
//! replay bookkeeping), not the cheaper denial.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark: a panic is how it reports a broken set-up"
)]

mod common;

use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Ids, START_MS, address, decide};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Engine, EngineSettings, Hit, ManualClock};
use gcounter_rls::telemetry::Metrics;

/// Never reached: every decision accepts.
const LIMIT: u64 = u64::MAX / 2;

/// The embedded default: in-process origin, no freshness. The clock stands still in the middle
/// of a window so no decision crosses a window boundary mid-measurement.
fn engine(max_cells: usize) -> Arc<Engine> {
    Arc::new(Engine::new(
        EngineSettings {
            max_cells,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(max_cells)),
        Arc::new(ManualClock::new(START_MS)),
        Arc::new(Metrics::new()),
    ))
}

fn identifiers(n: usize) -> Vec<String> {
    (0..n as u64).map(address).collect()
}

fn warm_one_key(c: &mut Criterion) {
    let engine = engine(1_000);
    let ids = Ids::new();
    decide(&engine, ids.hit("10.0.0.1", LIMIT));
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.bench_function("warm decision, one key", |b| {
        b.iter(|| decide(&engine, black_box(ids.hit("10.0.0.1", LIMIT))))
    });
    // A `guarantee: never_above` limit: the same accept, and the check that its window was
    // not read by the next one before the count landed.
    let exact = |identifier| Hit {
        exact: true,
        ..ids.hit(identifier, LIMIT)
    };
    decide(&engine, exact("10.0.0.2"));
    group.bench_function("warm decision, one key, never_above", |b| {
        b.iter(|| decide(&engine, black_box(exact("10.0.0.2"))))
    });
    // The same limit when another process shares the origin: each decision spends a right
    // this process holds, on the engine's slow path (a boxed future), and takes more from
    // the in-process store once it has spent what it held (asks that double with demand).
    let store = InProcessOrigin::new(1_000);
    let _other = store
        .sibling("other")
        .expect("a second process of the region");
    let shared = Engine::new(
        EngineSettings::default(),
        Arc::new(store),
        Arc::new(ManualClock::new(START_MS)),
        Arc::new(Metrics::new()),
    );
    decide(&shared, exact("10.0.0.3"));
    group.bench_function(
        "warm decision, one key, never_above from rights held",
        |b| b.iter(|| decide(&shared, black_box(exact("10.0.0.3")))),
    );
    group.finish();
}

/// Warm decisions in a fixed pseudo-random order over `keys` counters (two live cells each:
/// the current window and the previous one), as real traffic would miss the caches.
fn warm_over(c: &mut Criterion, group_name: &str, case: &str, engine: &Engine, keys: &[String]) {
    let ids = Ids::new();
    let mut order: Vec<usize> = (0..keys.len()).collect();
    fastrand::Rng::with_seed(7).shuffle(&mut order);
    let mut next = 0;
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));
    group.bench_function(case, |b| {
        b.iter(|| {
            next = (next + 1) % keys.len();
            decide(engine, ids.hit(&keys[order[next]], LIMIT))
        })
    });
    group.finish();
}

/// Warm decision cost as the live cells grow: 1k, 10k, 100k, 1M, 2M cells (each counter has
/// two), the table sized well above them.
fn warm_vs_live_cells(c: &mut Criterion) {
    for keys in [500, 5_000, 50_000, 500_000, 1_000_000] {
        // Room for four times the cells in count and bytes: no shard of the table evicts
        // (at 2 × keys + 10 %, uneven shards evicted, and evicted cells made cold decisions).
        let engine = Arc::new(Engine::new(
            EngineSettings {
                max_cells: 4 * keys,
                max_cell_bytes: 4 * keys as u64 * 4_096,
                ..EngineSettings::default()
            },
            Arc::new(InProcessOrigin::new(4 * keys)),
            Arc::new(ManualClock::new(START_MS)),
            Arc::new(Metrics::new()),
        ));
        let ids = Ids::new();
        let keys = identifiers(keys);
        for key in &keys {
            decide(&engine, ids.hit(key, LIMIT));
        }
        let cells = engine.live_cells();
        warm_over(
            c,
            "engine live cells",
            &format!("warm decision, {cells} cells"),
            &engine,
            &keys,
        );
    }
}

/// At the byte cap: the service's defaults (`--max-cells` 1M, `--max-cell-bytes` 256 MiB),
/// 1M counters decided once each (2M cells wanted, the byte cap keeps ~780k), then warm
/// decisions over the counters whose both cells are still in memory.
fn warm_at_the_byte_cap(c: &mut Criterion) {
    let engine = Arc::new(Engine::new(
        EngineSettings::default(),
        Arc::new(InProcessOrigin::new(1_000_000)),
        Arc::new(ManualClock::new(START_MS)),
        Arc::new(Metrics::new()),
    ));
    let ids = Ids::new();
    let all = identifiers(1_000_000);
    for key in &all {
        decide(&engine, ids.hit(key, LIMIT));
    }
    let warm: Vec<String> = all
        .into_iter()
        .filter(|key| {
            let state = engine.inspection().inspect(&ids.hit(key, LIMIT).counter);
            state.current.is_some() && state.previous.is_some()
        })
        .collect();
    let cells = engine.live_cells();
    warm_over(
        c,
        "engine live cells",
        &format!(
            "warm decision at the byte cap, {cells} cells ({} warm counters)",
            warm.len()
        ),
        &engine,
        &warm,
    );
}

/// A sample's work on one thread: waits at the start barrier, returns its timed part.
type Job = Box<dyn FnOnce(&Barrier) -> Duration + Send>;

/// Threads that live for the whole group, as a runtime's workers do; each sample hands them
/// their work. Threads spawned per sample measured the scheduler as much as the engine: two
/// new threads often start on one core until the balancer moves one, and the control below
/// (private work, nothing shared) scaled 1.77–1.97× that way, 1.95–1.99× on these workers.
struct Workers {
    jobs: Vec<mpsc::Sender<(Job, Arc<Barrier>)>>,
    times: mpsc::Receiver<Duration>,
}

impl Workers {
    fn new(threads: usize) -> Self {
        let (sender, times) = mpsc::channel();
        let jobs = (0..threads)
            .map(|_| {
                let (jobs, received) = mpsc::channel::<(Job, Arc<Barrier>)>();
                let times = sender.clone();
                std::thread::spawn(move || {
                    for (job, barrier) in received {
                        let _ = times.send(job(&barrier));
                    }
                });
                jobs
            })
            .collect();
        Self { jobs, times }
    }

    /// Runs `jobs[t]` on worker `t`, started together. Returns the slowest's time: with
    /// `iters` steps each, the time per step per thread.
    fn run(&self, jobs: Vec<Job>) -> Duration {
        assert!(jobs.len() <= self.jobs.len(), "more jobs than workers");
        let barrier = Arc::new(Barrier::new(jobs.len()));
        let started = jobs.len();
        for (worker, job) in self.jobs.iter().zip(jobs) {
            worker
                .send((job, Arc::clone(&barrier)))
                .expect("bench worker gone");
        }
        (0..started)
            .map(|_| self.times.recv().expect("bench worker panicked"))
            .max()
            .unwrap_or_default()
    }
}

/// `iters` decisions on `key`, timed from the start barrier.
fn deciding(engine: &Arc<Engine>, key: String, iters: u64) -> Job {
    let engine = Arc::clone(engine);
    Box::new(move |barrier| {
        let ids = Ids::new();
        barrier.wait();
        let started = Instant::now();
        for _ in 0..iters {
            black_box(decide(&engine, black_box(ids.hit(&key, LIMIT))));
        }
        started.elapsed()
    })
}

/// The machine's own scaling, for comparison: hashing private data, no memory shared at
/// all. What two vCPUs of a virtual machine give is not always 2×.
fn control(thread: usize, iters: u64) -> Job {
    Box::new(move |barrier| {
        let mut data = [thread as u8; 48];
        barrier.wait();
        let started = Instant::now();
        for i in 0..iters {
            data[0] = i as u8;
            let h = xxhash_rust::xxh3::xxh3_64(black_box(&data));
            data[1] ^= h as u8;
            // About one decision's worth of work per iteration.
            for _ in 0..12 {
                data[2] ^= xxhash_rust::xxh3::xxh3_64(black_box(&data)) as u8;
            }
        }
        black_box(data);
        started.elapsed()
    })
}

/// A key whose current cell falls in `shard` of the table (`in_shard`) or in another one.
fn key_placed(engine: &Engine, prefix: &str, shard: usize, in_shard: bool) -> String {
    let ids = Ids::new();
    (0u64..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|key| (engine.table_shard(&ids.hit(key, LIMIT)) == shard) == in_shard)
        .expect("keys fall in every shard")
}

/// `keys[t]` decided once on worker `t`: the worker that makes a cell allocates it (as the
/// service's workers do for the keys they see first), so no two threads' cells are
/// neighbours in memory by construction.
fn warm(workers: &Workers, engine: &Arc<Engine>, keys: &[&String]) {
    workers.run(
        keys.iter()
            .map(|key| deciding(engine, key.to_string(), 1))
            .collect(),
    );
}

fn threads(c: &mut Criterion) {
    let engine = engine(1_000);
    let workers = Workers::new(2);
    let first = "thread-0".to_string();
    let shard = engine.table_shard(&Ids::new().hit(&first, LIMIT));
    // Thread 1's key in another shard of the table than thread 0's, and one in the same
    // shard: readers of one shard share its lock (the sharded lock keeps their writes apart).
    let apart = key_placed(&engine, "thread-1", shard, false);
    let together = key_placed(&engine, "thread-1-same-shard", shard, true);
    warm(&workers, &engine, &[&first, &apart]);
    warm(&workers, &engine, &[&first, &together]);
    let mut group = c.benchmark_group("engine threads");
    // Time per decision per thread: the same figure as one thread means perfect scaling.
    group.throughput(Throughput::Elements(1));
    group.bench_function("1 thread", |b| {
        b.iter_custom(|iters| workers.run(vec![deciding(&engine, first.clone(), iters)]))
    });
    let pairs = [
        ("2 threads, distinct keys", &apart),
        ("2 threads, distinct keys in one table shard", &together),
        ("2 threads, one shared key", &first),
    ];
    for (case, second) in pairs {
        group.bench_function(case, |b| {
            b.iter_custom(|iters| {
                workers.run(vec![
                    deciding(&engine, first.clone(), iters),
                    deciding(&engine, second.clone(), iters),
                ])
            })
        });
    }
    group.bench_function("control: 1 thread, private work", |b| {
        b.iter_custom(|iters| workers.run(vec![control(0, iters)]))
    });
    group.bench_function("control: 2 threads, private work", |b| {
        b.iter_custom(|iters| workers.run(vec![control(0, iters), control(1, iters)]))
    });
    group.finish();
}

fn cold_decision(c: &mut Criterion) {
    const MAX_CELLS: usize = 1_000_000;
    let engine = engine(MAX_CELLS);
    let ids = Ids::new();
    let mut n = 0u64;
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    // A key never seen: both cells are read from the in-process origin and inserted. The
    // table is capped, so old keys are evicted as in a flood of unique identifiers.
    group.bench_function("cold decision, in-process origin", |b| {
        b.iter_batched(
            || {
                n += 1;
                format!("cold-{n}")
            },
            |key| decide(&engine, ids.hit(&key, LIMIT)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(
    benches,
    warm_one_key,
    threads,
    cold_decision,
    warm_vs_live_cells,
    warm_at_the_byte_cap
);
criterion_main!(benches);
