//! The trade-off figures ACCURACY.md and docs/multi-region.md publish for the hot-key
//! scenarios (seed 1, the normal cadence unless said): the publish floor, the flush and sync
//! intervals, and the overload cadence off. The normal cadence is `--contended-speedup 1
//! --onset-fraction 0`, every cell flushed and synced at the intervals: the fast cadence holds
//! contended cells at 100 ms with no floor, whatever the floor and the intervals. Each asserts
//! the published worst sliding interval (+ 0.01) and syncs per second (+ 0.1), and 0 false
//! denials.

mod common;

use common::{Bounds, check, first, normal_cadence};
use gcounter_sim::Scenario;

/// Worst sliding interval of `name` at seed 1 with `adjust`, asserted ≤ `published` + 0.01.
fn worst_at_most(name: &str, adjust: impl Fn(&mut Scenario), published: f64) -> f64 {
    let bounds = Bounds {
        worst_at_most: published + 0.01,
        ..Bounds::default()
    };
    first(&check(name, &[1], adjust, bounds)).worst_sliding
}

#[test]
fn a_higher_floor_lets_ten_regions_admit_more_as_published() {
    // `--floor F --contended-speedup 1 --onset-fraction 0`: (floor, even-10x5, even-10x10)
    for (floor, x5, x10) in [
        (0.5, 5.33, 8.41),
        (0.1, 2.15, 2.64),
        (0.05, 1.76, 2.04),
        (0.02, 1.52, 1.80),
        (0.01, 1.49, 1.76),
        (0.0, 1.45, 1.65),
    ] {
        let at_floor = |s: &mut Scenario| {
            normal_cadence(s);
            s.fleet.publish_floor = floor;
        };
        worst_at_most("even-10x5", at_floor, x5);
        worst_at_most("even-10x10", at_floor, x10);
    }
}

#[test]
fn without_the_overload_cadence_ten_regions_go_over_as_published() {
    // `--contended-speedup 1 --onset-fraction 0`, seed 1
    for (name, published) in [
        ("even-10x2", 1.17),
        ("even-10x5", 1.52),
        ("even-10x10", 1.80),
        ("three-x5", 1.25),
    ] {
        worst_at_most(name, normal_cadence, published);
    }
    // ten regions at 10×, seeds 1–3: 1.77–1.90
    let bounds = Bounds {
        worst_at_most: 1.91,
        ..Bounds::default()
    };
    let reports = check("even-10x10", &[1, 2, 3], normal_cadence, bounds);
    assert!(
        reports.iter().all(|r| r.worst_sliding >= 1.76),
        "{reports:?}"
    );
}

#[test]
fn shorter_intervals_trade_statements_for_accuracy_as_published() {
    // `--contended-speedup 1 --onset-fraction 0 --flush-ms F --sync-ms S`: worst sliding /
    // syncs per second of even-10x5, even-10x10, three-x5
    type Cells = [(f64, f64); 3];
    let table: [(u64, u64, Cells); 5] = [
        (1_000, 1_000, [(1.52, 10.0), (1.80, 10.0), (1.25, 3.0)]),
        (500, 500, [(1.33, 20.0), (1.57, 20.0), (1.17, 6.0)]),
        (250, 250, [(1.23, 40.0), (1.44, 40.0), (1.10, 12.0)]),
        (100, 500, [(1.33, 20.0), (1.47, 20.0), (1.13, 6.0)]),
        (500, 250, [(1.29, 40.0), (1.41, 40.0), (1.11, 12.0)]),
    ];
    for (flush_ms, sync_ms, cells) in table {
        let intervals = |s: &mut Scenario| {
            normal_cadence(s);
            s.fleet.flush_ms = flush_ms;
            s.fleet.sync_ms = sync_ms;
        };
        for (name, (worst, syncs)) in ["even-10x5", "even-10x10", "three-x5"]
            .into_iter()
            .zip(cells)
        {
            let bounds = Bounds {
                worst_at_most: worst + 0.01,
                ..Bounds::default()
            };
            let reports = check(name, &[1], intervals, bounds);
            let report = first(&reports);
            assert!(
                report.syncs_per_s <= syncs + 0.1,
                "{name} at {flush_ms}/{sync_ms} ms: {} syncs/s, published {syncs}",
                report.syncs_per_s
            );
        }
    }
}

#[test]
fn flush_every_100_ms_and_sync_every_500_ms_hold_every_hot_key_target() {
    // `--contended-speedup 1 --onset-fraction 0 --flush-ms 100 --sync-ms 500`: ≤ 1.47 at ten
    // regions, ≤ 1.13 at three, 1.04 concentrated.
    let intervals = |s: &mut Scenario| {
        normal_cadence(s);
        s.fleet.flush_ms = 100;
        s.fleet.sync_ms = 500;
    };
    for (name, published) in [
        ("even-10x2", 1.47),
        ("even-10x5", 1.47),
        ("even-10x10", 1.47),
        ("three-x2", 1.13),
        ("three-x5", 1.13),
        ("concentrated", 1.04),
    ] {
        worst_at_most(name, intervals, published);
    }
}

#[test]
fn at_one_hot_key_a_sync_reads_a_fifth_of_the_rows_of_a_full_one_or_less() {
    // Rows read per sync, seed 1: as published, and with every sync full (`--full-sync-ms 0
    // --onset-fraction 0`, the previous releases' syncs at their cadence). Published: (name,
    // full, as published, the cut asserted).
    for (name, full, now, cut) in [
        ("even-10x2", 17.61, 2.79, 6.3),
        ("even-10x5", 17.32, 2.59, 6.6),
        ("even-10x10", 18.43, 1.97, 9.3),
        ("onset-10x20", 18.79, 1.67, 11.2),
    ] {
        let per_sync = |report: &gcounter_sim::Report| {
            report.load.rows_read as f64 / report.load.sync_statements.max(1) as f64
        };
        let every_sync_full = |s: &mut Scenario| {
            s.fleet.onset_fraction = 0.0;
            s.fleet.full_sync_ms = 0;
        };
        let full_read = per_sync(first(&check(
            name,
            &[1],
            every_sync_full,
            Bounds::default(),
        )));
        let read = per_sync(first(&check(name, &[1], |_| {}, Bounds::default())));
        println!("{name}: {full_read:.2} rows per full sync, {read:.2} per sync");
        assert!(
            (full_read - full).abs() <= 0.05,
            "{name}: {full_read:.2} per full sync, published {full}"
        );
        assert!(
            read <= now + 0.05,
            "{name}: {read:.2} per sync, published {now}"
        );
        assert!(
            full_read / read >= cut,
            "{name}: cut {:.1}, published {cut}",
            full_read / read
        );
    }
}
