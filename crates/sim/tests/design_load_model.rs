//! The figures ACCURACY.md and docs/multi-region.md publish for the two many-key scenarios,
//! seed 1, in full: `rfc` (the design's load model: 33 processes in 10 regions, 24,000 keys,
//! 10 s intervals; what the database is asked) and `zipf`. Each takes minutes in a
//! debug build: they run in the `sim-heavy` test group, one at a time (.config/nextest.toml).

mod common;

use common::{Bounds, Row, as_published, assert_row, check, first};

#[test]
fn the_design_load_model_costs_the_database_what_is_published() {
    let reports = check("rfc", &[1], as_published, Bounds::default());
    let report = first(&reports);
    assert_row(
        report,
        Row {
            window_min: 0.88,
            median: 1.01,
            window_max: 1.15,
            worst: 1.38,
            denied: 3.2,
            upserts_per_s: 3.6,
            rows_written_per_s: 2_187.0,
            syncs_per_s: 3.4,
            rows_read_per_s: 40_749.0,
        },
    );
    // The design's budget: at most 2 × 600–6,000 row writes/s and 3.3 statements/s of each
    // kind (one upsert and one sync per process per 10 s). Statements go over it: each
    // process also publishes the closing count (the region's final total) of the cells that
    // expire, a flush past 1,000 rows takes a second statement (about one in ten), and the
    // fast cadence publishes and syncs the cells it holds every 100 ms (3.6 upserts/s and
    // 3.4 syncs/s, as with it off: its onsets publish once and sync no more).
    assert!(report.rows_written_per_s <= 12_000.0, "{report:?}");
    // The fast cadence's own target: no more sync statements than the normal cadence's
    // (3.41/s with `--onset-fraction 0`; 1,022 statements, where the default runs 1,027).
    assert!(
        report.upserts_per_s <= 3.7 && report.syncs_per_s <= 3.43,
        "{report:?}"
    );
    // Rows read: no more than half of what every sync full at the normal cadence reads
    // (82,081/s: `--full-sync-ms 0 --onset-fraction 0`, the releases before the incremental
    // sync).
    assert!(report.rows_read_per_s <= 82_081.0 / 2.0, "{report:?}");
}

#[test]
fn a_hot_limit_among_many_light_ones_goes_over_as_published() {
    let reports = check("zipf", &[1], as_published, Bounds::default());
    assert_row(
        first(&reports),
        Row {
            window_min: 0.99,
            median: 1.02,
            window_max: 1.08,
            worst: 1.29,
            denied: 28.8,
            upserts_per_s: 113.1,
            rows_written_per_s: 1_254.0,
            syncs_per_s: 326.9,
            rows_read_per_s: 63_009.0,
        },
    );
}
