//! The memory limit in force and the budgets derived from it: what the service will hold at
//! most, next to what it holds (`rls_cell_bytes`, the process's RSS).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
    /// (`rls_memory_bytes`): `cells`, `replay_queue`, `strict_mode`, `penalty_box`.
    pub pool: &'static str,
}

/// `rls_memory_limit_bytes` and `rls_memory_budget_bytes`, registered once.
#[derive(Debug, Default)]
pub struct MemoryMetricFamilies {
    limit: Family<SourceLabels, Gauge>,
    budget: Family<PoolLabels, Gauge>,
}

impl MemoryMetricFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = Self::default();
        registry.register(
            "memory_limit_bytes",
            "The --max-memory in force (0: none), by where it came from: flag, cgroup_v2 or \
             cgroup_v1 (a share of the container's limit), none",
            families.limit.clone(),
        );
        registry.register(
            "memory_budget_bytes",
            "The most each pool may hold: cells (--max-cell-bytes), request_bytes \
             (--max-buffered-request-bytes), transport (connections and requests in flight), \
             metric_series, reserve (the rest of the process)",
            families.budget.clone(),
        );
        families
    }

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
mod tests {
    use std::sync::Arc;

    use crate::memory::plan::{PlanInputs, limit_in_force, plan};
    use crate::telemetry::{DecisionOutcome, Metrics, MetricsSettings};

    #[test]
    fn the_limit_and_every_pool_are_exposed() {
        let inputs = PlanInputs {
            limit: limit_in_force(Some(256 << 20), Ok(None)).0,
            max_config_bytes: 16 << 20,
            max_cell_bytes: None,
            min_cell_bytes: 18 << 20,
            max_buffered_request_bytes: None,
            max_request_bytes: 256 << 10,
            max_connections: None,
            http2_connection_window: 128 << 10,
            max_inflight_requests: None,
        };
        let plan = plan(&inputs).expect("valid");
        let metrics = Metrics::new();
        metrics.memory.set_plan(&plan);
        let text = metrics.encode();
        assert!(
            text.contains(r#"rls_memory_limit_bytes{source="flag"} 268435456"#),
            "{text}"
        );
        for (pool, bytes) in plan.pools() {
            let line = format!(r#"rls_memory_budget_bytes{{pool="{pool}"}} {bytes}"#);
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(text.contains(r#"pool="reserve""#), "{text}");
    }

    #[test]
    fn no_limit_is_zero_with_source_none() {
        let metrics = Metrics::new();
        let inputs = PlanInputs {
            limit: None,
            max_config_bytes: 16 << 20,
            max_cell_bytes: None,
            min_cell_bytes: 18 << 20,
            max_buffered_request_bytes: None,
            max_request_bytes: 256 << 10,
            max_connections: None,
            http2_connection_window: 128 << 10,
            max_inflight_requests: None,
        };
        metrics.memory.set_plan(&plan(&inputs).expect("valid"));
        let text = metrics.encode();
        assert!(
            text.contains(r#"rls_memory_limit_bytes{source="none"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rls_memory_budget_bytes{pool="cell_bytes"} 268435456"#),
            "{text}"
        );
        assert!(!text.contains(r#"pool="reserve""#), "{text}");
    }

    #[test]
    fn the_process_wide_series_cap_binds_across_rules() {
        let metrics = Metrics::with_settings(MetricsSettings {
            max_series_per_rule: 10,
            max_detailed_series: Some(4),
            ..MetricsSettings::default()
        });
        let domain: Arc<str> = "d".into();
        for rule in ["d.a", "d.b", "d.c"] {
            let rule: Arc<str> = rule.into();
            for value in 0..3 {
                let label: Arc<str> = format!("{rule}_{value}").into();
                metrics.detailed_decision(&domain, &rule, &label, DecisionOutcome::WithinLimit);
            }
        }
        let text = metrics.encode();
        let detailed = text
            .lines()
            .filter(|l| l.starts_with("rls_descriptor_decisions_total{") && l.contains('_'))
            .filter(|l| l.contains(r#"rule="d.a_"#) || l.contains(r#"rule="d.b_"#))
            .count()
            + text.lines().filter(|l| l.contains(r#"rule="d.c_"#)).count();
        assert_eq!(detailed, 4, "{text}");
        assert!(
            text.contains("rls_detailed_series_capped_total 5"),
            "{text}"
        );
    }
}
