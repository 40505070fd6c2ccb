//! The regional origin of a region made of one process: a bounded map in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::sync::Cache;

use super::{OriginFuture, RegionalOrigin};
use crate::cell_key::CellKey;

/// Totals per cell, bounded like the engine's cell table so memory stays capped.
///
/// It keeps counts when the engine evicts or reaps a cell that is still inside the sliding
/// window, and it gives the replay path a real partner in the embedded default and in tests.
pub struct InProcessOrigin {
    totals: Cache<CellKey, Arc<AtomicU64>>,
}

impl InProcessOrigin {
    pub fn new(max_cells: usize) -> Self {
        Self {
            totals: Cache::new(max_cells.max(1)),
        }
    }

    fn add(&self, key: &CellKey, delta: u64) -> u64 {
        let total = match self.totals.get(key) {
            Some(total) => total,
            None => {
                // Two replayers racing on a new key both land on the value that won the insert.
                let fresh = Arc::new(AtomicU64::new(0));
                match self
                    .totals
                    .get_or_insert_with(key, || Ok::<_, std::convert::Infallible>(fresh))
                {
                    Ok(total) => total,
                    Err(never) => match never {},
                }
            }
        };
        total
            .fetch_add(delta, Ordering::AcqRel)
            .saturating_add(delta)
    }
}

impl RegionalOrigin for InProcessOrigin {
    fn name(&self) -> &'static str {
        "in-process"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, u64> {
        let total = self
            .totals
            .get(key)
            .map_or(0, |t| t.load(Ordering::Acquire));
        Box::pin(std::future::ready(Ok(total)))
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
        let totals = batch
            .iter()
            .map(|(key, delta)| self.add(key, *delta))
            .collect();
        Box::pin(std::future::ready(Ok(totals)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> CellKey {
        CellKey {
            workspace: "d".into(),
            namespace: "1:k/".into(),
            identifier: id.into(),
            duration_ms: 1_000,
            sequence: 1,
        }
    }

    #[tokio::test]
    async fn replay_adds_and_read_sees_the_total() {
        let origin = InProcessOrigin::new(100);
        assert_eq!(origin.read(&key("a")).await.ok(), Some(0));
        let totals = origin
            .replay(&[(key("a"), 2), (key("b"), 1), (key("a"), 3)])
            .await;
        assert_eq!(totals.ok(), Some(vec![2, 1, 5]));
        assert_eq!(origin.read(&key("a")).await.ok(), Some(5));
    }
}
