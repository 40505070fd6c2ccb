use std::sync::atomic::{AtomicU64, Ordering};

use super::{HOLDING_BYTES, HeldRights, IDLE_MS, SWEEP_MS};
use crate::cell_key::CellKey;

const MINUTE_MS: u64 = 60_000;

fn cell(id: usize, sequence: u64) -> CellKey {
    CellKey::new("d", "k", &format!("client-{id}"), MINUTE_MS, sequence)
}

fn returned(held: &HeldRights, now_ms: u64, everything: bool) -> u64 {
    held.returns(now_ms, 0, everything)
        .iter()
        .map(|back| back.count)
        .sum()
}

#[test]
fn a_give_back_walks_only_the_holdings_with_rights() {
    let held = HeldRights::new(1 << 30);
    let keys: Vec<CellKey> = (0..1_000).map(|id| cell(id, 1)).collect();
    let holdings: Vec<_> = keys.iter().map(|key| held.holding(key)).collect();
    for (key, holding) in keys.iter().zip(&holdings).take(3) {
        held.add(&key.borrowed(), holding, 5);
    }
    assert_eq!(held.listed_count(), 3);

    // In the cell and idle: the three holdings give their rights back and leave the list.
    let now_ms = MINUTE_MS + IDLE_MS;
    assert_eq!(returned(&held, now_ms, false), 15);
    assert_eq!(held.listed_count(), 0);

    // Rights again: listed again, once however often they grow.
    let (key, holding) = (&keys[500], &holdings[500]);
    held.add(&key.borrowed(), holding, 1);
    held.add(&key.borrowed(), holding, 1);
    assert_eq!(held.listed_count(), 1);
    assert_eq!(returned(&held, now_ms, true), 2);
}

#[test]
fn rights_in_use_stay_listed_until_idle() {
    let held = HeldRights::new(1 << 30);
    let key = cell(0, 1);
    let holding = held.holding(&key);
    held.add(&key.borrowed(), &holding, 4);
    holding.offer(1, MINUTE_MS + 10);
    assert_eq!(returned(&held, MINUTE_MS + 20, false), 0);
    assert_eq!(held.listed_count(), 1);
    assert_eq!(returned(&held, MINUTE_MS + 10 + IDLE_MS, false), 4);
    assert_eq!(held.listed_count(), 0);
}

#[test]
fn holdings_of_ended_cells_are_forgotten() {
    let held = HeldRights::new(1 << 30);
    for id in 0..100 {
        held.holding(&cell(id, 1));
    }
    let with_rights = cell(100, 1);
    let holding = held.holding(&with_rights);
    held.add(&with_rights.borrowed(), &holding, 3);
    assert!(held.bytes().0 >= 101 * HOLDING_BYTES);

    // The cell has ended: its rights go back and every holding of it is forgotten.
    let ended_ms = 2 * MINUTE_MS + SWEEP_MS;
    assert_eq!(returned(&held, ended_ms, false), 3);
    assert_eq!(held.bytes().0, 0);
    assert_eq!(held.listed_count(), 0);
}

#[test]
fn an_evicted_holding_still_gives_its_rights_back() {
    // Room for a few holdings: most are evicted from the map as others arrive.
    let held = HeldRights::new(8 * (HOLDING_BYTES + 16));
    let mut added = 0;
    for id in 0..1_000 {
        let key = cell(id, 1);
        let holding = held.holding(&key);
        held.add(&key.borrowed(), &holding, 2);
        added += 2;
    }
    assert_eq!(returned(&held, MINUTE_MS + IDLE_MS, true), added);
}

#[test]
fn rights_added_while_given_back_are_never_lost() {
    // Two cells, four threads adding and one giving back all the time: an add that lands
    // between a give-back's take and its check of the list must never be stranded off it.
    let held = HeldRights::new(1 << 30);
    let keys: Vec<CellKey> = (0..2).map(|id| cell(id, 1)).collect();
    let added = AtomicU64::new(0);
    let adding = AtomicU64::new(4);
    let mut back = 0;
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (held, keys, added, adding) = (&held, &keys, &added, &adding);
            scope.spawn(move || {
                for round in 0..50_000 {
                    let key = &keys[(thread + round) % keys.len()];
                    let holding = held.holding(key);
                    held.add(&key.borrowed(), &holding, 1);
                    added.fetch_add(1, Ordering::Relaxed);
                }
                adding.fetch_sub(1, Ordering::Release);
            });
        }
        while adding.load(Ordering::Acquire) > 0 {
            back += returned(&held, MINUTE_MS + IDLE_MS, true);
        }
    });
    back += returned(&held, MINUTE_MS + IDLE_MS, true);
    assert_eq!(back, added.load(Ordering::Relaxed));
    assert_eq!(held.listed_count(), 0);
}

#[test]
fn an_add_between_a_give_back_and_its_check_keeps_the_holding_listed() {
    // The interleaving the stress test above can only hope to hit, step by step.
    let held = HeldRights::new(1 << 30);
    let key = cell(0, 1);
    let holding = held.holding(&key);
    held.add(&key.borrowed(), &holding, 2);
    let mut listed = std::mem::take(&mut *held.list());
    assert_eq!(listed.len(), 1);

    // The walk took the holding's rights; an add lands before it checks the holding.
    assert_eq!(holding.take_all(), 2);
    held.add(&key.borrowed(), &holding, 1);
    assert_eq!(
        held.listed_count(),
        0,
        "still listed: the add must not list it twice"
    );
    assert!(
        holding.stays_listed(),
        "the walk must keep it: it holds a right again"
    );
    held.list().append(&mut listed);
    assert_eq!(returned(&held, MINUTE_MS + IDLE_MS, true), 1);
}
