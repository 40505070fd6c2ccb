//! The Prometheus registry, served as text on `GET /metrics`: [`Metrics`], its series and the
//! calls that record into them. Building the registry is `build` (every series registered
//! once, in exposition order), the engine's reports are `recorder`, and upstream's
//! response-time series, computed at scrape time, is `upstream_time`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use gcounter_engine::recorder::DecisionSource;

use super::connections::ConnectionMetricFamilies;
use super::labels::{DecisionOutcome, RequestMethod, RequestOutcome, SharedLabel};
use super::latency::LatencyHistogram;
use super::memory::{MemoryMetricFamilies, PoolLabels};
use super::quota::QuotaMetrics;
use super::rule_series::RuleSeries;
use super::sharded::ShardedCounter;
use super::upstream_service::UpstreamServiceStats;
use super::upstream_stats::{UpstreamStats, Usage};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OriginLabels {
    op: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    outcome: RequestOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    domain: SharedLabel,
    rule: SharedLabel,
    outcome: DecisionOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MethodLabels {
    method: RequestMethod,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SwitchLabels {
    switch: &'static str,
}

/// One byte budget and what is held against it, sampled at scrape time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPool {
    /// The `pool` label: `cells`, `replay_queue`, `strict_mode`, `penalty_box`, `rights`,
    /// `foreign_components`, `request_bytes`.
    pub pool: &'static str,
    pub bytes: u64,
    pub budget: u64,
}

/// The commit the binary was built from (`build.rs`).
pub const BUILD_COMMIT: &str = env!("RLS_BUILD_COMMIT");

/// Bounds on what requests can add to the exposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    /// `rls_descriptor_decisions_total` series one `detailed_metric` rule may create (one per
    /// request value and outcome). Past it, new values are counted in the rule's own series.
    pub max_series_per_rule: u32,
    /// `detailed_metric` series the whole process may create (the metric-series share of
    /// `--max-memory`); `None`: only the per-rule cap.
    pub max_detailed_series: Option<u64>,
    /// How often the stall probe wakes (`telemetry::stall`); `None`: no probe.
    pub stall_probe_interval: Option<std::time::Duration>,
    /// Upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: its
    /// `ratelimit_service_response_time_seconds` observes milliseconds instead of seconds
    /// (upstream's legacy unit; the name keeps `_seconds`, as upstream's does).
    pub response_time_in_milliseconds: bool,
}

impl MetricsSettings {
    pub const DEFAULT_MAX_SERIES_PER_RULE: u32 = 1_000;
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            max_series_per_rule: Self::DEFAULT_MAX_SERIES_PER_RULE,
            max_detailed_series: None,
            stall_probe_interval: None,
            response_time_in_milliseconds: false,
        }
    }
}

/// The series each `detailed_metric` rule has created, against its cap.
///
/// A `detailed_metric` series is labelled with a request value (an API key, an address):
/// without a cap, a client sending unique values would grow the exposition and the process
/// without end, since Prometheus series are never forgotten.
struct DetailedSeries {
    max_per_rule: u32,
    /// The cap of all rules together, and the count against it.
    max_total: Option<u64>,
    /// A std mutex: taken only when a decision would create a new series.
    created: Mutex<DetailedCounts>,
}

#[derive(Default)]
struct DetailedCounts {
    per_rule: HashMap<(SharedLabel, SharedLabel), u32>,
    total: u64,
}

pub struct Metrics {
    /// Which registry a rule's resolved series belong to (`RuleSeries`).
    id: u64,
    registry: Registry,
    /// envoyproxy/ratelimit's names, without our `rls` prefix (`upstream_stats`).
    upstream_registry: Registry,
    upstream: Arc<UpstreamStats>,
    /// Upstream's config load, global shadow mode and error stats.
    upstream_service: Arc<UpstreamServiceStats>,
    detailed: DetailedSeries,
    detailed_series_capped: Counter,
    /// Per-request counters, resolved once (no label lookup per request) and sharded (no
    /// cache line shared by all cores): indexed by `RequestOutcome as usize`.
    requests: [ShardedCounter; 4],
    /// Indexed by `RequestMethod as usize`, as `requests`.
    request_duration: [LatencyHistogram; 2],
    decisions: Family<DecisionLabels, ShardedCounter>,
    unmatched: ShardedCounter,
    reloads: Family<ReloadLabels, Counter>,
    config_generation: Gauge,
    config_last_reload_success: Gauge,
    config_last_reload_timestamp: Gauge<f64, AtomicU64>,
    switches: Family<SwitchLabels, Gauge>,
    memory_bytes: Family<PoolLabels, Gauge>,
    memory_budget_bytes: Family<PoolLabels, Gauge>,
    rules: Gauge,
    live_cells: Gauge,
    cell_bytes: Family<CellShareLabels, Gauge>,
    pending_replay_cells: Gauge,
    origin_operations: Family<OriginLabels, Counter>,
    origin_latency: Family<OpLabels, Histogram, fn() -> Histogram>,
    replay_batch_cells: Histogram,
    replay_overflow: Counter,
    refunded_hits: Counter,
    refunds_dropped: Counter,
    carry_over: Family<OutcomeLabels, Counter>,
    /// Indexed by `DecisionSource as usize`, as `requests`.
    decisions_by_source: [ShardedCounter; 2],
    origin_circuit: Gauge,
    global_rows_written: Counter,
    global_write_errors: Counter,
    global_rows_skipped: Counter,
    global_sync_rows_applied: Counter,
    global_sync_errors: Counter,
    global_sync_cells_created: Counter,
    global_sync_last_rows: Gauge,
    global_clock_offset: Gauge<f64, AtomicU64>,
    global_duration: Family<GlobalOpLabels, Histogram, fn() -> Histogram>,
    /// How late the stall probe woke (`telemetry::stall`).
    runtime_stall: Histogram,
    /// Per-listener connection series (the transport's caps at work).
    pub connections: ConnectionMetricFamilies,
    /// The memory limit and the budgets derived from it.
    pub memory: MemoryMetricFamilies,
    /// The RLQS service's streams, buckets, reports and assignments.
    pub quota: QuotaMetrics,
}

/// The label a limited decision is counted under ([`Metrics::limited_decision`]).
#[derive(Clone, Copy)]
pub enum DecisionLabel<'a> {
    /// A rule labelled by its path, through the series handles `series` keeps.
    Rule {
        series: &'a RuleSeries,
        path: &'a Arc<str>,
    },
    /// A `detailed_metric` or `value_to_metric` rule: `label` holds request values, so its
    /// series are capped per rule (past the cap, counted under the rule's `rule` path).
    Detailed {
        rule: &'a Arc<str>,
        label: &'a Arc<str>,
    },
    /// A request override, under its fixed label.
    Override(&'a Arc<str>),
}

impl DetailedSeries {
    /// Whether `rule` may create one more series; counts it if so. Two decisions racing to
    /// create the same series may both count it: the cap errs on the side of fewer series.
    fn admit_new(&self, domain: &Arc<str>, rule: &Arc<str>) -> bool {
        let mut created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        if self.max_total.is_some_and(|max| created.total >= max) {
            return false;
        }
        let count = created
            .per_rule
            .entry((
                SharedLabel(Arc::clone(domain)),
                SharedLabel(Arc::clone(rule)),
            ))
            .or_insert(0);
        if *count >= self.max_per_rule {
            return false;
        }
        *count += 1;
        created.total += 1;
        true
    }
}

/// Which share of `--max-cell-bytes` (`evictable` or `protected`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CellShareLabels {
    share: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GlobalOpLabels {
    op: &'static str,
}

impl Metrics {
    /// One wake-up of the stall probe, `late` after its deadline.
    pub fn runtime_stall(&self, late: std::time::Duration) {
        self.runtime_stall.observe(late.as_secs_f64());
    }

    /// 0 closed, 1 half-open, 2 open.
    pub fn set_origin_circuit(&self, state: i64) {
        self.origin_circuit.set(state);
    }

    pub fn request(&self, outcome: RequestOutcome) {
        // Indexed by the enum's order, as registered in `with_settings`.
        if let Some(counter) = self.requests.get(outcome as usize) {
            counter.inc();
        }
        if outcome == RequestOutcome::InvalidArgument {
            self.upstream_service.service_error.inc();
        }
    }

    /// A request over a limit that the global shadow mode answered OK.
    pub fn global_shadow_mode(&self) {
        self.upstream_service.global_shadow_mode.inc();
    }

    /// Every stat upstream sends over statsd, by its statsd name (without tags), and its
    /// count since start: its per-rule stats, its service stats, its request count.
    pub fn statsd_counts(&self, out: &mut Vec<(String, u64)>) {
        self.upstream.each_count(|label, stat, count| {
            out.push((
                format!("ratelimit.service.rate_limit.{label}.{stat}"),
                count,
            ));
        });
        for (name, count) in self.upstream_service.statsd_counts() {
            out.push((format!("ratelimit.service.{name}"), count));
        }
        if let Some(grpc) = self.request_duration.first() {
            out.push((
                "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
                grpc.snapshot().count,
            ));
        }
    }

    /// One request answered by `method`, `took` after it was routed.
    #[inline]
    pub fn request_duration(&self, method: RequestMethod, took: Duration) {
        // Indexed by the enum's order, as registered in `with_settings`.
        if let Some(histogram) = self.request_duration.get(method as usize) {
            histogram.observe(took);
        }
    }

    /// The service-wide switches in effect, by name (`rls_switch_enabled`).
    pub fn set_switches(&self, switches: &[(&'static str, bool)]) {
        for (switch, on) in switches {
            self.switches
                .get_or_create(&SwitchLabels { switch })
                .set(i64::from(*on));
        }
    }

    /// Byte pools against their budgets, sampled at scrape time (`rls_memory_bytes`).
    pub fn set_memory(&self, pools: &[MemoryPool]) {
        let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        for pool in pools {
            let labels = PoolLabels { pool: pool.pool };
            self.memory_bytes
                .get_or_create(&labels)
                .set(gauge(pool.bytes));
            self.memory_budget_bytes
                .get_or_create(&labels)
                .set(gauge(pool.budget));
        }
    }

    pub fn decision(&self, domain: &Arc<str>, rule: &Arc<str>, outcome: DecisionOutcome) {
        let labels = DecisionLabels {
            domain: SharedLabel(Arc::clone(domain)),
            rule: SharedLabel(Arc::clone(rule)),
            outcome,
        };
        self.decisions.get_or_create(&labels).inc();
    }

    /// A limited descriptor's decision, counted once: in `rls_descriptor_decisions_total`
    /// and in upstream's per-rule stats, under the same label, so the same cap bounds both.
    pub fn limited_decision(
        &self,
        domain: &Arc<str>,
        label: DecisionLabel<'_>,
        outcome: DecisionOutcome,
        usage: Usage,
    ) {
        let counted = match label {
            DecisionLabel::Rule { series, path } => match series.resolved(self.id) {
                // The handles `series` keeps: no label is hashed once they are resolved.
                Some(resolved) => {
                    self.count_resolved(resolved, domain, path, outcome);
                    let stats = resolved
                        .upstream
                        .get_or_init(|| self.upstream.stats_of(domain, path));
                    self.upstream.count(stats, outcome, usage);
                    return;
                }
                None => {
                    self.decision(domain, path, outcome);
                    path
                }
            },
            DecisionLabel::Detailed { rule, label } => {
                self.detailed_decision(domain, rule, label, outcome)
            }
            DecisionLabel::Override(label) => {
                self.decision(domain, label, outcome);
                label
            }
        };
        self.upstream.record(domain, counted, outcome, usage);
    }

    /// An unlimited rule's decision (`rls_descriptor_decisions_total` only), through `series`.
    pub fn rule_unlimited(&self, series: &RuleSeries, domain: &Arc<str>, path: &Arc<str>) {
        let outcome = DecisionOutcome::Unlimited;
        match series.resolved(self.id) {
            Some(resolved) => self.count_resolved(resolved, domain, path, outcome),
            None => self.decision(domain, path, outcome),
        }
    }

    fn count_resolved(
        &self,
        resolved: &super::rule_series::Resolved,
        domain: &Arc<str>,
        path: &Arc<str>,
        outcome: DecisionOutcome,
    ) {
        // Indexed by the enum's order; every outcome has its slot.
        if let Some(slot) = resolved.decisions.get(outcome as usize) {
            slot.get_or_init(|| {
                let labels = DecisionLabels {
                    domain: SharedLabel(Arc::clone(domain)),
                    rule: SharedLabel(Arc::clone(path)),
                    outcome,
                };
                self.decisions.get_or_create(&labels).clone()
            })
            .inc();
        }
    }

    /// A decision of a `detailed_metric` rule: counted in the series of `label` (the rule's
    /// path and the request's value) while the rule has fewer series than its cap, else in
    /// the rule's own series.
    /// Returns the label counted (`label`, or `rule` past the cap), for upstream's stats.
    pub fn detailed_decision<'a>(
        &self,
        domain: &Arc<str>,
        rule: &'a Arc<str>,
        label: &'a Arc<str>,
        outcome: DecisionOutcome,
    ) -> &'a Arc<str> {
        let labels = DecisionLabels {
            domain: SharedLabel(Arc::clone(domain)),
            rule: SharedLabel(Arc::clone(label)),
            outcome,
        };
        if let Some(series) = self.decisions.get(&labels) {
            series.inc();
            return label;
        }
        if self.detailed.admit_new(domain, rule) {
            self.decisions.get_or_create(&labels).inc();
            label
        } else {
            self.detailed_series_capped.inc();
            self.decision(domain, rule, outcome);
            rule
        }
    }

    /// Upstream's `NEAR_LIMIT_RATIO` (`--near-limit-ratio`), in `[0, 1]`.
    pub fn set_near_limit_ratio(&self, ratio: f64) {
        self.upstream.set_near_limit_ratio(ratio);
    }

    pub fn unmatched(&self) {
        self.unmatched.inc();
    }

    pub fn config_loaded(&self, rules: usize) {
        self.upstream_service.config_load_success.inc();
        self.reloads
            .get_or_create(&ReloadLabels { result: "ok" })
            .inc();
        self.rules.set(i64::try_from(rules).unwrap_or(i64::MAX));
        self.config_generation.inc();
        self.config_attempted(true);
    }

    pub fn config_rejected(&self) {
        self.upstream_service.config_load_error.inc();
        self.reloads
            .get_or_create(&ReloadLabels { result: "error" })
            .inc();
        self.config_attempted(false);
    }

    fn config_attempted(&self, ok: bool) {
        self.config_last_reload_success.set(i64::from(ok));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.config_last_reload_timestamp.set(now.as_secs_f64());
    }

    /// Gauges sampled at scrape time from the engine.
    pub fn set_engine_gauges(&self, live_cells: usize, pending_replay_cells: usize) {
        self.live_cells
            .set(i64::try_from(live_cells).unwrap_or(i64::MAX));
        self.pending_replay_cells
            .set(i64::try_from(pending_replay_cells).unwrap_or(i64::MAX));
    }

    /// The engine's cell bytes, sampled at scrape time.
    pub fn set_cell_bytes(&self, evictable: u64, protected: u64) {
        for (share, bytes) in [("evictable", evictable), ("protected", protected)] {
            self.cell_bytes
                .get_or_create(&CellShareLabels { share })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &self.upstream_registry))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

mod build;
mod recorder;
mod upstream_time;

#[cfg(test)]
mod tests;
