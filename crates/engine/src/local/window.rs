//! Fixed window cells: which cell a moment falls in, and how far into it we are.

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
    fn the_first_cell_has_no_previous() {
        assert_eq!(WindowPosition::at(10, 1_000).previous_sequence(), None);
    }
}
