//! The fast cadence of cells at their onset: published and synced every `onset_interval`
//! while their region's count grows fast, so that regions hear of each other's surge within
//! a fraction of the normal delay.
//!
//! When a surge starts in every region at once, each region admits alone until the others'
//! counts reach it: about the fleet's rate times the delay `d` over the limit in the window
//! it starts in (10 regions, 20× offered, 1 s intervals: twice the limit). The engine's
//! [`OnsetWatch`](crate::local::OnsetWatch) queues a cell when an admission takes its
//! unpublished count across `max(onset_fraction × limit, onset_min_hits)` within
//! [`SPAN_MS`] of a flush, that is at a rate the normal cadence would carry over. Those cells,
//! and only those, are held here; each fast tick publishes the held cells that changed (one
//! statement) and syncs. A cell leaves [`HOLD_MS`] after its last crossing (the surge reached
//! the limit and admissions slowed to what the sliding window frees, which the overload
//! cadence covers) or when its window ends. Nothing changes on the request path but one
//! comparison per admission, and no fast tick walks the table.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::{Flushed, GlobalCounters, GlobalSettings};
use crate::cell_key::CellKey;
use crate::local::Engine;

/// The default `onset_fraction`: off. At 0.02 (with the default minimum, 15 hits at a limit of
/// 600) ten regions surging at once at 20× admit 1.08–1.14× the limit in the onset window
/// instead of 1.86–2.20×, but at the design's load model the fast ticks double its sync
/// statements (3.4 → 6.5/s; incremental, they read 1.25× the rows: ACCURACY.md, "Onset
/// cadence"): an operator whose database takes them turns it on.
pub const DEFAULT_ONSET_FRACTION: f64 = 0.0;

/// The default `onset_min_hits`: with 1 s intervals, 12 (2 % of a limit of 600) also caught
/// each new window's cell of a limit offered 2× over 10 regions (its count below the floor is
/// unpublished since the cell began), which nearly doubled that scenario's syncs for no
/// accuracy; 20 left ten regions at 5× at up to 1.26× their limit in the onset window
/// (ACCURACY.md, "Onset cadence").
pub const DEFAULT_ONSET_MIN_HITS: u64 = 15;

/// The default `onset_interval`: the overload cadence's shortest interval.
pub const DEFAULT_ONSET_INTERVAL: Duration = Duration::from_millis(100);

/// Crossings count for this long after a flush: the rate that makes an onset is a threshold
/// per second, not per flush interval (which is ten times longer at the defaults).
pub(super) const SPAN_MS: u64 = 1_000;

/// A held cell leaves this long after its last crossing.
const HOLD_MS: u64 = 2_000;

/// The cells at their onset, with the instant each last crossed a threshold.
#[derive(Default)]
pub(super) struct HotCells(Mutex<HashMap<CellKey, u64>>);

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
    /// Take in the newly queued cells, drop those that cooled down or ended, and return the
    /// keys still held.
    fn update(&self, queued: Vec<CellKey>, now_ms: u64) -> Vec<CellKey> {
        let mut hot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for key in queued {
            hot.insert(key, now_ms);
        }
        hot.retain(|key, crossed| {
            let ends = key
                .sequence
                .saturating_add(1)
                .saturating_mul(key.duration_ms);
            now_ms < crossed.saturating_add(HOLD_MS) && now_ms < ends
        });
        hot.keys().cloned().collect()
    }
}

impl GlobalCounters {
    /// Whether the fast cadence of cells at their onset is on.
    pub fn onset_enabled(&self) -> bool {
        self.settings.onset_fraction > 0.0
    }

    /// One fast tick: publish the cells held at their onset that changed, then sync, while
    /// any is held. Returns the cells held (0: nothing ran).
    pub async fn onset_tick(&self) -> usize {
        let now_ms = self.engine.now_ms();
        let held = self.hot.update(self.engine.onset().take(), now_ms);
        if held.is_empty() {
            return 0;
        }
        let rows = self
            .engine
            .publication()
            .publishable_of(&held, self.settings.publish_floor);
        if !rows.is_empty() {
            let deadline = tokio::time::Instant::now() + self.settings.timeout;
            let (mut flushed, mut failed_chunks) = (Flushed::default(), 0);
            self.publish_chunk(&rows, deadline, &mut flushed, &mut failed_chunks)
                .await;
            self.engine
                .onset()
                .open_until(now_ms.saturating_add(SPAN_MS));
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

    async fn admit(counters: &GlobalCounters, identifier: &str, times: u64) {
        let (workspace, namespace): (Arc<str>, Arc<str>) = ("d".into(), "4:user/".into());
        for _ in 0..times {
            let hit = Hit {
                counter: CounterKeyRef::new(&workspace, &namespace, identifier, 3_600_000),
                limit: 600,
                cost: 1,
            };
            assert!(counters.engine.check(hit).await.allowed);
        }
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
}
