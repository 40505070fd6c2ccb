//! Resident memory per live cell, the cap under a flood of unique identifiers, and what the
//! background walks of a full table (reaping, the global flush and sync, a replay cycle, a
//! window rollover) cost a warm decision.
//!
//! `cargo bench --bench memory` (not criterion: it measures bytes, once, in a fresh process).
//! The engine is the embedded default's: in-process origin, replay run as the background
//! task would. RSS comes from /proc/self/statm, so the figure includes the allocator's
//! overhead and fragmentation, which is what an operator pays.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark: a panic is how it reports a broken set-up"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Ids, MINUTE_MS, START_MS, address, decide, write_address};
use gcounter_engine::cell_key::{CellKey, CounterKeyRef};
use gcounter_engine::global::{GlobalCounters, GlobalSettings, MemoryStore};
use gcounter_engine::pn::PnCount;
use gcounter_engine::recorder::NoRecorder;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Engine, EngineSettings, Hit, ManualClock};
use gcounter_rls::telemetry::Metrics;

/// Decisions between two replays (the service replays every 100 ms).
const REPLAY_EVERY: u64 = 10_000;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("resident pages in /proc/self/statm");
    pages * 4096
}

fn engine(max_cells: usize, max_cell_bytes: u64) -> Engine {
    Engine::new(
        EngineSettings {
            max_cells,
            max_cell_bytes,
            max_pending_replay: 1_000_000,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(max_cells)),
        Arc::new(ManualClock::new(START_MS)),
        Arc::new(Metrics::new()),
    )
}

/// Decide once on each of `keys` (identifiers like client addresses), replaying as the service does.
fn fill(engine: &Engine, keys: std::ops::Range<u64>, mut each: impl FnMut(u64)) {
    // The replay yields to the runtime between its batches of 1,000 cells.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let ids = Ids::new();
    let mut identifier = String::new();
    for i in keys {
        write_address(&mut identifier, i);
        decide(engine, ids.hit(&identifier, 1_000));
        if i % REPLAY_EVERY == REPLAY_EVERY - 1 {
            runtime.block_on(engine.convergence().replay_now());
            each(i + 1);
        }
    }
    runtime.block_on(engine.convergence().replay_now());
}

fn per_cell() {
    // Each key makes two cells: its current window and its (empty) previous one.
    const KEYS: u64 = 500_000;
    // The default --max-cells, filled to the cap: tables are sized for their cap. The byte
    // cap is raised so that it does not bind: this measures what a cell costs.
    let engine = engine(1_000_000, 1 << 30);
    let before = rss_bytes();
    fill(&engine, 0..KEYS, |_| {});
    let after = rss_bytes();
    let cells = engine.live_cells() as u64;
    println!(
        "{{\"bench\":\"memory per live cell\",\"keys\":{KEYS},\"live_cells\":{cells},\"rss_before_mib\":{:.1},\"rss_after_mib\":{:.1},\"bytes_per_cell\":{:.0}}}",
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
        (after - before) as f64 / cells as f64
    );
}

fn flood() {
    const MAX_CELLS: usize = 1_000_000;
    const KEYS: u64 = 5_000_000;
    // The service's defaults: the byte cap binds before the cell cap for these cells.
    let engine = engine(MAX_CELLS, gcounter_engine::DEFAULT_MAX_CELL_BYTES);
    let mut samples = Vec::new();
    fill(&engine, 0..KEYS, |done| {
        if done % 500_000 == 0 {
            samples.push((done, rss_bytes(), engine.live_cells()));
        }
    });
    let mib = |b: u64| b as f64 / 1_048_576.0;
    let series: Vec<String> = samples
        .iter()
        .map(|(done, rss, cells)| format!("[{done},{:.1},{cells}]", mib(*rss)))
        .collect();
    // Growth over the second half of the flood, long after the cap was reached.
    let half = samples.len() / 2;
    let growth = samples
        .last()
        .zip(samples.get(half))
        .map_or(0.0, |(last, mid)| mib(last.1) - mib(mid.1));
    println!(
        "{{\"bench\":\"flood of unique identifiers\",\"max_cells\":{MAX_CELLS},\"keys\":{KEYS},\"rss_growth_second_half_mib\":{growth:.1},\"samples_keys_rss_mib_cells\":[{}]}}",
        series.join(",")
    );
}

/// A warm key on a current-thread runtime (`--workers 1`): decide on it in a loop, yielding
/// between decisions, until `work` is done. Each loop turn is what a decision waited for
/// `work`. Returns `work`'s output, how long it took and the turns.
fn while_deciding<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
    engine: &Arc<Engine>,
    work: impl FnOnce(Arc<Engine>) -> F,
) -> (T, Walk) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let ids = Ids::new();
        let hot = ids.hit("hot", u64::MAX / 2);
        engine.check(hot).await;
        let done = Arc::new(AtomicBool::new(false));
        let task = {
            let done = Arc::clone(&done);
            let work = work(Arc::clone(engine));
            tokio::spawn(async move {
                let started = Instant::now();
                let output = work.await;
                done.store(true, Ordering::Release);
                (output, started.elapsed())
            })
        };
        let mut turns = Turns::new();
        while !done.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
            engine.check(hot).await;
            turns.end_turn();
        }
        let (output, took) = task.await.expect("the background task");
        (output, turns.walk(took))
    })
}

/// The turns of a decision loop as they end: each one's wall time and this thread's CPU
/// time in it. On a loaded machine a long wall turn may be the scheduler's (another process
/// ran); a long CPU turn is this process's own work between two yields.
///
/// With `LONG_TURN_MS` set, each turn of at least that many milliseconds of CPU is printed
/// to stderr with its start and end on `CLOCK_MONOTONIC`, the clock `perf record -k
/// CLOCK_MONOTONIC` stamps its samples with: `perf script --time <start>,<end>` then shows
/// what the thread did in that turn (BENCHMARKS.md, "Background work at 1M live cells").
struct Turns {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
    last: (Instant, Duration),
    long: Option<Duration>,
    last_monotonic: Duration,
}

impl Turns {
    fn new() -> Self {
        // Sized up front: growing them mid-walk is a large allocation, and glibc then
        // consolidates the half million small chunks a reaper just freed (35 ms, once),
        // which a service spreads over its many large allocations instead.
        Self {
            wall: Vec::with_capacity(1 << 21),
            cpu: Vec::with_capacity(1 << 21),
            last: (Instant::now(), thread_cpu()),
            long: std::env::var("LONG_TURN_MS")
                .ok()
                .and_then(|ms| ms.parse::<f64>().ok())
                .map(|ms| Duration::from_secs_f64(ms / 1e3)),
            last_monotonic: clock(libc::CLOCK_MONOTONIC),
        }
    }

    fn end_turn(&mut self) {
        let now = (Instant::now(), thread_cpu());
        let cpu = now.1.saturating_sub(self.last.1);
        self.wall.push(now.0 - self.last.0);
        self.cpu.push(cpu);
        self.last = now;
        if let Some(long) = self.long {
            let monotonic = clock(libc::CLOCK_MONOTONIC);
            if cpu >= long {
                eprintln!(
                    "long turn: {:.6},{:.6} cpu_ms {:.3}",
                    self.last_monotonic.as_secs_f64(),
                    monotonic.as_secs_f64(),
                    cpu.as_secs_f64() * 1e3
                );
            }
            self.last_monotonic = monotonic;
        }
    }

    fn walk(self, took: Duration) -> Walk {
        Walk {
            took,
            turns: self.wall,
            cpu_turns: self.cpu,
        }
    }
}

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `clock_gettime(id)`.
fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    let status = unsafe { libc::clock_gettime(id, &mut now) };
    assert_eq!(status, 0, "clock_gettime({id})");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// How long background work took, and each turn of the decision loop beside it (wall and
/// CPU time).
struct Walk {
    took: Duration,
    turns: Vec<Duration>,
    cpu_turns: Vec<Duration>,
}

/// `(p99, max)` in milliseconds.
fn tail_ms(turns: &[Duration]) -> (f64, f64) {
    let mut sorted = turns.to_vec();
    sorted.sort();
    let at = |q: f64| {
        sorted
            .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    (at(0.99), at(1.0))
}

/// An engine as `reap` and the walks below use it: room for 2M cells and a million pending
/// replays, so neither cap binds.
fn roomy_engine(clock: &Arc<ManualClock>) -> Arc<Engine> {
    Arc::new(Engine::new(
        EngineSettings {
            max_cells: 2_000_000,
            max_cell_bytes: 2 << 30,
            max_pending_replay: 1_000_000,
            ..EngineSettings::default()
        },
        Arc::new(InProcessOrigin::new(2_000_000)),
        Arc::clone(clock) as Arc<dyn gcounter_engine::Clock>,
        Arc::new(Metrics::new()),
    ))
}

/// A roomy engine in the middle of a one-minute window, `keys` counters decided once each.
fn filled(keys: u64) -> (Arc<ManualClock>, Arc<Engine>) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = roomy_engine(&clock);
    fill(&engine, 0..keys, |_| {});
    (clock, engine)
}

fn report(bench: &str, cells: usize, extra: &str, walk: &Walk) {
    let (took, turns) = (walk.took, &walk.turns);
    let (p99, max) = tail_ms(turns);
    let (cpu_p99, cpu_max) = tail_ms(&walk.cpu_turns);
    println!(
        "{{\"bench\":\"{bench}\",\"live_cells\":{cells},{extra}\"took_ms\":{:.1},\"decisions\":{},\"turn_p99_ms\":{p99:.3},\"turn_max_ms\":{max:.3},\"turn_cpu_p99_ms\":{cpu_p99:.3},\"turn_cpu_max_ms\":{cpu_max:.3}}}",
        took.as_secs_f64() * 1e3,
        turns.len(),
    );
}

/// A background job at 1M cells (500,000 counters decided in two windows, as `filled`),
/// `prepare`d and then run on a one-thread runtime (`--workers 1`) while a task decides on a
/// warm key in a loop: the longest loop turn is the longest a decision waited for the job.
/// Reported under `bench`, with what `fields` says of the job's output.
fn at_a_million_cells<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
    bench: &str,
    prepare: impl FnOnce(&ManualClock),
    work: impl FnOnce(Arc<Engine>) -> F,
    fields: impl FnOnce(&T) -> String,
) {
    let (clock, engine) = filled(500_000);
    let cells = engine.live_cells();
    prepare(&clock);
    let (output, walk) = while_deciding(&engine, work);
    report(bench, cells, &fields(&output), &walk);
}

/// 1M expired cells reaped (`Cache::retain` held the only thread for the whole table).
fn reap() {
    at_a_million_cells(
        "warm decision while reaping",
        // two windows later, every one of them is past its sliding window
        |clock| clock.advance(2 * MINUTE_MS),
        |engine| async move { engine.reap().await },
        |reaped| format!("\"reaped\":{reaped},"),
    );
}

/// Reaping between two window ends, at 1M live cells: one cell of a one-second window among
/// them has expired, so the reap walks the whole table for it (what every reap cost before
/// the table kept its cells' earliest expiry); the next reap, with nothing expired, does not
/// walk.
fn idle_reap() {
    let (clock, engine) = filled(500_000);
    let scope = gcounter_engine::cell_key::Scope::new("bench", "7:second/");
    let short = Hit {
        counter: CounterKeyRef::new(&scope, "short", 1_000),
        limit: 1_000,
        cost: 1,
        exact: false,
    };
    decide(&engine, short);
    let cells = engine.live_cells();
    // the second's cell is past its sliding window; the minute cells are not
    clock.advance(2_000);
    for bench in ["reap, one expired cell among 1M", "reap, nothing expired"] {
        let (reaped, walk) =
            while_deciding(&engine, |engine| async move { engine.reap_counted().await });
        let fields = format!(
            "\"reaped\":{},\"visited\":{},",
            reaped.removed, reaped.visited
        );
        report(bench, cells, &fields, &walk);
    }
}

/// A global flush tick: the walk for publishable cells (500,000 of them hold a count; the
/// floor is 0), handing them to a store in chunks, and marking each row published. The
/// store is the in-memory one (a B-tree insert a row); it outlives the measurement, so
/// dropping its rows is not part of it.
fn flush() {
    let store = Arc::new(MemoryStore::new());
    let global_store = Arc::clone(&store);
    at_a_million_cells(
        "warm decision during a global flush",
        |_| {},
        |engine| async move {
            let settings = GlobalSettings {
                publish_floor: 0.0,
                ..GlobalSettings::default()
            };
            let global = GlobalCounters::new(
                global_store,
                engine,
                "bench".to_string(),
                settings,
                Arc::new(NoRecorder),
            );
            global.flush().await
        },
        |flushed| {
            format!(
                "\"published\":{},\"failed\":{},",
                flushed.published, flushed.failed
            )
        },
    );
    // The 500,000 counters and the warm key decided beside the flush.
    assert_eq!(store.rows().len(), 500_001, "every counter published");
}

/// The engine's part of a global sync tick: merging what the store returned for every cell
/// (each current and previous cell of the 500,000 counters, foreign counts in each), and
/// dropping it.
fn sync() {
    let sequence = START_MS / MINUTE_MS;
    let synced: Vec<(CellKey, PnCount, PnCount)> = (0..500_000u64)
        .flat_map(|i| {
            let identifier = address(i);
            // New strings per row, as a store decodes them.
            [sequence - 1, sequence].map(|sequence| {
                let key = CellKey::new(
                    "bench",
                    "14:remote_address/",
                    &identifier,
                    MINUTE_MS,
                    sequence,
                );
                (key, PnCount::hits(3), PnCount::default())
            })
        })
        .collect();
    let rows = synced.len();
    at_a_million_cells(
        "warm decision during the sync merge",
        |_| {},
        move |engine| async move {
            engine
                .publication()
                .merge_synced_all(synced, |(key, foreign, own)| (key, *foreign, *own))
                .await
        },
        |created| format!("\"rows\":{rows},\"created\":{created},"),
    );
}

/// One replay cycle of 100,000 pending cells (batches of 1,000 to the in-process origin),
/// while a warm key decides.
fn replay() {
    const KEYS: u64 = 100_000;
    let engine = roomy_engine(&Arc::new(ManualClock::new(START_MS)));
    decide_each(&engine, 0..KEYS);
    let pending = engine.pending_replay_cells();
    let cells = engine.live_cells();
    let ((), walk) = while_deciding(&engine, |engine| async move {
        engine.convergence().replay_now().await
    });
    report(
        "warm decision during a replay",
        cells,
        &format!(
            "\"pending\":{pending},\"left\":{},",
            engine.pending_replay_cells()
        ),
        &walk,
    );
}

/// Window rollover with 1M live cells: 500,000 counters decided in two windows, then the
/// clock moves into the next window and every counter decides again (its current cell is
/// new, its previous cell warm) while the reaper drops the 500,000 cells two windows old.
/// Reports the slowest single decision of that pass and the longest loop turn.
fn rollover() {
    const KEYS: u64 = 500_000;
    let (clock, engine) = filled(KEYS);
    clock.advance(MINUTE_MS);
    fill(&engine, 0..KEYS, |_| {});
    let cells = engine.live_cells();
    clock.advance(MINUTE_MS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let (slowest, walk, reaped) = runtime.block_on(async {
        let reaper = {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move { engine.reap().await })
        };
        // The replay is its own task, as the service's background replay is: woken every
        // `REPLAY_EVERY` decisions, it yields between its batches, so a decision waits for
        // one batch, not for a whole cycle (awaiting the cycle inside the loop made the
        // loop's turn the cycle's: 10 batches and the reaper's slices between them).
        let (wake, replayer) = replayer(&engine);
        let ids = Ids::new();
        let mut identifier = String::new();
        let mut turns = Turns::new();
        let mut slowest = Duration::ZERO;
        let started = Instant::now();
        for i in 0..KEYS {
            write_address(&mut identifier, i);
            let decided = Instant::now();
            engine.check(ids.hit(&identifier, 1_000)).await;
            slowest = slowest.max(decided.elapsed());
            if i % REPLAY_EVERY == REPLAY_EVERY - 1 {
                let _ = wake.try_send(());
            }
            tokio::task::yield_now().await;
            turns.end_turn();
        }
        let took = started.elapsed();
        let reaped = reaper.await.expect("the reaper task");
        drop(wake);
        replayer.await.expect("the replay task");
        (slowest, turns.walk(took), reaped)
    });
    report(
        "decisions across a window rollover",
        cells,
        &format!(
            "\"reaped\":{reaped},\"slowest_decision_ms\":{:.3},",
            slowest.as_secs_f64() * 1e3
        ),
        &walk,
    );
}

/// A replay task as the service runs one: a cycle each time it is woken (wakes while a
/// cycle runs make one more cycle), until the returned sender is dropped.
fn replayer(engine: &Arc<Engine>) -> (tokio::sync::mpsc::Sender<()>, tokio::task::JoinHandle<()>) {
    let (wake, mut woken) = tokio::sync::mpsc::channel(1);
    let engine = Arc::clone(engine);
    let task = tokio::spawn(async move {
        while woken.recv().await.is_some() {
            engine.convergence().replay_now().await;
        }
    });
    (wake, task)
}

/// Decide once on each of `keys` with no replay in between (their work stays pending).
fn decide_each(engine: &Engine, keys: std::ops::Range<u64>) {
    let ids = Ids::new();
    for i in keys {
        decide(engine, ids.hit(&address(i), 1_000));
    }
}

/// `WARM_DECISIONS` (default 1,000,000) warm decisions on one key, nothing else: run it
/// under `valgrind --tool=callgrind` twice with different counts, and the difference of the
/// instruction totals divided by the difference of the counts is the instructions of one
/// warm decision (repeatable on a shared machine, unlike its time). `WARM_KEYS` (default 1)
/// spreads the decisions over that many warm keys in turn: above the heavy-hitters sketch's
/// capacity (64), its samples see a full sketch, as a service with many clients does.
fn warm_loop() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let decisions = env("WARM_DECISIONS", 1_000_000);
    let keys = env("WARM_KEYS", 1).max(1);
    let engine = engine(1_000, 1 << 30);
    let ids = Ids::new();
    let identifiers: Vec<String> = (0..keys).map(address).collect();
    let hits: Vec<_> = identifiers
        .iter()
        .map(|identifier| ids.hit(identifier, u64::MAX / 2))
        .collect();
    for hit in &hits {
        decide(&engine, *hit);
    }
    for (_, hit) in (0..decisions).zip(hits.iter().cycle()) {
        std::hint::black_box(decide(&engine, std::hint::black_box(*hit)));
    }
    println!("{{\"bench\":\"warm loop\",\"decisions\":{decisions},\"keys\":{keys}}}");
}

fn main() {
    // The service's allocator tuning, so that the stalls measured are the service's.
    gcounter_rls::allocator::avoid_consolidation_stalls();
    // `cargo bench` passes `--bench`; a filter argument picks one case.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let cases: [(&str, fn()); 8] = [
        ("per_cell", per_cell),
        ("flood", flood),
        ("reap", reap),
        ("idle_reap", idle_reap),
        ("flush", flush),
        ("sync", sync),
        ("replay", replay),
        ("rollover", rollover),
    ];
    for (name, case) in cases {
        if wants(name) {
            case();
        }
    }
    // Only on request: it is a callgrind target, not a measurement of its own.
    if filter.as_deref() == Some("warm_loop") {
        warm_loop();
    }
}
