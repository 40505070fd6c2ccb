//! Metrics and logging set-up. Any layer may record metrics; only `main` sets up logging.
//!
//! The Prometheus registry (`metrics`, which implements the engine's `Recorder`) and the
//! label values its series share (`labels`); envoyproxy/ratelimit's per-rule stats under its
//! Prometheus names (`upstream_stats`); a rule's own series, resolved on its first decision
//! and kept in the compiled `config::Rule` so no decision hashes labels (`rule_series`);
//! per-listener connection series (`connections`); per-thread-slot counters for the
//! per-request series (`sharded`: the engine's `ShardedCount` with its Prometheus encoding);
//! the request-duration histogram in per-thread slots (`latency`); the runtime's stall probe
//! (`stall`: a task that wakes every `--stall-probe-interval` and records how late, off unless
//! set); the memory limit and budgets (`memory`); the tracing subscriber (`logging`); the
//! table every fixed set of series registers with (`register`).

mod connections;
mod labels;
mod latency;
mod logging;
mod memory;
mod metrics;
mod quota;
mod register;
mod rule_series;
mod sharded;
pub mod stall;
pub mod statsd;
mod upstream_service;
mod upstream_stats;

pub use connections::{ConnectionMetricFamilies, ConnectionMetrics};
pub use labels::{DecisionOutcome, RequestMethod, RequestOutcome, SharedLabel};
pub use latency::LatencyHistogram;
pub use logging::{LogFormat, init_logging};
pub use memory::MemoryMetricFamilies;
pub use metrics::{BUILD_COMMIT, DecisionLabel, MemoryPool, Metrics, MetricsSettings};
pub use quota::{AssignmentKind, QuotaMetrics, StreamError, UsageOutcome};
pub(crate) use register::register_all;
pub use rule_series::RuleSeries;
pub use sharded::ShardedCounter;
pub use upstream_stats::Usage;
