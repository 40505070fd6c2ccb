//! The memory limit in force and the budgets derived from it: what the service will hold at
//! most, next to what it holds (`rls_cell_bytes`, the process's RSS).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::register::series_set;

use crate::memory::MemoryPlan;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    /// `flag`, `cgroup_v2`, `cgroup_v1`, or `none`.
    source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PoolLabels {
    /// The plan's pools: `cell_bytes`, `request_bytes`, `transport`, `metric_series`,
    /// `reserve`; and the shares of `cell_bytes` sampled at scrape time with what they hold
    /// (`rls_memory_bytes`): `cells`, `replay_queue`, `strict_mode`, `penalty_box`,
    /// `rights`, `foreign_components`.
    pub pool: &'static str,
}

series_set! {
    /// `rls_memory_limit_bytes` and `rls_memory_budget_bytes`, registered once.
    #[derive(Debug, Default)]
    pub struct MemoryMetricFamilies {
        limit: Family<SourceLabels, Gauge> => "memory_limit_bytes",
            "The --max-memory in force (0: none), by where it came from: flag, cgroup_v2 or \
             cgroup_v1 (a share of the container's limit), none";
        budget: Family<PoolLabels, Gauge> => "memory_budget_bytes",
            "The most each pool may hold: cells (--max-cell-bytes), request_bytes \
             (--max-buffered-request-bytes), rlqs_buckets (--rlqs-max-bucket-bytes), transport \
             (connections and requests in flight), metric_series, reserve (the rest of the \
             process)";
    }
}

impl MemoryMetricFamilies {
    /// The family of `rls_memory_budget_bytes`, for a pool reported elsewhere.
    pub fn budget(&self) -> &Family<PoolLabels, Gauge> {
        &self.budget
    }

    /// Sets every series from the budgets in force.
    pub fn set_plan(&self, plan: &MemoryPlan) {
        let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        let (source, bytes) = plan
            .limit
            .map_or(("none", 0), |l| (l.source.label(), l.bytes));
        self.limit.clear();
        self.limit
            .get_or_create(&SourceLabels { source })
            .set(gauge(bytes));
        for (pool, bytes) in plan.pools() {
            self.budget
                .get_or_create(&PoolLabels { pool })
                .set(gauge(bytes));
        }
    }
}

#[cfg(test)]
mod tests;
