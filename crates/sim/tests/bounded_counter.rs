//! The bounded counter's figures (docs/bounded-counter.md, "Measured in the simulator"): every
//! scenario in the bounded mode, against an ideal single limiter fed the same arrivals.
//! Every run asserts "never above": no admission over the single process's rule, judged by
//! the oracle from the log of admissions (0 excesses, highest effective ÷ limit ≤ 1).
//!
//! The targets: refusals against the ideal ≤ 1 % of its admissions in steady scenarios,
//! ≤ 5 % when demand moves between regions. A scenario's first window (its onset), for which
//! no target is set, is asserted at the figure the doc states.

use gcounter_sim::bounded::{BoundedReport, run};
use gcounter_sim::{Scenario, named};

const SEEDS: &[u64] = &[1, 2, 3];

/// Runs `name` in the bounded mode over `seeds` (for `minutes` if given), prints one line per
/// run, asserts never above in each, and returns the reports.
fn bounded(name: &str, seeds: &[u64], minutes: Option<u64>) -> Vec<BoundedReport> {
    seeds
        .iter()
        .map(|&seed| {
            let Some(mut scenario): Option<Scenario> = named(name, seed) else {
                panic!("{name} is a scenario")
            };
            if let Some(minutes) = minutes {
                scenario.run_ms = minutes * 60_000;
            }
            let report = run(&scenario, seed)
                .unwrap_or_else(|error| panic!("{name} seed {seed} does not run: {error}"));
            let judged = &report.never_above;
            println!(
                "{name} seed {seed}: refused vs ideal {:.2} %, at the onset {:.2} %, highest \
                 effective {:.3}, excesses {}, windows {}",
                report.refused_vs_ideal * 100.0,
                report.onset_refused_vs_ideal * 100.0,
                judged.max_effective,
                judged.excesses,
                report.windows,
            );
            assert_eq!(judged.excesses, 0, "{name} seed {seed}: above: {report:?}");
            assert!(judged.max_effective <= 1.0, "{report:?}");
            assert!(
                report.windows > 0 && report.ideal_admitted > 0,
                "{report:?}"
            );
            report
        })
        .collect()
}

/// Asserts every report's refusals against the ideal at most `steady` (and, if given, at the
/// onset at most `onset`), as fractions.
fn refused_at_most(reports: &[BoundedReport], steady: f64, onset: Option<f64>) {
    for report in reports {
        assert!(
            report.refused_vs_ideal <= steady,
            "{} seed {}: refused vs ideal {:.4} > {steady}",
            report.scenario,
            report.seed,
            report.refused_vs_ideal
        );
        if let Some(onset) = onset {
            assert!(
                report.onset_refused_vs_ideal <= onset,
                "{} seed {}: at the onset {:.4} > {onset}",
                report.scenario,
                report.seed,
                report.onset_refused_vs_ideal
            );
        }
    }
}

#[test]
fn ten_regions_under_steady_overload_refuse_under_one_percent() {
    for name in ["even-10x2", "even-10x5", "even-10x10"] {
        refused_at_most(&bounded(name, SEEDS, None), 0.01, None);
    }
}

#[test]
fn a_surge_in_ten_regions_at_once_refuses_as_published() {
    // the onset window: the first cell has no previous one, its whole budget in the pool
    for name in ["onset-10x2", "onset-10x5", "onset-10x10", "onset-10x20"] {
        refused_at_most(&bounded(name, SEEDS, None), 0.01, Some(ONSET));
    }
}

#[test]
fn three_regions_and_one_region_refuse_under_one_percent() {
    for name in ["three-x2", "three-x5", "single"] {
        refused_at_most(&bounded(name, SEEDS, None), 0.01, Some(0.01));
    }
}

#[test]
fn a_small_consumer_beside_a_large_one_refuses_under_one_percent() {
    refused_at_most(&bounded("concentrated", SEEDS, None), 0.01, None);
}

#[test]
fn demand_moving_between_regions_refuses_under_five_percent() {
    refused_at_most(&bounded("join", SEEDS, None), 0.05, None);
    // bursts: all demand within 1 s either side of each boundary; its first window (the
    // onset) is the run's first burst, which one region's cold ask holds
    refused_at_most(&bounded("bursts", SEEDS, None), 0.05, Some(BURSTS_ONSET));
}

#[test]
fn many_keys_refuse_under_one_percent() {
    // Short runs (minutes of virtual time in debug builds otherwise).
    refused_at_most(&bounded("zipf", &[1], Some(1)), 0.01, None);
    refused_at_most(&bounded("rfc", &[1], Some(3)), 0.01, None);
}

// Measured figures where no target is set (docs/bounded-counter.md), each the highest over
// the seeds run.

/// The onset window of a surge in ten regions at once: 0.00 % at 2×, 5×, 10×, 20×.
const ONSET: f64 = 0.0;
/// bursts' first window, seeds 1–3: 20.83–40.00 % (its later windows: 0.00 %).
const BURSTS_ONSET: f64 = 0.40;
