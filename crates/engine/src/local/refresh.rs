//! Single flight for synchronous origin reads of warm cells (stale and strict refreshes).
//!
//! The first caller reads; concurrent callers of the same cell wait for that read and decide
//! from the refreshed value, instead of each paying a round trip. Waiting uses a small array
//! of `Notify`s indexed by cell address rather than one per cell: cells stay small, and a
//! wake-up meant for another cell of the same slot only costs a re-check.

use std::pin::pin;
use std::time::Duration;

use tokio::sync::Notify;

use super::cell::WindowCell;

const SLOTS: usize = 64;

pub struct RefreshGate {
    slots: [Notify; SLOTS],
}

/// Who performs the read.
pub enum Turn<'a> {
    /// This caller reads, then must call [`Leader::finish`].
    Leader(Leader<'a>),
    /// Another caller's read finished (or the wait timed out): decide from memory.
    Followed,
}

pub struct Leader<'a> {
    gate: &'a RefreshGate,
    cell: &'a WindowCell,
}

impl Leader<'_> {
    pub fn finish(self) {
        // Drop does the work, so a cancelled leader (dropped future) also releases followers.
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        self.cell.end_refresh();
        self.gate.slot(self.cell).notify_waiters();
    }
}

impl Default for RefreshGate {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| Notify::new()),
        }
    }
}

impl RefreshGate {
    #[expect(
        clippy::indexing_slicing,
        reason = "`% SLOTS` on an array of SLOTS slots is always in bounds"
    )]
    fn slot(&self, cell: &WindowCell) -> &Notify {
        // Cells are heap-allocated and aligned: drop the low bits that never vary.
        let address = std::ptr::from_ref(cell) as usize;
        &self.slots[(address >> 6) % SLOTS]
    }

    /// Become the reader of `cell`, or wait (at most `max_wait`) for the current reader.
    pub async fn enter<'a>(&'a self, cell: &'a WindowCell, max_wait: Duration) -> Turn<'a> {
        if cell.begin_refresh() {
            return Turn::Leader(Leader { gate: self, cell });
        }
        let wait = async {
            loop {
                let mut notified = pin!(self.slot(cell).notified());
                // Registered before the check, so a finish between the two is not missed.
                notified.as_mut().enable();
                if !cell.is_refreshing() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(max_wait, wait).await;
        Turn::Followed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn followers_wait_for_the_leader() {
        let gate = Arc::new(RefreshGate::default());
        let cell = Arc::new(WindowCell::default());
        let Turn::Leader(leader) = gate.enter(&cell, Duration::from_secs(5)).await else {
            panic!("the first caller leads");
        };
        let follower = {
            let (gate, cell) = (Arc::clone(&gate), Arc::clone(&cell));
            tokio::spawn(async move {
                matches!(
                    gate.enter(&cell, Duration::from_secs(5)).await,
                    Turn::Followed
                ) && cell.regional() == 42
            })
        };
        tokio::task::yield_now().await;
        cell.merge_regional(
            crate::pn::PnCount::hits(42),
            &crate::local::cell::SealedChanges::default(),
        );
        leader.finish();
        assert!(
            follower.await.expect("follower task"),
            "saw the refreshed value"
        );
        assert!(matches!(
            gate.enter(&cell, Duration::from_secs(5)).await,
            Turn::Leader(_)
        ));
    }

    #[tokio::test]
    async fn a_follower_stops_waiting_at_the_deadline() {
        let gate = RefreshGate::default();
        let cell = WindowCell::default();
        let _leader = gate.enter(&cell, Duration::from_secs(5)).await;
        let started = std::time::Instant::now();
        assert!(matches!(
            gate.enter(&cell, Duration::from_millis(20)).await,
            Turn::Followed
        ));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
