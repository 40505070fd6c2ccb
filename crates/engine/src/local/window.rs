//! Fixed window cells: which cell a moment falls in, and how far into it we are; and how a
//! decision reads them ([`Windows`]).

/// How a decision reads the cells of a counter.
///
/// The cells are the same in both (anchored at the Unix epoch, as envoyproxy/ratelimit's
/// `now / divider * divider`), so every store holds the same counts whichever is chosen and
/// a switch between the two needs no migration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Windows {
    /// The current cell plus the previous one weighted by what is left of the window: no
    /// burst of twice the limit across a boundary.
    #[default]
    Sliding,
    /// The current cell alone, reset on the unit's boundary: envoyproxy/ratelimit's answers.
    Fixed,
}

/// A position in time relative to the fixed cells of one duration.
///
/// Cells are anchored at the Unix epoch, so `sequence` is the same number in every process
/// and region: it is part of the counter identity everywhere (memory, Redis, SQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPosition {
    pub duration_ms: u64,
    pub sequence: u64,
    /// Milliseconds since the start of the current cell, `0..duration_ms`.
    pub elapsed_ms: u64,
}

impl WindowPosition {
    /// `duration_ms` must be > 0 (limits are validated at config load; overrides at the edge).
    pub fn at(now_ms: u64, duration_ms: u64) -> Self {
        let duration_ms = duration_ms.max(1);
        Self {
            duration_ms,
            sequence: now_ms / duration_ms,
            elapsed_ms: now_ms % duration_ms,
        }
    }

    /// The moment this position was taken at.
    pub fn now_ms(&self) -> u64 {
        self.sequence * self.duration_ms + self.elapsed_ms
    }

    /// Milliseconds until the current cell ends (what Envoy gets as `duration_until_reset`).
    pub fn until_reset_ms(&self) -> u64 {
        self.duration_ms - self.elapsed_ms
    }

    /// Milliseconds until the current cell ends, as envoyproxy/ratelimit computes its
    /// `duration_until_reset` from whole Unix seconds (`divider - now % divider`): the
    /// time left rounded up to a whole second for windows of whole seconds.
    pub fn until_boundary_ms(&self) -> u64 {
        let left = self.until_reset_ms();
        if self.duration_ms.is_multiple_of(1_000) {
            left.div_ceil(1_000) * 1_000
        } else {
            left
        }
    }

    /// The previous cell's sequence, or `None` for the very first cell after the epoch.
    pub fn previous_sequence(&self) -> Option<u64> {
        self.sequence.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_anchored_at_the_epoch() {
        let p = WindowPosition::at(125_500, 60_000);
        assert_eq!(p.sequence, 2);
        assert_eq!(p.elapsed_ms, 5_500);
        assert_eq!(p.until_reset_ms(), 54_500);
        assert_eq!(p.previous_sequence(), Some(1));
        assert_eq!(p.now_ms(), 125_500);
    }

    #[test]
    fn the_boundary_is_upstreams_whole_seconds() {
        // upstream at Unix second 1_000_000, a unit of an hour: 3600 - 1_000_000 % 3600 = 800.
        let hour = 3_600_000;
        assert_eq!(
            WindowPosition::at(1_000_000_000, hour).until_boundary_ms(),
            800_000
        );
        assert_eq!(
            WindowPosition::at(1_000_000_999, hour).until_boundary_ms(),
            800_000
        );
        assert_eq!(
            WindowPosition::at(1_000_001_000, hour).until_boundary_ms(),
            799_000
        );
        // Sub-second windows (an override's) keep their milliseconds.
        assert_eq!(WindowPosition::at(1_250, 500).until_boundary_ms(), 250);
    }

    #[test]
    fn the_first_cell_has_no_previous() {
        assert_eq!(WindowPosition::at(10, 1_000).previous_sequence(), None);
    }
}
