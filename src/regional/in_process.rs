//! The regional origin of a region made of one process: a bounded map in memory.

use std::sync::{Arc, Mutex, PoisonError};

use quick_cache::sync::Cache;

use super::{CellRead, OriginFuture, RegionalOrigin};
use crate::cell_key::CellKey;

/// Per cell, each process's published cumulative count.
type Components = Mutex<Vec<(Arc<str>, u64)>>;

/// The G-Counter cells of a region, bounded like the engine's cell table so memory stays
/// capped. In the embedded default the region is this one process; tests make several
/// "processes" share one store with [`InProcessOrigin::sibling`].
///
/// It keeps counts when the engine evicts or reaps a cell still inside the sliding window,
/// and gives the replay path a real partner in the embedded default and in tests.
pub struct InProcessOrigin {
    cells: Arc<Cache<CellKey, Arc<Components>>>,
    process: Arc<str>,
}

impl InProcessOrigin {
    pub fn new(max_cells: usize) -> Self {
        Self {
            cells: Arc::new(Cache::new(max_cells.max(1))),
            process: "local".into(),
        }
    }

    /// Another process of the same region: same cells, its own components.
    pub fn sibling(&self, process: &str) -> Self {
        Self {
            cells: Arc::clone(&self.cells),
            process: process.into(),
        }
    }

    fn components(&self, key: &CellKey) -> Arc<Components> {
        match self
            .cells
            .get_or_insert_with(key, || Ok::<_, std::convert::Infallible>(Arc::default()))
        {
            Ok(components) => components,
            Err(never) => match never {},
        }
    }

    fn read_now(&self, key: &CellKey) -> CellRead {
        let Some(components) = self.cells.get(key) else {
            return CellRead::default();
        };
        let components = components.lock().unwrap_or_else(PoisonError::into_inner);
        summarize(&components, &self.process)
    }

    fn publish(&self, key: &CellKey, cumulative: u64) -> u64 {
        let components = self.components(key);
        // A std mutex: held for a few instructions, never across an await.
        let mut components = components.lock().unwrap_or_else(PoisonError::into_inner);
        match components.iter_mut().find(|(p, _)| *p == self.process) {
            Some((_, own)) => *own = (*own).max(cumulative),
            None => components.push((Arc::clone(&self.process), cumulative)),
        }
        summarize(&components, &self.process).total
    }
}

fn summarize(components: &[(Arc<str>, u64)], process: &str) -> CellRead {
    CellRead {
        total: components
            .iter()
            .fold(0u64, |sum, (_, n)| sum.saturating_add(*n)),
        own: components
            .iter()
            .find(|(p, _)| &**p == process)
            .map_or(0, |(_, n)| *n),
    }
}

impl RegionalOrigin for InProcessOrigin {
    fn name(&self) -> &'static str {
        "in-process"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(std::future::ready(Ok(self.read_now(key))))
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
        let totals = batch
            .iter()
            .map(|(key, cumulative)| self.publish(key, *cumulative))
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
    async fn components_merge_with_max_and_sum_into_the_total() {
        let a = InProcessOrigin::new(100);
        let b = a.sibling("b");
        assert_eq!(a.read(&key("x")).await.ok(), Some(CellRead::default()));
        assert_eq!(
            a.replay(&[(key("x"), 2), (key("y"), 1)]).await.ok(),
            Some(vec![2, 1])
        );
        assert_eq!(b.replay(&[(key("x"), 5)]).await.ok(), Some(vec![7]));
        // publishing the same or an older cumulative value changes nothing
        assert_eq!(
            a.replay(&[(key("x"), 2), (key("x"), 1)]).await.ok(),
            Some(vec![7, 7])
        );
        assert_eq!(
            b.read(&key("x")).await.ok(),
            Some(CellRead { total: 7, own: 5 })
        );
    }
}
