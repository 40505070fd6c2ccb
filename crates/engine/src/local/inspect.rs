//! Counter inspection (Fastly's ratecounter view): what the engine holds for one counter, an
//! estimate of its recent rate, and a small heavy-hitters sketch naming the busiest counters
//! without walking the table.
//!
//! The sketch is Space-Saving (Metwally et al.) over a sample of the decisions: every
//! [`SAMPLE_EVERY`]th decision of a thread offers its counter, and only if the sketch's lock
//! is free at once (`try_lock`), so the decision path pays a thread-local increment, and
//! now and then a scan of [`SKETCH_CAPACITY`] entries; it never waits. An offer of a counter
//! the sketch does not hold allocates its key: the one allocation a warm decision may make
//! beyond the replay queue's entry. Counts are halved every [`DECAY_EVERY`] offers, so a
//! counter that was busy an hour ago gives its slot up. The sketch only picks candidates:
//! their rates and nearness to the limit are read from the cells when asked.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, TryLockError};

use quick_cache::Equivalent;

use super::penalty::PenaltyBox;
use super::strict::StrictMode;
use super::table::CellTable;
use super::{Clock, Engine, WindowPosition, Windows};
use crate::cell_key::{CellKeyRef, CounterKey, CounterKeyRef};

/// One decision in this many (per thread) is offered to the sketch.
pub const SAMPLE_EVERY: u32 = 16;
/// Counters the sketch tracks: the most `/counters/top` can list.
pub const SKETCH_CAPACITY: usize = 64;
/// The sketch's counts are halved every this many offers.
const DECAY_EVERY: u64 = 64 * SKETCH_CAPACITY as u64;

/// The counter a descriptor counts on and what limits it, as counter inspection shows them:
/// the limits layer matches the descriptor and fills it in, the admin port reads the engine's
/// cells for `counter` and serializes it. One type for both, so neither restates the other's
/// fields (the admin port does not know the limits layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectedCounter {
    pub counter: CounterKey,
    /// Requests per window of `counter.duration_ms`.
    pub limit: u64,
    /// The penalty box a denial starts (0: none).
    pub penalty_ms: u64,
    /// The rule's path as the limits layer names it (upstream's stats key).
    pub rule_path: std::sync::Arc<str>,
    /// The rule as the limits layer prints it (`/rlconfig`'s line).
    pub rule: String,
}

/// A cell's counts as the engine holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellView {
    /// This region's count (own accepts, merged with the regional origin's total).
    pub regional: u64,
    /// The other regions' sum (from the global sync).
    pub global: u64,
    /// This process's own accepts (its component at the origin).
    pub own: u64,
}

impl CellView {
    pub fn total(&self) -> u64 {
        self.regional.saturating_add(self.global)
    }
}

/// Everything the engine knows of one counter now. A cell not in memory is `None` (never
/// used here, or reaped/evicted: the next decision reads it from the origin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterState {
    pub now_ms: u64,
    pub duration_ms: u64,
    /// Milliseconds into the current cell.
    pub elapsed_ms: u64,
    pub current: Option<CellView>,
    pub previous: Option<CellView>,
    /// Strict mode: each decision reads the origin first (after a recent denial).
    pub strict: bool,
    /// The penalty box holds the counter until then (ms since the epoch).
    pub penalty_until_ms: Option<u64>,
    /// How decisions read the two cells (fixed windows: the current one alone).
    pub windows: Windows,
}

impl CounterState {
    /// The window's count now, as a decision with cost 0 sees it: sliding,
    /// `current + floor(previous × weight)`; fixed, `current`.
    pub fn effective(&self) -> u64 {
        let current = self.current.map_or(0, |c| c.total());
        if self.windows == Windows::Fixed {
            return current;
        }
        let previous = self.previous.map_or(0, |c| c.total());
        let weight_ms = self.duration_ms.saturating_sub(self.elapsed_ms);
        let weighted = (u128::from(previous) * u128::from(weight_ms)
            / u128::from(self.duration_ms.max(1)))
        .min(u128::from(u64::MAX)) as u64;
        current.saturating_add(weighted)
    }

    /// Hits per second over the last `span_ms`, estimated from the two cells assuming the hits
    /// of each cell were spread evenly over it (the cells are all the engine keeps). Beyond
    /// the two cells it knows nothing and counts 0, so a span longer than the window is an
    /// underestimate.
    pub fn estimated_rate(&self, span_ms: u64) -> f64 {
        let span_ms = span_ms.max(1);
        let current = self.current.map_or(0, |c| c.total()) as f64;
        let previous = self.previous.map_or(0, |c| c.total()) as f64;
        let elapsed = self.elapsed_ms.max(1).min(self.duration_ms.max(1));
        let in_current = span_ms.min(elapsed);
        let mut count = current * in_current as f64 / elapsed as f64;
        let rest = span_ms.saturating_sub(elapsed).min(self.duration_ms);
        if rest > 0 {
            count += previous * rest as f64 / self.duration_ms.max(1) as f64;
        }
        count * 1_000.0 / span_ms as f64
    }
}

/// A counter the sketch tracks, with its Space-Saving estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeavyHitter {
    pub counter: CounterKey,
    /// The limit of its most recent sampled decision.
    pub limit: u64,
    /// Sampled decisions counted for it (an overestimate by at most `error`), decayed.
    pub sampled: u64,
    pub error: u64,
}

#[derive(Default)]
struct SketchState {
    entries: Vec<HeavyHitter>,
    offers: u64,
}

impl SketchState {
    /// One sampled decision of `counter` (Space-Saving's update).
    fn offer(&mut self, counter: &CounterKeyRef<'_>, limit: u64) {
        self.offers += 1;
        if self.offers.is_multiple_of(DECAY_EVERY) {
            for entry in &mut self.entries {
                entry.sampled /= 2;
                entry.error /= 2;
            }
        }
        // Compared in place: `borrowed()` would hash each entry's strings (four xxh3 calls),
        // 64 entries per sample once the sketch is full.
        if let Some(entry) = self
            .entries
            .iter_mut()
            .find(|entry| counter.equivalent(&entry.counter))
        {
            entry.sampled += 1;
            entry.limit = limit;
            return;
        }
        let hitter = |sampled, error| HeavyHitter {
            counter: counter.to_owned_key(),
            limit,
            sampled,
            error,
        };
        if self.entries.len() < SKETCH_CAPACITY {
            self.entries.push(hitter(1, 0));
        } else if let Some(least) = self.entries.iter_mut().min_by_key(|entry| entry.sampled) {
            // Space-Saving: the newcomer takes the least one's slot and count (+1), that
            // count being its possible overestimate.
            let floor = least.sampled;
            *least = hitter(floor + 1, floor);
        }
    }
}

/// One shard of the sketch, aligned to its own cache lines (128 bytes: adjacent-line
/// prefetching pairs 64-byte lines), so that two threads sampling into two shards never
/// write the same line.
#[derive(Default)]
#[repr(align(128))]
struct Shard(Mutex<SketchState>);

/// Space-Saving over sampled decisions (see the module), in shards: a thread offers to its
/// own shard (threads take shards in turn), and a snapshot merges them.
///
/// One shared sketch had every core's samples write its lock and its entries: with two
/// threads on distinct keys each sample moved those lines from the other core, which kept
/// two cores from scaling. Space-Saving summaries merge by adding the counts (and the
/// overestimates) of equal counters, so the shards answer together what one sketch did,
/// each bounded by [`SKETCH_CAPACITY`].
pub struct HeavyHitters {
    shards: Box<[Shard]>,
}

impl Default for HeavyHitters {
    /// A shard per core this process may use (at most [`MAX_SHARDS`]).
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with_shards(cores)
    }
}

/// The most shards a sketch has: each holds up to [`SKETCH_CAPACITY`] counters.
const MAX_SHARDS: usize = 64;

thread_local! {
    /// This thread's decision count (for the sampling) and its shard, taken in turn from
    /// [`NEXT_SHARD`] on its first sample.
    static TICK: Cell<u32> = const { Cell::new(0) };
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl HeavyHitters {
    fn with_shards(shards: usize) -> Self {
        let shards = shards.clamp(1, MAX_SHARDS);
        Self {
            shards: (0..shards).map(|_| Shard::default()).collect(),
        }
    }

    /// Called on every decision: cheap unless this one is sampled.
    #[inline]
    pub fn offer(&self, counter: &CounterKeyRef<'_>, limit: u64) {
        let sampled = TICK.with(|tick| {
            let next = tick.get().wrapping_add(1);
            tick.set(next);
            next % SAMPLE_EVERY == 0
        });
        if sampled {
            self.offer_sampled(counter, limit);
        }
    }

    #[cold]
    fn offer_sampled(&self, counter: &CounterKeyRef<'_>, limit: u64) {
        let slot = SHARD.with(|shard| {
            shard.get().unwrap_or_else(|| {
                let taken = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
                shard.set(Some(taken));
                taken
            })
        });
        let Some(Shard(shard)) = self.shards.get(slot % self.shards.len()) else {
            return;
        };
        let mut state = match shard.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Someone else is in: skip this sample rather than wait.
            Err(TryLockError::WouldBlock) => return,
        };
        state.offer(counter, limit);
    }

    /// The tracked counters, most sampled first (ties in the counters' order): the shards merged (equal counters add
    /// their counts), at most [`SKETCH_CAPACITY`].
    pub fn snapshot(&self) -> Vec<HeavyHitter> {
        let mut merged: HashMap<CounterKey, HeavyHitter> = HashMap::new();
        for Shard(shard) in &*self.shards {
            let state = match shard.lock() {
                Ok(state) => state,
                Err(poisoned) => poisoned.into_inner(),
            };
            for entry in &state.entries {
                merged
                    .entry(entry.counter.clone())
                    .and_modify(|m| {
                        m.sampled += entry.sampled;
                        m.error += entry.error;
                        m.limit = entry.limit;
                    })
                    .or_insert_with(|| entry.clone());
            }
        }
        let mut merged: Vec<HeavyHitter> = merged.into_values().collect();
        // Ties in the counters' order, so the same sketch always lists the same way.
        merged.sort_by(|a, b| {
            b.sampled
                .cmp(&a.sampled)
                .then_with(|| a.counter.cmp(&b.counter))
        });
        merged.truncate(SKETCH_CAPACITY);
        merged
    }
}

/// What the engine holds, read for the admin port's inspection ([`Engine::inspection`]):
/// reads only; creates nothing, reads no origin.
#[derive(Clone, Copy)]
pub struct Inspection<'e> {
    table: &'e CellTable,
    strict: &'e StrictMode,
    penalties: &'e PenaltyBox,
    hitters: &'e HeavyHitters,
    clock: &'e dyn Clock,
    windows: Windows,
}

impl Engine {
    /// Inspecting counters and the busiest of them.
    pub fn inspection(&self) -> Inspection<'_> {
        Inspection {
            table: &self.table,
            strict: &self.strict,
            penalties: &self.penalties,
            hitters: &self.hitters,
            clock: self.clock.as_ref(),
            windows: self.settings.windows,
        }
    }
}

impl Inspection<'_> {
    /// What the engine holds for `counter` now (for inspection): its two cells if in memory,
    /// strict mode, the penalty box. Reads only; creates nothing, reads no origin.
    pub fn inspect(&self, counter: &CounterKeyRef<'_>) -> CounterState {
        let now_ms = self.clock.now_ms();
        let position = WindowPosition::at(now_ms, counter.duration_ms);
        let view = |sequence: u64| {
            let key = CellKeyRef::new(
                counter.scope,
                counter.identifier,
                position.duration_ms,
                sequence,
            );
            self.table.get(&key).map(|cell| CellView {
                regional: cell.regional(),
                global: cell.global(),
                own: cell.own(),
            })
        };
        CounterState {
            now_ms,
            duration_ms: position.duration_ms,
            elapsed_ms: position.elapsed_ms,
            current: view(position.sequence),
            previous: position.previous_sequence().and_then(view),
            strict: self.strict.is_strict(counter, now_ms),
            penalty_until_ms: self.penalties.held_until(counter, now_ms),
            windows: self.windows,
        }
    }

    /// The busiest counters of late (a sampled heavy-hitters sketch of at most
    /// [`SKETCH_CAPACITY`] entries), most sampled first.
    pub fn heavy_hitters(&self) -> Vec<HeavyHitter> {
        self.hitters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_heaviest_counters_stay_in_a_full_sketch() {
        let sketch = HeavyHitters::default();
        // Two heavy counters among a thousand one-off ones.
        for i in 0..1_000u32 {
            let id = format!("cold-{i}");
            for _ in 0..SAMPLE_EVERY {
                sketch.offer(&CounterKeyRef::for_test(&id), 5);
            }
            for _ in 0..4 * SAMPLE_EVERY {
                sketch.offer(&CounterKeyRef::for_test("heavy"), 10);
            }
            for _ in 0..2 * SAMPLE_EVERY {
                sketch.offer(&CounterKeyRef::for_test("warm"), 10);
            }
        }
        let top = sketch.snapshot();
        assert_eq!(top.len(), SKETCH_CAPACITY);
        let names: Vec<&str> = top.iter().map(|h| &*h.counter.identifier).collect();
        assert_eq!(&names[..2], ["heavy", "warm"], "{names:?}");
        assert_eq!(top[0].limit, 10);
    }

    #[test]
    fn samples_of_threads_in_their_own_shards_are_merged() {
        let sketch = Arc::new(HeavyHitters::with_shards(4));
        // Four threads, one after another (so no sample is skipped on a busy lock), each
        // taking the next shard: each samples "shared" and a counter of its own ten times
        // (a new thread's tick starts at 0: each block of SAMPLE_EVERY offers ends in one
        // sample of its counter).
        for t in 0..4 {
            let sketch = Arc::clone(&sketch);
            std::thread::spawn(move || {
                let own = format!("own-{t}");
                for _ in 0..10 {
                    for _ in 0..SAMPLE_EVERY {
                        sketch.offer(&CounterKeyRef::for_test("shared"), 7);
                    }
                    for _ in 0..SAMPLE_EVERY {
                        sketch.offer(&CounterKeyRef::for_test(&own), 7);
                    }
                }
            })
            .join()
            .expect("sampling thread");
        }
        let top = sketch.snapshot();
        let names: Vec<(&str, u64)> = top
            .iter()
            .map(|h| (&*h.counter.identifier, h.sampled))
            .collect();
        assert_eq!(
            names,
            [
                ("shared", 40),
                ("own-0", 10),
                ("own-1", 10),
                ("own-2", 10),
                ("own-3", 10)
            ],
        );
        assert!(top.iter().all(|h| h.error == 0 && h.limit == 7));
    }

    #[test]
    fn the_rate_estimate_spreads_each_cell_evenly() {
        let state = CounterState {
            now_ms: 0,
            duration_ms: 60_000,
            elapsed_ms: 30_000,
            current: Some(CellView {
                regional: 30,
                global: 0,
                own: 30,
            }),
            previous: Some(CellView {
                regional: 60,
                global: 60,
                own: 10,
            }),
            strict: false,
            penalty_until_ms: None,
            windows: Default::default(),
        };
        // last 10 s: a third of the current cell's 30 → 1/s
        assert!((state.estimated_rate(10_000) - 1.0).abs() < 1e-9);
        // last 60 s: the 30 of this cell and half the previous 120 → 90 / 60 s
        assert!((state.estimated_rate(60_000) - 1.5).abs() < 1e-9);
        assert_eq!(state.effective(), 30 + 60);
    }
}
