//! A Prometheus counter that threads increment without sharing a cache line.
//!
//! Every decision increments a few counters. With one `AtomicU64` per counter, every core
//! would write the same cache line on every request, and the line would bounce between cores:
//! the hot path would stop scaling with cores because of its metrics. The count is the
//! engine's [`ShardedCount`] (each thread adds to its own padded slot, a scrape sums them);
//! this type adds what Prometheus needs to encode it.

use gcounter_engine::sharded::ShardedCount;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A monotonic counter; clones share the count (as `prometheus_client`'s `Counter`).
#[derive(Debug, Clone, Default)]
pub struct ShardedCounter(ShardedCount);

impl ShardedCounter {
    pub fn inc(&self) {
        self.0.inc();
    }

    pub fn add(&self, n: u64) {
        self.0.add(n);
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
