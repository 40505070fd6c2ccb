//! Metrics and logging set-up. Any layer may record metrics; only `main` sets up logging.

mod connections;
mod labels;
mod latency;
mod logging;
mod memory;
mod metrics;
mod rule_series;
mod sharded;
pub mod stall;
mod upstream_stats;

pub use connections::{ConnectionMetricFamilies, ConnectionMetrics};
pub use labels::{DecisionOutcome, RequestMethod, RequestOutcome, SharedLabel};
pub use latency::LatencyHistogram;
pub use logging::{LogFormat, init_logging};
pub use memory::MemoryMetricFamilies;
pub use metrics::{BUILD_COMMIT, MemoryPool, Metrics, MetricsSettings};
pub use rule_series::RuleSeries;
pub use sharded::ShardedCounter;
pub use upstream_stats::Usage;
