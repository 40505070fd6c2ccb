//! Runs a published scenario over its seeds and checks each report against the bounds the
//! docs state (ACCURACY.md, docs/multi-region.md).
// Each test file uses its own part of these helpers.
#![allow(dead_code)]

use gcounter_sim::{Report, Scenario, named, run};

/// The bounds a published figure is asserted against; `Bounds::default()` checks only
/// "never below" (0 false denials). Per-window figures are admitted ÷ limit over the windows
/// whose offered load exceeded the limit; `worst` is the worst sliding interval ÷ limit.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub worst_at_most: f64,
    pub median_at_most: f64,
    pub window_max_at_most: f64,
    /// Over-denial: a saturated window admits about the limit.
    pub window_min_at_least: f64,
    /// The worst interval of one window that holds some of the first window (the onset).
    pub onset_sliding_at_most: f64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            worst_at_most: f64::INFINITY,
            median_at_most: f64::INFINITY,
            window_max_at_most: f64::INFINITY,
            window_min_at_least: 0.0,
            onset_sliding_at_most: f64::INFINITY,
        }
    }
}

/// The scenario `name` as the docs' commands run it (`--seed`), changed by `adjust` (the
/// commands' flags).
pub fn scenario(name: &str, seed: u64, adjust: impl Fn(&mut Scenario)) -> Scenario {
    let Some(mut scenario) = named(name, seed) else {
        panic!("{name} is a scenario")
    };
    adjust(&mut scenario);
    scenario
}

/// Runs `name` with each of `seeds`, prints one line per run, and asserts every report
/// within `bounds` and without a false denial. Returns the reports.
pub fn check(
    name: &str,
    seeds: &[u64],
    adjust: impl Fn(&mut Scenario),
    bounds: Bounds,
) -> Vec<Report> {
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for &seed in seeds {
        let report = run(&scenario(name, seed, &adjust), seed)
            .unwrap_or_else(|error| panic!("{name} seed {seed} does not run: {error}"));
        let w = report.per_window;
        println!(
            "{name} seed {seed}: per window {:.3} / {:.3} / {:.3}, worst sliding {:.3}, \
             onset {:.3} / {:.3}, false denials {}, upserts/s {:.2}, syncs/s {:.2}, rows written/s {:.0}, \
             rows read/s {:.0}",
            w.min,
            w.median,
            w.max,
            report.worst_sliding,
            report.onset_window,
            report.onset_sliding,
            report.false_denials,
            report.upserts_per_s,
            report.syncs_per_s,
            report.rows_written_per_s,
            report.rows_read_per_s,
        );
        let mut fail = |what: &str, value: f64, bound: String| {
            failures.push(format!(
                "{name} seed {seed}: {what} {value:.3}, published {bound}"
            ));
        };
        if report.false_denials > 0 {
            fail("false denials", report.false_denials as f64, "0".into());
        }
        let at_most = [
            ("worst sliding", report.worst_sliding, bounds.worst_at_most),
            (
                "onset sliding",
                report.onset_sliding,
                bounds.onset_sliding_at_most,
            ),
            ("per-window median", w.median, bounds.median_at_most),
            ("per-window max", w.max, bounds.window_max_at_most),
        ];
        for (what, value, bound) in at_most {
            if value > bound {
                fail(what, value, format!("≤ {bound:.2}"));
            }
        }
        if w.min < bounds.window_min_at_least {
            let bound = format!("≥ {:.2}", bounds.window_min_at_least);
            fail("per-window min", w.min, bound);
        }
        reports.push(report);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    reports
}

/// The first report of `reports` (seed 1 when the seeds start at 1).
pub fn first(reports: &[Report]) -> &Report {
    reports
        .first()
        .unwrap_or_else(|| panic!("at least one seed"))
}

/// The scenario as published: no change.
pub fn as_published(_: &mut Scenario) {}

/// `--onset-fraction 0`: the fast cadence off (`--global-onset-fraction 0`), cells at their
/// onset and contended cells alike; every cell waits for the flush and sync intervals (or the
/// overload cadence's).
pub fn without_fast_cadence(scenario: &mut Scenario) {
    scenario.fleet.onset_fraction = 0.0;
}

/// `--contended-speedup 1 --onset-fraction 0`: the normal cadence, every cell flushed and
/// synced at the intervals and never faster. The fast cadence holds contended cells at
/// 100 ms whatever the intervals and publishes them with no floor, so the trade-offs of the
/// floor and the intervals show only without it.
pub fn normal_cadence(scenario: &mut Scenario) {
    scenario.fleet.contended_speedup = 1;
    without_fast_cadence(scenario);
}

/// One row of the seed-1 tables (`gcounter-sim --scenario all --seed 1`), as published.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub window_min: f64,
    pub median: f64,
    pub window_max: f64,
    pub worst: f64,
    /// Percent.
    pub denied: f64,
    pub upserts_per_s: f64,
    pub rows_written_per_s: f64,
    pub syncs_per_s: f64,
    pub rows_read_per_s: f64,
}

/// Asserts `report` matches a published row: ratios within 0.01 on the side the row promises
/// (at most its median, max and worst; at least its min), denied within 1 point, statements
/// per second at most 0.1 above, rows per second at most 2 % (and 1 row) above.
pub fn assert_row(report: &Report, row: Row) {
    let w = report.per_window;
    let rows_bound = |published: f64| published * 1.02 + 1.0;
    let checks = [
        ("per-window min", w.min >= row.window_min - 0.01),
        ("per-window median", w.median <= row.median + 0.01),
        ("per-window max", w.max <= row.window_max + 0.01),
        ("worst sliding", report.worst_sliding <= row.worst + 0.01),
        (
            "denied",
            (report.denied_fraction * 100.0 - row.denied).abs() <= 1.0,
        ),
        ("upserts/s", report.upserts_per_s <= row.upserts_per_s + 0.1),
        ("syncs/s", report.syncs_per_s <= row.syncs_per_s + 0.1),
        (
            "rows written/s",
            report.rows_written_per_s <= rows_bound(row.rows_written_per_s),
        ),
        (
            "rows read/s",
            report.rows_read_per_s <= rows_bound(row.rows_read_per_s),
        ),
    ];
    let wrong: Vec<_> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(what, _)| *what)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} seed {}: {wrong:?} off the published row {row:?}; measured {report:?}",
        report.scenario,
        report.seed
    );
}
