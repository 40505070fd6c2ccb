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
    let scope = crate::cell_key::Scope::new("d", "4:user/");
    let mut admitted = 0;
    for _ in 0..times {
        let hit = Hit {
            counter: CounterKeyRef::new(&scope, identifier, 3_600_000),
            limit: 600,
            cost: 1,
            exact: false,
        };
        admitted += u64::from(counters.engine.check(hit).await.allowed);
    }
    admitted
}

/// The total (all regions) `counters` holds of `identifier`'s current cell; `None`: no cell.
fn total_seen(counters: &GlobalCounters, identifier: &str) -> Option<u64> {
    let scope = crate::cell_key::Scope::new("d", "4:user/");
    let counter = CounterKeyRef::new(&scope, identifier, 3_600_000);
    let seen = counters.engine.inspection().inspect(&counter);
    seen.current.map(|cell| cell.total())
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
    assert_eq!(total_seen(&b, "surge"), Some(2 * at));
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
async fn a_fast_tick_with_nothing_to_publish_or_share_does_not_sync() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let (a, b) = (region("a", &store, &clock), region("b", &store, &clock));
    let at = DEFAULT_ONSET_MIN_HITS;
    admit(&a, "alone", at).await;
    clock.advance(100);
    assert_eq!(a.onset_tick().await, 1, "held, published and synced");
    // Another region counts another counter; `a` admits nothing more in the held one.
    // Over the publish floor (2 % of 600).
    admit(&b, "elsewhere", 13).await;
    b.flush().await;
    clock.advance(100);
    assert_eq!(a.onset_tick().await, 1, "still held, for its grace");
    assert_eq!(
        total_seen(&a, "elsewhere"),
        None,
        "nothing published, nothing shared: no sync"
    );
    admit(&a, "alone", 2).await;
    clock.advance(100);
    assert_eq!(a.onset_tick().await, 1);
    assert_eq!(
        total_seen(&a, "elsewhere"),
        Some(13),
        "a tick that publishes syncs"
    );
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
        let mut hot = a.hot.cells.lock().unwrap_or_else(PoisonError::into_inner);
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

#[tokio::test]
async fn a_shared_onset_closing_in_on_its_limit_makes_the_ticks_urgent() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let (a, b) = (region("a", &store, &clock), region("b", &store, &clock));
    let (normal, urgent) = (
        DEFAULT_ONSET_INTERVAL,
        DEFAULT_ONSET_INTERVAL / DEFAULT_ONSET_URGENT_DIVISOR,
    );
    assert_eq!(a.onset_wait(), normal);
    // Both regions at the onset of two counters; `a` alone at that of a third.
    let at = DEFAULT_ONSET_MIN_HITS;
    for counter in ["slow", "surge", "alone"] {
        admit(&a, counter, at).await;
    }
    for counter in ["slow", "surge"] {
        admit(&b, counter, at).await;
    }
    clock.advance(100);
    b.onset_tick().await;
    a.onset_tick().await;
    assert_eq!(a.onset_wait(), normal, "a first look measures no rate");
    // A shared cell growing slowly, and an unshared one growing fast: neither is urgent.
    admit(&a, "slow", 1).await;
    admit(&a, "alone", 300).await;
    clock.advance(100);
    a.onset_tick().await;
    assert_eq!(a.onset_wait(), normal);
    // A shared cell whose rate since its onset uses up its room within the horizon.
    admit(&a, "surge", 300).await;
    clock.advance(100);
    a.onset_tick().await;
    assert_eq!(a.onset_wait(), urgent);
    // At its limit the race is for what the sliding window frees: no longer urgent.
    admit(&a, "surge", 600 - 300 - 2 * at).await;
    assert_eq!(decide(&a, "surge", 1).await, 0);
    clock.advance(20);
    a.onset_tick().await;
    assert_eq!(a.onset_wait(), normal);
}
