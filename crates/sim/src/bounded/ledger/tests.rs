use super::*;
use crate::bounded::curve::vested;
use crate::never_above::{Admission, judge};

const LIMIT: u64 = 600;
const W: u64 = 20_000;

fn terms() -> Terms {
    Terms {
        limit: LIMIT,
        window_ms: W,
        horizon_ms: 2_100,
        close_lead_ms: 1_350,
        member_ttl_ms: 4_200,
        demand_memory_ms: 10_500,
        headroom: 1.5,
    }
}

fn ask(demand: f64, need: u64) -> Ask {
    Ask {
        key: 7,
        demand,
        returns: None,
        need,
    }
}

fn lump(grants: &[Grant], sequence: u64) -> u64 {
    grants
        .iter()
        .filter(|g| g.sequence == sequence)
        .map(|g| g.lump)
        .sum()
}

#[test]
fn a_lone_consumer_gets_the_whole_budget_at_once() {
    let mut ledger = Ledger::new(terms());
    let grants = ledger.exchange(0, &[ask(0.01, 1)], 5 * W + 100);
    assert_eq!(lump(&grants, 5), LIMIT);
    assert!(grants.iter().all(|g| g.key == 7 && g.keep == LIMIT));
    // a second consumer finds the pool empty until the first gives back
    let grants = ledger.exchange(1, &[ask(0.01, 50)], 5 * W + 200);
    assert_eq!(lump(&grants, 5), 0);
    let back = Ask {
        returns: Some((5, 400)),
        ..ask(0.01, 0)
    };
    // no longer alone, it keeps its share by demand of the pool (half: 200)
    assert_eq!(lump(&ledger.exchange(0, &[back], 5 * W + 300), 5), 200);
    // the other gets what it needs, or its share of the pool if more (half of 200)
    let grants = ledger.exchange(1, &[ask(0.01, 50)], 5 * W + 400);
    assert_eq!(lump(&grants, 5), 100);
    let grants = ledger.exchange(1, &[ask(0.01, 80)], 5 * W + 500);
    assert_eq!(lump(&grants, 5), 80);
}

#[test]
fn a_closed_cell_bounds_the_next_one_and_grants_nothing_more() {
    let mut ledger = Ledger::new(terms());
    ledger.exchange(0, &[ask(0.01, 1)], 5 * W + 100); // alone: all 600
    ledger.exchange(1, &[ask(0.01, 0)], 6 * W - 1_600); // nothing left
    let back = Ask {
        returns: Some((5, 400)),
        ..ask(0.01, 0)
    };
    // half of the pool back by demand
    assert_eq!(lump(&ledger.exchange(0, &[back], 6 * W - 1_500), 5), 200);
    // Within the close lead of the end: half of the pool to the asker, then cell 5 closes
    // with 500 out, cell 6's previous; the 100 left open cell 6.
    let at_close = ledger.exchange(1, &[ask(0.01, 0)], 6 * W - 1_000);
    assert_eq!(lump(&at_close, 5), 100);
    assert!(
        at_close
            .iter()
            .any(|g| g.sequence == 6 && g.previous == 500)
    );
    // Nothing of cell 5 is granted after its close (its pool is cell 6's now), nor taken back.
    let back = Ask {
        returns: Some((5, 50)),
        ..ask(0.01, 500)
    };
    let after = ledger.exchange(0, &[back], 6 * W - 900);
    assert_eq!(lump(&after, 5), 0);
    assert_eq!(lump(&at_close, 6) + lump(&after, 6), LIMIT - 500);
}

/// A holder's cell: (previous, lump, segments, spent).
type Held = (u64, u64, Vec<Segment>, u64);

/// Holders spend rights the moment they are theirs (granted and vested), a few at a time,
/// and give back at random: whatever the interleaving, the oracle finds no admission above
/// the single process's rule.
#[test]
fn holders_never_spend_above_the_budget() {
    let mut rng = fastrand::Rng::with_seed(3);
    let mut ledger = Ledger::new(terms());
    // per region, per cell: (previous, lump, segments, spent)
    let mut held: Vec<HashMap<u64, Held>> = vec![HashMap::new(); 4];
    let mut log = Vec::new();
    let mut inbox: Vec<(u64, usize, Vec<Grant>)> = Vec::new();
    let mut now = 3 * W;
    while now < 12 * W {
        now += 1 + rng.u64(..200);
        let (sequence, elapsed) = (now / W, now % W);
        let mut arrived = Vec::new();
        inbox.retain(|(at, region, grants)| {
            if *at <= now {
                arrived.push((*region, grants.clone()));
                false
            } else {
                true
            }
        });
        for (region, grants) in arrived {
            for g in grants {
                let cell = held[region].entry(g.sequence).or_default();
                cell.0 = g.previous;
                cell.1 += g.lump;
                cell.2.extend(g.segments);
            }
        }
        for cells in &mut held {
            if let Some(cell) = cells.get_mut(&sequence) {
                let have = cell.1 + vested(&cell.2, LIMIT, cell.0, W, elapsed);
                let have = have.min(cell.3 + rng.u64(..8));
                for _ in cell.3..have {
                    // one counter: every region's admissions are the same key's
                    log.push(Admission { key: 0, at_ms: now });
                }
                cell.3 = cell.3.max(have);
            }
        }
        if rng.u8(..10) == 0 {
            let region = rng.usize(..4);
            let returns = held[region].get_mut(&sequence).and_then(|cell| {
                let unspent = (cell.1 + vested(&cell.2, LIMIT, cell.0, W, elapsed)) - cell.3;
                let give = rng.u64(..=3).min(unspent).min(cell.1);
                cell.1 -= give;
                (give > 0).then_some((sequence, give))
            });
            let asks = [Ask {
                key: 7,
                demand: rng.f64() * 0.2,
                returns,
                need: rng.u64(..100),
            }];
            let grants = ledger.exchange(region, &asks, now);
            inbox.push((now + rng.u64(..300), region, grants));
        }
    }
    let judged = judge(LIMIT, W, &log);
    assert_eq!(judged.excesses, 0, "{judged:?}");
    assert!(
        judged.max_effective > 0.9,
        "the holders got near the bound: {judged:?}"
    );
}
