//! The fast cadence: cells at their onset and contended cells, published (with no floor)
//! and synced every `onset_interval`, so that regions hear of each other within a fraction
//! of the normal delay where it decides how far over the limit they go.
//!
//! **Onset.** When a surge starts in every region at once, each region admits alone until the
//! others' counts reach it: about the fleet's rate times the delay `d` over the limit in the
//! window it starts in (10 regions, 20× offered, 1 s intervals: twice the limit). The
//! engine's [`OnsetWatch`](crate::local::OnsetWatch) queues a cell when an admission takes its
//! unpublished count across `max(onset_fraction × limit, onset_min_hits)` within [`SPAN_MS`]
//! of a flush. The cell stays held while its region's count grows by that threshold within
//! each [`HOLD_MS`]; one that no other region counts [`ONSET_GRACE_MS`] after its onset began
//! is let go (most cells are used from one region, where fast ticks buy nothing), and one of a
//! counter that only its region counted in the previous window at once.
//!
//! **Contended.** Once regions hear of each other, each takes what the sliding window frees
//! while the others' counts are on their way: `(ρ − 1) × d / D` over the limit for a counter
//! offered `ρ` times it. A cell another region counts and this process denies is queued once
//! per fast tick, its denials counted in the cell; it is held while its own overload (denials
//! per admission here, decayed over [`OVERLOAD_DECAY_MS`]) reaches `contended_overload` with at
//! least [`MIN_DENIED`] denials, and until [`HOLD_MS`] after it last did. The next window's
//! cell of an overloaded counter is held from its first denial.
//!
//! Held cells publish with no floor: in a race near the limit, every region's counts below
//! the floor together are the excess (10 regions × 2 % is 0.2× the limit). A fast tick syncs
//! after it published, or while it holds a cell another region counts: one that published
//! nothing for cells of its region alone has nothing to race for. Nothing changes on
//! the request path but one comparison per admission and, on a contended cell, a relaxed add
//! per denial; no fast tick walks the table.
//!
//! **Urgent.** A surge that consumes the whole limit within a second (a burst at a window
//! boundary, 50× the limit's rate) is over within a few fast ticks: each region admits alone
//! for most of it. While a shared cell at its onset would, at the rate its total grew since
//! the onset began, reach its limit within [`URGENT_HORIZON_MS`], the ticks come
//! `onset_urgent_divisor` times as often (5: every 20 ms). Only that approach to the limit
//! pays for them: a cell one region uses, a slow one, and one already at its limit
//! (contended) keep the interval.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::{Flushed, GlobalCounters, GlobalSettings};
use crate::cell_key::CellKey;
use crate::local::{CellGrowth, Engine};

/// The default `onset_fraction`: 2 % of a limit (at least `onset_min_hits`). Ten regions
/// surging at once at 2–20× then stay within 1.25× the limit over any window, and the
/// design's load model runs 3.4 syncs/s, as without it, while reading fewer rows than full
/// syncs did (ACCURACY.md, "The fast cadence"). 0 turns the fast cadence off,
/// contended cells included.
pub const DEFAULT_ONSET_FRACTION: f64 = 0.02;

/// The default `onset_min_hits`: with 1 s intervals (seeds 1–3), 20 left ten regions at 5×
/// at up to 1.16× their limit in the onset window (1.02 at 15); 12 (2 % of a limit of 600)
/// gives what 15 does there, and a lower minimum makes more of a quiet key's chance bunching
/// an onset (ACCURACY.md, "The fast cadence").
pub const DEFAULT_ONSET_MIN_HITS: u64 = 15;

/// The default `onset_interval`: the overload cadence's shortest interval.
pub const DEFAULT_ONSET_INTERVAL: Duration = Duration::from_millis(100);

/// Crossings count for this long after a flush: the rate that makes an onset is a threshold
/// per second, not per flush interval (which is ten times longer at the defaults).
pub(super) const SPAN_MS: u64 = 1_000;

/// A held cell leaves this long after its last crossing.
const HOLD_MS: u64 = 2_000;

/// A cell at its onset that no other region counts after this long is let go (see
/// `HotCells::update`).
const ONSET_GRACE_MS: u64 = 1_000;

/// The per-cell overload is measured over about this long (an exponential decay): long
/// enough that the admissions when the sliding window frees capacity do not pull it under the
/// threshold, short enough to follow a surge.
const OVERLOAD_DECAY_MS: f64 = 1_000.0;

/// The fewest denials (decayed, about per second) that make a contended cell overloaded:
/// below them the measure is noise (two denials and no admission in a second is no
/// overload), and the statements of the fast cadence buy nothing.
const MIN_DENIED: f64 = 4.0;

/// A shared cell at its onset whose total, growing as it did since the onset began, would
/// reach its limit within this long makes the fast ticks urgent: ten normal fast ticks, so a
/// surge is seen well before its limit is gone, and a steady climb only near its end.
const URGENT_HORIZON_MS: u64 = 1_000;

/// The default `onset_urgent_divisor`: while urgent, the fast ticks come this many times as
/// often (20 ms at the default interval). Ten regions bursting at 50× the limit's rate then
/// stay within 1.20× it over any window with the database 1 ms away (1.47–1.56× without),
/// 1.26–1.28× at 25 ms (ACCURACY.md, "Urgent ticks").
pub const DEFAULT_ONSET_URGENT_DIVISOR: u32 = 5;

/// The shortest urgent interval, whatever the divisor: the onset interval's own minimum.
const MIN_URGENT_INTERVAL: Duration = Duration::from_millis(10);

/// The most cells watched at once (held, or measured for it): far more than are hot at once
/// in practice, and a flood of distinct keys surging or denied together cannot make the
/// process hold, or each fast tick walk, more. The cells left out keep the normal cadence.
const MAX_HOT: usize = 10_000;

/// The cells at their onset or contended, and what decides whether each is held.
#[derive(Default)]
pub(super) struct HotCells {
    cells: Mutex<HashMap<CellKey, Hot>>,
    /// Whether the last update found a held cell closing in on its limit (see
    /// [`URGENT_HORIZON_MS`]).
    urgent: AtomicBool,
}

#[derive(Debug, Default)]
struct Hot {
    /// When the cell last crossed an onset threshold.
    onset_at: Option<u64>,
    /// When a decision last denied the cell while another region counts it.
    contended_at: Option<u64>,
    /// This process's denials and admissions in the cell, decayed over
    /// [`OVERLOAD_DECAY_MS`], since it was first contended.
    denied: f64,
    admitted: f64,
    /// The process's hits in the cell and the instant, at the last sample.
    sampled: Option<(u64, u64)>,
    /// When the overload last reached the threshold.
    overloaded_at: Option<u64>,
    /// The region's hits in the cell when its onset was last renewed.
    onset_hits: Option<u64>,
    /// When the onset began (the first crossing since the cell was last let go).
    onset_since: Option<u64>,
    /// The cell's total (all regions) and the instant at the onset's first update.
    onset_total: Option<(u64, u64)>,
}

impl Hot {
    fn recent(at: Option<u64>, now_ms: u64) -> bool {
        at.is_some_and(|at| now_ms < at.saturating_add(HOLD_MS))
    }

    /// Take in the cell's denials and hits since the last sample.
    fn sample(&mut self, (denied, own): (u64, u64), now_ms: u64, overload: f64) {
        if let Some((own_before, at)) = self.sampled {
            let decay = (-(now_ms.saturating_sub(at) as f64) / OVERLOAD_DECAY_MS).exp();
            self.denied = self.denied * decay + denied as f64;
            self.admitted = self.admitted * decay + own.saturating_sub(own_before) as f64;
            if self.denied >= MIN_DENIED && self.denied >= overload * self.admitted {
                self.overloaded_at = Some(now_ms);
            }
        }
        self.sampled = Some((own, now_ms));
    }

    /// Whether a shared cell at its onset, its total growing as it did since the onset's
    /// first fast tick, reaches its limit within [`URGENT_HORIZON_MS`] (and still has room: one
    /// at its limit is contended, where the race is for what the sliding window frees,
    /// slowly). The rate is measured from the onset's start, not the last tick: between two
    /// urgent ticks the other regions' counts have often not arrived yet.
    fn closing_in(&mut self, growth: CellGrowth, now_ms: u64) -> bool {
        let (total_before, at) = *self.onset_total.get_or_insert((growth.total, now_ms));
        let room = growth.limit.saturating_sub(growth.total);
        let grown = growth.total.saturating_sub(total_before);
        let elapsed = now_ms.saturating_sub(at).max(1);
        growth.shared
            && room > 0
            && u128::from(grown) * u128::from(URGENT_HORIZON_MS)
                >= u128::from(room) * u128::from(elapsed)
    }

    /// Whether the cell is held: at its onset, or contended and, within the hold, denied at
    /// least `overload` times per admission (`ρ − 1` for a counter offered `ρ` times its
    /// limit).
    fn held(&self, now_ms: u64) -> bool {
        Self::recent(self.onset_at, now_ms)
            || (Self::recent(self.contended_at, now_ms) && Self::recent(self.overloaded_at, now_ms))
    }
}

/// Set the engine's watch from the settings.
pub(super) fn watch(engine: &Engine, settings: &GlobalSettings) {
    engine
        .onset()
        .enable(settings.onset_fraction, settings.onset_min_hits);
    engine
        .onset()
        .open_until(engine.now_ms().saturating_add(SPAN_MS));
}

impl HotCells {
    /// Take in the newly queued cells, sample the contended ones, drop those that cooled
    /// down or ended, and return the keys held.
    fn update(&self, engine: &Engine, overload: f64, now_ms: u64) -> Vec<CellKey> {
        let onset = engine.onset().take();
        let contended = engine.onset().take_contended();
        let mut hot = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        let publication = engine.publication();
        for key in onset {
            if hot.len() >= MAX_HOT && !hot.contains_key(&key) {
                continue;
            }
            let cell = hot.entry(key).or_default();
            cell.onset_at = Some(now_ms);
            cell.onset_hits = None;
            cell.onset_since.get_or_insert(now_ms);
        }
        for key in contended {
            if hot.len() >= MAX_HOT && !hot.contains_key(&key) {
                // Left to the normal cadence; its next denial may queue it again.
                publication.sample_contended(&key);
                continue;
            }
            // A counter overloaded in its previous window is overloaded in this one from
            // its first denial: waiting for the new cell's own measure left each region's
            // first counts of every window unpublished (below the floor) in the race.
            let inherited = key.sequence.checked_sub(1).and_then(|sequence| {
                let previous = CellKey {
                    sequence,
                    ..key.clone()
                };
                hot.get(&previous).and_then(|cell| cell.overloaded_at)
            });
            let cell = hot.entry(key).or_default();
            cell.contended_at = Some(now_ms);
            if cell.overloaded_at.is_none() {
                cell.overloaded_at = inherited.filter(|&at| Hot::recent(Some(at), now_ms));
            }
        }
        let mut urgent = false;
        hot.retain(|key, cell| {
            let ends = key
                .sequence
                .saturating_add(1)
                .saturating_mul(key.duration_ms);
            // An ended cell stays a hold longer, for the next window's cell to inherit its
            // overload, and is never held.
            if now_ms >= ends {
                return now_ms < ends.saturating_add(HOLD_MS);
            }
            // A cell at its onset stays held while its region's count grows by the onset
            // threshold within each hold (the engine's watch sees only the second after a
            // flush; a fast tick's publication does not reopen it, or one held cell kept it
            // open for every slow one).
            // One that no other region counts a grace after its onset began is let go:
            // another region surging at once publishes within the grace, and most cells are
            // used from one region only, where the fast ticks buy nothing. A counter only
            // this region counted in its previous window gets no grace: its "onset" is most
            // often this region's own traffic read back from its siblings in one jump.
            if Hot::recent(cell.onset_at, now_ms)
                && let Some(growth) = publication.growth_of(key)
            {
                let hits = growth.regional_hits;
                let base = *cell.onset_hits.get_or_insert(hits);
                let since = cell.onset_since.unwrap_or(now_ms);
                if !growth.shared
                    && (now_ms >= since.saturating_add(ONSET_GRACE_MS)
                        || publication.counted_alone_before(key))
                {
                    cell.onset_at = None;
                } else if engine
                    .onset()
                    .threshold(growth.limit)
                    .is_some_and(|threshold| hits >= base.saturating_add(threshold))
                {
                    cell.onset_at = Some(now_ms);
                    cell.onset_hits = Some(hits);
                }
                if Hot::recent(cell.onset_at, now_ms) {
                    urgent |= cell.closing_in(growth, now_ms);
                }
            }
            if !Hot::recent(cell.onset_at, now_ms) {
                cell.onset_since = None;
                cell.onset_total = None;
            }
            if cell.contended_at.is_some() {
                match publication.sample_contended(key) {
                    Some(sample) => cell.sample(sample, now_ms, overload),
                    None => return false,
                }
            }
            Hot::recent(cell.onset_at, now_ms) || Hot::recent(cell.contended_at, now_ms)
        });
        self.urgent.store(urgent, Ordering::Relaxed);
        hot.iter()
            .filter(|(key, cell)| {
                now_ms
                    < key
                        .sequence
                        .saturating_add(1)
                        .saturating_mul(key.duration_ms)
                    && cell.held(now_ms)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }
}

impl GlobalCounters {
    /// Whether the fast cadence (cells at their onset, contended cells) is on.
    pub fn onset_enabled(&self) -> bool {
        self.settings.onset_fraction > 0.0
    }

    /// How long until the next fast tick: the onset interval, or an `onset_urgent_divisor`th
    /// of it (never below 10 ms) while a held cell closes in on its limit (see the module
    /// docs).
    pub fn onset_wait(&self) -> Duration {
        let every = self.settings.onset_interval.max(Duration::from_millis(1));
        let divisor = self.settings.onset_urgent_divisor.max(1);
        if divisor > 1 && self.hot.urgent.load(Ordering::Relaxed) {
            (every / divisor).max(MIN_URGENT_INTERVAL.min(every))
        } else {
            every
        }
    }

    /// One fast tick: publish the held cells that changed (no floor), then sync, while
    /// any is held. Returns the cells held (0: nothing ran).
    pub async fn onset_tick(&self) -> usize {
        let now_ms = self.engine.now_ms();
        let held = self
            .hot
            .update(&self.engine, self.settings.contended_overload, now_ms);
        if held.is_empty() {
            return 0;
        }
        // No floor: a held cell is near its limit in a race between regions, where the
        // counts below the floor of every region together are the excess.
        let publication = self.engine.publication();
        let rows = publication.publishable_of(&held, 0.0);
        let published = !rows.is_empty();
        if published {
            let deadline = tokio::time::Instant::now() + self.settings.timeout;
            let (mut flushed, mut failed_chunks) = (Flushed::default(), 0);
            self.publish_chunk(&rows, deadline, &mut flushed, &mut failed_chunks)
                .await;
        }
        // A tick that published nothing, with no held cell another region counts (or counted
        // in the previous window), has nothing to race for: this region admitted nothing in
        // them since the last tick, and another region surging in one holds it on its own
        // side. Its sync would read only what the normal cadence reads: an onset of a counter
        // used here alone, held for its grace, was ten syncs of nothing.
        let shared = || held.iter().any(|key| publication.shared_now_or_before(key));
        if published || shared() {
            self.sync().await;
        }
        held.len()
    }
}

#[cfg(test)]
mod tests;
