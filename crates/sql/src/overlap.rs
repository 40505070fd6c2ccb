//! How far before the previous read an incremental sync reads: the configured overlap, or
//! twice this store's slowest recent upsert when that is longer.
//!
//! A row is stamped when its statement begins and seen once it commits; a read that starts in
//! between misses it, and the next read finds it only if it starts reading at most the
//! overlap before the stamp. This process cannot see how long the other regions' upserts
//! take, but its own go to the same database with the same statements: while they are slow
//! (a big chunk, a loaded database) the others' likely are too, and the overlap follows, so a
//! slow commit is read by the next sync rather than the next full one.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a slow upsert keeps the overlap wide: between one and two of these.
const REMEMBERED: Duration = Duration::from_secs(60);

pub(crate) struct ReadOverlap {
    floor_ms: u64,
    slowest: Mutex<Slowest>,
}

/// The slowest upsert of the current period and of the one before.
struct Slowest {
    since: Instant,
    current_ms: u64,
    previous_ms: u64,
}

impl ReadOverlap {
    pub(crate) fn new(floor: Duration) -> Self {
        Self {
            floor_ms: u64::try_from(floor.as_millis()).unwrap_or(u64::MAX),
            slowest: Mutex::new(Slowest {
                since: Instant::now(),
                current_ms: 0,
                previous_ms: 0,
            }),
        }
    }

    /// One upsert statement of this store took `took` (timed out ones included).
    pub(crate) fn record(&self, took: Duration) {
        self.record_at(Instant::now(), took);
    }

    fn record_at(&self, now: Instant, took: Duration) {
        let mut slowest = self.slowest(now);
        let took = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        slowest.current_ms = slowest.current_ms.max(took);
    }

    /// The overlap of the next read, in ms.
    pub(crate) fn ms(&self) -> i64 {
        self.ms_at(Instant::now())
    }

    fn ms_at(&self, now: Instant) -> i64 {
        let slowest = self.slowest(now);
        let recent = slowest.current_ms.max(slowest.previous_ms);
        i64::try_from(self.floor_ms.max(recent.saturating_mul(2))).unwrap_or(i64::MAX)
    }

    /// The periods moved on to `now`.
    fn slowest(&self, now: Instant) -> std::sync::MutexGuard<'_, Slowest> {
        let mut slowest = self.slowest.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(slowest.since);
        if elapsed >= REMEMBERED {
            slowest.previous_ms = if elapsed >= REMEMBERED * 2 {
                0
            } else {
                slowest.current_ms
            };
            slowest.current_ms = 0;
            slowest.since = now;
        }
        slowest
    }
}

/// Records how long one upsert statement ran, when dropped: whether it finished or its
/// future was dropped at a timeout.
pub(crate) struct UpsertTimer<'a> {
    overlap: &'a ReadOverlap,
    started: Instant,
}

impl<'a> UpsertTimer<'a> {
    pub(crate) fn start(overlap: &'a ReadOverlap) -> Self {
        Self {
            overlap,
            started: Instant::now(),
        }
    }
}

impl Drop for UpsertTimer<'_> {
    fn drop(&mut self) {
        self.overlap.record(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlap_is_the_floor_or_twice_the_slowest_recent_upsert() {
        let overlap = ReadOverlap::new(Duration::from_millis(50));
        let start = Instant::now();
        assert_eq!(overlap.ms_at(start), 50);
        overlap.record_at(start, Duration::from_millis(10));
        assert_eq!(overlap.ms_at(start), 50, "fast upserts keep the floor");
        overlap.record_at(start, Duration::from_millis(120));
        assert_eq!(overlap.ms_at(start), 240);
        // Remembered through the next period, forgotten after it.
        assert_eq!(overlap.ms_at(start + REMEMBERED), 240);
        assert_eq!(overlap.ms_at(start + REMEMBERED * 2), 50);
    }

    #[test]
    fn a_period_without_upserts_forgets_the_slow_one() {
        let overlap = ReadOverlap::new(Duration::from_millis(50));
        let start = Instant::now();
        overlap.record_at(start, Duration::from_millis(120));
        assert_eq!(overlap.ms_at(start + REMEMBERED * 2), 50);
    }
}
