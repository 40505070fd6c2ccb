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
//! the floor together are the excess (10 regions × 2 % is 0.2× the limit). Nothing changes on
//! the request path but one comparison per admission and, on a contended cell, a relaxed add
//! per denial; no fast tick walks the table.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::{Flushed, GlobalCounters, GlobalSettings};
use crate::cell_key::CellKey;
use crate::local::Engine;

/// The default `onset_fraction`: 2 % of a limit (at least `onset_min_hits`). Ten regions
/// surging at once at 2–20× then stay within 1.25× the limit over any window, and the
/// design's load model runs 3.5 syncs/s instead of 3.4 while reading fewer rows than full
/// syncs did (ACCURACY.md, "Onset and contended cadence"). 0 turns the fast cadence off,
/// contended cells included.
pub const DEFAULT_ONSET_FRACTION: f64 = 0.02;

/// The default `onset_min_hits`: with 1 s intervals (seeds 1–3), 12 (2 % of a limit of 600)
/// left ten regions at 5× at up to 1.18× their limit over a window (1.11 at 15) for the same
/// syncs; 20 left them at up to 1.16× in the onset window (1.04 at 15) (ACCURACY.md, "Onset
/// cadence").
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

/// The most cells watched at once (held, or measured for it): far more than are hot at once
/// in practice, and a flood of distinct keys surging or denied together cannot make the
/// process hold, or each fast tick walk, more. The cells left out keep the normal cadence.
const MAX_HOT: usize = 10_000;

/// The cells at their onset or contended, and what decides whether each is held.
#[derive(Default)]
pub(super) struct HotCells(Mutex<HashMap<CellKey, Hot>>);

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
        let mut hot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
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
                && let Some((hits, limit, shared)) = publication.growth_of(key)
            {
                let base = *cell.onset_hits.get_or_insert(hits);
                let since = cell.onset_since.unwrap_or(now_ms);
                if !shared
                    && (now_ms >= since.saturating_add(ONSET_GRACE_MS)
                        || publication.counted_alone_before(key))
                {
                    cell.onset_at = None;
                } else if engine
                    .onset()
                    .threshold(limit)
                    .is_some_and(|threshold| hits >= base.saturating_add(threshold))
                {
                    cell.onset_at = Some(now_ms);
                    cell.onset_hits = Some(hits);
                }
            }
            if !Hot::recent(cell.onset_at, now_ms) {
                cell.onset_since = None;
            }
            if cell.contended_at.is_some() {
                match publication.sample_contended(key) {
                    Some(sample) => cell.sample(sample, now_ms, overload),
                    None => return false,
                }
            }
            Hot::recent(cell.onset_at, now_ms) || Hot::recent(cell.contended_at, now_ms)
        });
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
        let rows = self.engine.publication().publishable_of(&held, 0.0);
        if !rows.is_empty() {
            let deadline = tokio::time::Instant::now() + self.settings.timeout;
            let (mut flushed, mut failed_chunks) = (Flushed::default(), 0);
            self.publish_chunk(&rows, deadline, &mut flushed, &mut failed_chunks)
                .await;
        }
        self.sync().await;
        held.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cell_key::CounterKeyRef;
    use crate::global::counters::tests::counters;
    use crate::global::{GlobalStore, MemoryStore};
    use crate::local::{Clock, Hit, ManualClock};

    /// An hour into an hourly window.
    const START_MS: u64 = 3_600_000 * 100 + 1_000;

    fn region(name: &str, store: &Arc<MemoryStore>, clock: &Arc<ManualClock>) -> GlobalCounters {
        let settings = GlobalSettings {
            onset_fraction: 0.02,
            ..GlobalSettings::default()
        };
        counters(name, store, clock, settings)
    }

    /// `times` hits of 1 on `identifier` (limit 600 an hour); returns how many were admitted.
    async fn decide(counters: &GlobalCounters, identifier: &str, times: u64) -> u64 {
        let (workspace, namespace): (Arc<str>, Arc<str>) = ("d".into(), "4:user/".into());
        let mut admitted = 0;
        for _ in 0..times {
            let hit = Hit {
                counter: CounterKeyRef::new(&workspace, &namespace, identifier, 3_600_000),
                limit: 600,
                cost: 1,
            };
            admitted += u64::from(counters.engine.check(hit).await.allowed);
        }
        admitted
    }

    async fn admit(counters: &GlobalCounters, identifier: &str, times: u64) {
        assert_eq!(decide(counters, identifier, times).await, times);
    }

    #[tokio::test]
    async fn a_cell_at_its_onset_is_published_and_synced_at_the_fast_cadence() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let (a, b) = (region("a", &store, &clock), region("b", &store, &clock));
        assert!(a.onset_enabled());
        // Under the threshold (max(2 % of 600, the minimum)) on one counter, at it on another.
        let at = DEFAULT_ONSET_MIN_HITS;
        admit(&a, "quiet", at - 1).await;
        admit(&a, "surge", at).await;
        admit(&b, "surge", at).await;
        clock.advance(100);
        assert_eq!(a.onset_tick().await, 1, "only the surging cell is held");
        let rows = store
            .own_rows("a", clock.now_ms())
            .await
            .unwrap_or_default();
        assert_eq!(
            rows.len(),
            1,
            "the surging cell is published, the quiet one waits"
        );
        assert_eq!(b.onset_tick().await, 1);
        // `b` synced after `a` published: it counts `a`'s hits.
        let seen = b.engine.inspection().inspect(&CounterKeyRef::new(
            &"d".into(),
            &"4:user/".into(),
            "surge",
            3_600_000,
        ));
        assert_eq!(seen.current.map(|c| c.total()), Some(2 * at));
        // No more growth: the cell leaves two seconds after its last crossing.
        clock.advance(HOLD_MS);
        assert_eq!(a.onset_tick().await, 0);
    }

    #[tokio::test]
    async fn growth_long_after_a_flush_is_no_onset() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let a = region("a", &store, &clock);
        clock.advance(SPAN_MS);
        admit(&a, "slow", DEFAULT_ONSET_MIN_HITS).await;
        assert_eq!(
            a.onset_tick().await,
            0,
            "the gate closed a second after the start"
        );
        a.flush().await;
        admit(&a, "slow", DEFAULT_ONSET_MIN_HITS).await;
        assert_eq!(a.onset_tick().await, 1, "a flush opens it again");
    }

    #[tokio::test]
    async fn a_contended_cell_is_held_while_its_overload_lasts() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let (a, b) = (region("a", &store, &clock), region("b", &store, &clock));
        // Past the start's gate: these admissions are no onset.
        clock.advance(SPAN_MS);
        admit(&a, "hot", 300).await;
        admit(&b, "hot", 300).await;
        admit(&a, "calm", 300).await;
        admit(&b, "calm", 300).await;
        for region in [&a, &b] {
            region.flush().await;
        }
        for region in [&a, &b] {
            region.sync().await;
        }
        // Each region knows the other's 300: the limit is reached. Ten denials a tick on one
        // cell, two on the other (under the fewest that make an overload).
        let mut held = Vec::new();
        for _ in 0..3 {
            assert_eq!(decide(&a, "hot", 10).await, 0);
            assert_eq!(decide(&a, "calm", 2).await, 0);
            clock.advance(100);
            held.push(a.onset_tick().await);
        }
        assert_eq!(
            held,
            [0, 1, 1],
            "measured from the second tick on, then held; the calm cell never"
        );
        // No more denials: the cell leaves two seconds after the last.
        clock.advance(HOLD_MS);
        assert_eq!(a.onset_tick().await, 0);
    }

    #[tokio::test]
    async fn an_onset_no_other_region_shares_is_let_go_after_the_grace() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let a = region("a", &store, &clock);
        let at = DEFAULT_ONSET_MIN_HITS;
        admit(&a, "alone", at).await;
        clock.advance(100);
        assert_eq!(a.onset_tick().await, 1);
        // Still growing fast, but no other region counts the cell.
        for _ in 0..9 {
            admit(&a, "alone", 2).await;
            clock.advance(100);
            a.onset_tick().await;
        }
        clock.advance(100);
        assert_eq!(a.onset_tick().await, 0, "let go a second after its onset");
    }

    #[tokio::test]
    async fn an_onset_of_a_counter_alone_in_its_previous_window_gets_no_grace() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let (a, b) = (region("a", &store, &clock), region("b", &store, &clock));
        let at = DEFAULT_ONSET_MIN_HITS;
        // Counted in this hour by `a` alone, and by both (at the publish floor, 2 % of 600).
        let floor = 12;
        admit(&a, "mine", floor).await;
        admit(&a, "ours", floor).await;
        admit(&b, "ours", floor).await;
        for region in [&a, &b] {
            region.flush().await;
        }
        a.sync().await;
        // The next hour: both surge in `a`, past the gate a flush opens.
        clock.advance(3_600_000);
        a.flush().await;
        admit(&a, "mine", at).await;
        admit(&a, "ours", at).await;
        clock.advance(100);
        assert_eq!(
            a.onset_tick().await,
            1,
            "the shared counter is held for the grace, the other let go at once"
        );
        let held = a.hot.update(&a.engine, 2.0, clock.now_ms());
        assert_eq!(held.len(), 1);
        assert!(held.iter().all(|key| key.identifier == "ours"), "{held:?}");
    }

    #[tokio::test]
    async fn the_cells_watched_at_once_are_bounded() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(START_MS));
        let a = region("a", &store, &clock);
        let now = clock.now_ms();
        {
            let mut hot = a.hot.0.lock().unwrap_or_else(PoisonError::into_inner);
            for i in 0..MAX_HOT {
                let key = CellKey::new("d", "4:user/", &format!("flood-{i}"), 3_600_000, 100);
                hot.entry(key).or_default().onset_at = Some(now);
            }
        }
        admit(&a, "late", DEFAULT_ONSET_MIN_HITS).await;
        let held = a.hot.update(&a.engine, 2.0, now);
        assert_eq!(held.len(), MAX_HOT, "the flood's cells only");
        assert!(held.iter().all(|key| key.identifier.starts_with("flood-")));
    }
}
