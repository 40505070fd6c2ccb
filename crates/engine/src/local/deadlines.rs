//! A moment per counter, bounded in bytes: strict mode's deadlines and the penalty box's
//! ends. Keyed by the counter (`CounterKey`, no sequence), so an entry outlives the window
//! rollover.

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::budget::DEADLINE_ENTRY_BYTES;
use crate::cell_key::{CounterKey, CounterKeyRef};

/// Counter → a moment in ms since the epoch, within its share of `--max-cell-bytes`: each
/// entry weighs its key's strings. What is evicted past the share is forgotten (each user
/// says what that means for it).
pub struct CounterDeadlines {
    until: Cache<CounterKey, u64, EntryWeighter>,
}

#[derive(Clone)]
struct EntryWeighter;

impl Weighter<CounterKey, u64> for EntryWeighter {
    fn weight(&self, key: &CounterKey, _: &u64) -> u64 {
        DEADLINE_ENTRY_BYTES + key.heap_bytes() as u64
    }
}

impl CounterDeadlines {
    pub fn new(max_bytes: u64) -> Self {
        let max_bytes = max_bytes.max(DEADLINE_ENTRY_BYTES);
        Self {
            until: Cache::with_weighter(
                (max_bytes / DEADLINE_ENTRY_BYTES) as usize,
                max_bytes,
                EntryWeighter,
            ),
        }
    }

    /// The counter's moment, whether past or not.
    pub fn get(&self, counter: &CounterKeyRef<'_>) -> Option<u64> {
        self.until.get(counter)
    }

    /// The counter's moment if it is still ahead at `now_ms`.
    pub fn ahead(&self, counter: &CounterKeyRef<'_>, now_ms: u64) -> Option<u64> {
        self.get(counter).filter(|&until| now_ms < until)
    }

    /// Bytes the entries weigh (their keys' strings included).
    pub fn bytes(&self) -> u64 {
        self.until.weight()
    }

    /// The most the entries may weigh.
    pub fn max_bytes(&self) -> u64 {
        self.until.capacity()
    }

    pub fn insert(&self, counter: CounterKey, until_ms: u64) {
        self.until.insert(counter, until_ms);
    }
}
