//! The accuracy figures ACCURACY.md and docs/multi-region.md publish for the hot-key
//! scenarios at the defaults (floor 0.02, the overload cadence, the fast cadence of cells at
//! their onset and contended cells at onset fraction 0.02; 1 s flush and sync, a 50 ms
//! database): each test runs the published command's scenario and seeds and asserts the
//! bound the docs state, and the seed-1 row of the "whole simulator output" table.
//! Every run also asserts "never below": 0 false denials, judged by the oracle.

mod common;

use common::{Bounds, Row, as_published, assert_row, check, first, without_fast_cadence};

const SEEDS_1_TO_3: &[u64] = &[1, 2, 3];
const SEEDS_1_TO_6: &[u64] = &[1, 2, 3, 4, 5, 6];

/// What every hot-key figure asserts besides its own bounds: no saturated window admits under
/// 0.99 × the limit (and, as every run, no false denial).
fn saturated() -> Bounds {
    Bounds {
        window_min_at_least: 0.99,
        ..Bounds::default()
    }
}

/// Runs the published command's scenario on `seeds`, checks `bounds` on every run and the
/// first seed's figures against `row`.
fn assert_published(name: &str, seeds: &[u64], bounds: Bounds, row: Row) {
    let reports = check(name, seeds, as_published, bounds);
    assert_row(first(&reports), row);
}

#[test]
fn ten_regions_at_two_times_stay_within_the_published_bound() {
    assert_published(
        "even-10x2",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.19,
            median_at_most: 1.04,
            ..saturated()
        },
        Row {
            window_min: 1.01,
            median: 1.03,
            window_max: 1.06,
            worst: 1.17,
            denied: 48.2,
            upserts_per_s: 11.8,
            rows_written_per_s: 12.0,
            syncs_per_s: 60.0,
            rows_read_per_s: 62.0,
        },
    );
}

#[test]
fn ten_regions_at_five_times_stay_within_the_published_bound() {
    assert_published(
        "even-10x5",
        SEEDS_1_TO_6,
        Bounds {
            worst_at_most: 1.23,
            median_at_most: 1.03,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.02,
            window_max: 1.04,
            worst: 1.11,
            denied: 79.6,
            upserts_per_s: 19.3,
            rows_written_per_s: 19.0,
            syncs_per_s: 132.3,
            rows_read_per_s: 139.0,
        },
    );
}

#[test]
fn ten_regions_at_ten_times_stay_within_the_published_bound() {
    assert_published(
        "even-10x10",
        SEEDS_1_TO_6,
        Bounds {
            worst_at_most: 1.14,
            median_at_most: 1.04,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.02,
            window_max: 1.06,
            worst: 1.12,
            denied: 89.7,
            upserts_per_s: 15.9,
            rows_written_per_s: 16.0,
            syncs_per_s: 138.9,
            rows_read_per_s: 144.0,
        },
    );
}

#[test]
fn three_regions_at_two_times_stay_within_the_published_bound() {
    assert_published(
        "three-x2",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.10,
            window_max_at_most: 1.06,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.01,
            window_max: 1.04,
            worst: 1.09,
            denied: 49.3,
            upserts_per_s: 10.2,
            rows_written_per_s: 10.0,
            syncs_per_s: 24.0,
            rows_read_per_s: 26.0,
        },
    );
}

#[test]
fn three_regions_at_five_times_stay_within_the_published_bound() {
    assert_published(
        "three-x5",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.05,
            window_max_at_most: 1.03,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.01,
            window_max: 1.02,
            worst: 1.04,
            denied: 79.9,
            upserts_per_s: 14.6,
            rows_written_per_s: 15.0,
            syncs_per_s: 40.2,
            rows_read_per_s: 43.0,
        },
    );
}

#[test]
fn concentrated_traffic_stays_within_the_published_bound() {
    assert_published(
        "concentrated",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.06,
            window_max_at_most: 1.03,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.01,
            window_max: 1.02,
            worst: 1.04,
            denied: 54.4,
            upserts_per_s: 10.3,
            rows_written_per_s: 10.0,
            syncs_per_s: 12.7,
            rows_read_per_s: 13.0,
        },
    );
}

#[test]
fn one_region_of_three_processes_stays_within_the_published_bound() {
    assert_published(
        "single",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.03,
            window_max_at_most: 1.02,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.00,
            window_max: 1.01,
            worst: 1.02,
            denied: 49.5,
            upserts_per_s: 3.1,
            rows_written_per_s: 3.3,
            syncs_per_s: 3.2,
            rows_read_per_s: 0.0,
        },
    );
}

#[test]
fn a_region_joining_midway_stays_within_the_published_bound() {
    assert_published(
        "join",
        SEEDS_1_TO_3,
        Bounds {
            worst_at_most: 1.06,
            window_max_at_most: 1.03,
            ..saturated()
        },
        Row {
            window_min: 1.00,
            median: 1.01,
            window_max: 1.02,
            worst: 1.05,
            denied: 72.4,
            upserts_per_s: 14.6,
            rows_written_per_s: 15.0,
            syncs_per_s: 34.2,
            rows_read_per_s: 37.0,
        },
    );
}

#[test]
fn bursts_at_window_boundaries_go_over_as_published() {
    // A known limit, published as such: each region decides a burst alone.
    assert_published(
        "bursts",
        &[1],
        Bounds::default(),
        Row {
            window_min: 1.19,
            median: 1.27,
            window_max: 1.43,
            worst: 1.54,
            denied: 74.3,
            upserts_per_s: 2.5,
            rows_written_per_s: 3.0,
            syncs_per_s: 39.4,
            rows_read_per_s: 14.0,
        },
    );
}

/// A surge that starts in every region at once, at the defaults (the fast cadence on, onset
/// fraction 0.02): the worst interval of one window holding some of the window it starts in,
/// and the windows after it.
fn assert_onset(name: &str, onset_at_most: f64, worst_at_most: f64, median_at_most: f64) {
    check(
        name,
        SEEDS_1_TO_3,
        as_published,
        Bounds {
            onset_sliding_at_most: onset_at_most,
            worst_at_most,
            median_at_most,
            ..saturated()
        },
    );
}

#[test]
fn a_surge_starting_in_ten_regions_at_once_stays_within_the_published_bound() {
    assert_onset("onset-10x2", 1.13, 1.19, 1.04);
    assert_onset("onset-10x5", 1.05, 1.12, 1.03);
    assert_onset("onset-10x10", 1.08, 1.14, 1.04);
    assert_onset("onset-10x20", 1.15, 1.21, 1.05);
}

#[test]
fn without_the_fast_cadence_a_surge_goes_over_as_published() {
    // `--onset-fraction 0`: each region admits alone until the normal cadence carries its
    // count (onset 1.86–2.20).
    check(
        "onset-10x20",
        SEEDS_1_TO_3,
        without_fast_cadence,
        Bounds {
            onset_sliding_at_most: 2.21,
            ..Bounds::default()
        },
    );
}
