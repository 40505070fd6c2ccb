//! How far this process's wall clock is from the database's: the clock that numbers windows
//! here against the one every region's rows meet at. A region whose clock is ahead enters
//! each window first and takes most of a shared limit; one behind finds it already full
//! (docs/reliability.md, "Clocks that disagree"). Measured by the sync, at most once per
//! [`CLOCK_CHECK_INTERVAL`], with one light query.

use std::time::Duration;

/// The least time between two measurements: one query, a few rows of no table, every few
/// seconds per process.
pub const CLOCK_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// This process's wall clock minus the database's, in seconds: `sent_ms` is this clock when
/// the query left, `round_trip` how long its answer took (monotonic), `database_us` the
/// database's clock in the answer. The database read its clock about half the round trip
/// after the query left, so that is what it is compared with.
pub fn clock_offset_seconds(sent_ms: u64, round_trip: Duration, database_us: u64) -> f64 {
    let local_us = sent_ms as f64 * 1_000.0 + round_trip.as_secs_f64() * 1e6 / 2.0;
    (local_us - database_us as f64) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: u64 = 1_800_000_000_000;

    #[test]
    fn clocks_together_read_zero_whatever_the_round_trip() {
        // The database answered with its clock at the middle of a 40 ms round trip.
        let offset =
            clock_offset_seconds(NOW_MS, Duration::from_millis(40), NOW_MS * 1_000 + 20_000);
        assert!(offset.abs() < 1e-9, "{offset}");
    }

    #[test]
    fn a_clock_ahead_is_positive_and_one_behind_negative() {
        let db_us = NOW_MS * 1_000;
        let ahead = clock_offset_seconds(NOW_MS + 1_500, Duration::ZERO, db_us);
        assert!((ahead - 1.5).abs() < 1e-9, "{ahead}");
        let behind = clock_offset_seconds(NOW_MS - 2_000, Duration::from_millis(10), db_us);
        assert!((behind + 1.995).abs() < 1e-9, "{behind}");
    }
}
