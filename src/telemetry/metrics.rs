//! The Prometheus registry, served as text on `GET /metrics`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use gcounter_engine::recorder::{DecisionSource, FlushRecord, OriginOp, Recorder};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::connections::ConnectionMetricFamilies;
use super::labels::{DecisionOutcome, RequestMethod, RequestOutcome, SharedLabel};
use super::latency::{DEFAULT_BUCKETS, LatencyHistogram};
use super::memory::{MemoryMetricFamilies, PoolLabels};
use super::quota::QuotaMetrics;
use super::register::SeriesSet;
use super::rule_series::{RuleSeries, next_registry_id};
use super::sharded::ShardedCounter;
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
    /// The `pool` label: `cells`, `replay_queue`, `strict_mode`, `penalty_box`,
    /// `request_bytes`.
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

/// The stall probe's buckets: 1 ms (the timer's resolution) to ~4 s, doubling.
const STALL_BUCKETS: u16 = 13;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~3.3 s
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::with_settings(MetricsSettings::default())
    }

    pub fn with_settings(settings: MetricsSettings) -> Self {
        let mut registry = Registry::with_prefix("rls");
        let detailed_series_capped = Counter::default();
        registry.register(
            "detailed_series_capped",
            "detailed_metric decisions counted in their rule's own series because the rule \
             reached --max-metric-series-per-rule, or the process its series' share of \
             --max-memory",
            detailed_series_capped.clone(),
        );
        let request_family = Family::<RequestLabels, ShardedCounter>::default();
        let requests = [
            RequestOutcome::Ok,
            RequestOutcome::OverLimit,
            RequestOutcome::InvalidArgument,
            RequestOutcome::ResourceExhausted,
        ]
        .map(|outcome| {
            request_family
                .get_or_create(&RequestLabels { outcome })
                .clone()
        });
        let duration_family = Family::<MethodLabels, LatencyHistogram>::default();
        let request_duration =
            [RequestMethod::ShouldRateLimit, RequestMethod::Json].map(|method| {
                duration_family
                    .get_or_create(&MethodLabels { method })
                    .clone()
            });
        registry.register(
            "request_duration_seconds",
            "Time from routing a request to its answer being ready, by method \
             (should_rate_limit: gRPC, json: POST /json), whatever the answer",
            duration_family,
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: BUILD_COMMIT,
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the labels say which build runs (version, and the commit or unknown)",
            build_info,
        );
        let config_generation = Gauge::default();
        let config_last_reload_success = Gauge::default();
        let config_last_reload_timestamp = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "config_generation",
            "Limits configs loaded since start (files or xDS): one more on every successful \
             load or reload",
            config_generation.clone(),
        );
        registry.register(
            "config_last_reload_success",
            "1 when the last load or reload of the limits config succeeded, 0 when it was \
             refused (the previous config stays in use)",
            config_last_reload_success.clone(),
        );
        registry.register(
            "config_last_reload_timestamp_seconds",
            "When the last load or reload of the limits config was attempted (Unix time)",
            config_last_reload_timestamp.clone(),
        );
        let switches = Family::<SwitchLabels, Gauge>::default();
        registry.register(
            "switch_enabled",
            "The service-wide switches in effect (flags and upstream's variables): 1 on, 0 off",
            switches.clone(),
        );
        let memory_bytes = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "memory_bytes",
            "Bytes held against each bounded pool: cells (the cell table, evictable and \
             protected), replay_queue, strict_mode, penalty_box (shares of --max-cell-bytes) \
             and request_bytes (request bytes being buffered, --max-buffered-request-bytes); \
             their budgets are in rls_memory_budget_bytes",
            memory_bytes.clone(),
        );
        let decisions = Family::<DecisionLabels, ShardedCounter>::default();
        let unmatched = ShardedCounter::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let rules = Gauge::default();
        let live_cells = Gauge::default();
        let cell_bytes = Family::<CellShareLabels, Gauge>::default();
        let pending_replay_cells = Gauge::default();
        let origin_operations = Family::<OriginLabels, Counter>::default();
        let origin_latency = Family::<OpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let replay_batch_cells = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        let replay_overflow = Counter::default();
        let refunded_hits = Counter::default();
        let refunds_dropped = Counter::default();
        let source_family = Family::<SourceLabels, ShardedCounter>::default();
        let decisions_by_source = [DecisionSource::Local, DecisionSource::Origin].map(|source| {
            source_family
                .get_or_create(&SourceLabels {
                    source: source.as_str(),
                })
                .clone()
        });
        let origin_circuit = Gauge::default();
        let global_rows_written = Counter::default();
        let global_write_errors = Counter::default();
        let global_rows_skipped = Counter::default();
        let global_sync_rows_applied = Counter::default();
        let global_sync_errors = Counter::default();
        let global_sync_cells_created = Counter::default();
        let global_sync_last_rows = Gauge::default();
        let global_clock_offset = Gauge::<f64, AtomicU64>::default();
        let global_duration =
            Family::<GlobalOpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "global_rows_written",
            "Own-region components written to the global counters table",
            global_rows_written.clone(),
        );
        registry.register(
            "global_write_errors",
            "Failed global flush chunks (their rows stay pending)",
            global_write_errors.clone(),
        );
        registry.register(
            "global_rows_skipped",
            "Cells the global table cannot hold (identity longer than its columns)",
            global_rows_skipped.clone(),
        );
        registry.register(
            "global_sync_rows_applied",
            "Cells merged from the global counters by sync",
            global_sync_rows_applied.clone(),
        );
        registry.register(
            "global_sync_errors",
            "Failed global syncs (imported counts already held are kept)",
            global_sync_errors.clone(),
        );
        registry.register(
            "global_sync_cells_created",
            "Cells created in memory by sync (foreign traffic on counters unused here)",
            global_sync_cells_created.clone(),
        );
        registry.register(
            "global_sync_last_rows",
            "Cells returned by the last global sync",
            global_sync_last_rows.clone(),
        );
        registry.register(
            "global_clock_offset_seconds",
            "This process's wall clock minus the global database's, as the sync last measured it (half the round trip allowed for)",
            global_clock_offset.clone(),
        );
        registry.register(
            "global_duration_seconds",
            "Global flush, sync and cleanup durations",
            global_duration.clone(),
        );
        registry.register(
            "origin_operations",
            "Regional origin calls by operation (cold, stale, strict, replay) and result",
            origin_operations.clone(),
        );
        registry.register(
            "origin_latency_seconds",
            "Regional origin call latency by operation",
            origin_latency.clone(),
        );
        registry.register(
            "replay_batch_cells",
            "Cells per replay round trip",
            replay_batch_cells.clone(),
        );
        registry.register(
            "replay_overflow",
            "Accepts whose cell could not be queued for replay (queue full; the work stays in the cell)",
            replay_overflow.clone(),
        );
        registry.register(
            "refunded_hits",
            "Hits given back by refunds (is_negative_hits)",
            refunded_hits.clone(),
        );
        registry.register(
            "refunds_dropped",
            "Hits a refund asked for beyond what this process consumed in the cell (not given back)",
            refunds_dropped.clone(),
        );
        registry.register(
            "decisions_by_source",
            "Limited decisions by where their counts came from (local memory or an origin read)",
            source_family,
        );
        registry.register(
            "origin_circuit_state",
            "Regional origin circuit breaker: 0 closed, 1 half-open, 2 open",
            origin_circuit.clone(),
        );
        registry.register(
            "requests",
            "ShouldRateLimit calls by overall outcome",
            request_family,
        );
        registry.register(
            "descriptor_decisions",
            "Decisions on descriptors that matched a limit, by rule and outcome",
            decisions.clone(),
        );
        registry.register(
            "unmatched_descriptors",
            "Descriptors of an unknown domain or with no matching rule (answered OK)",
            unmatched.clone(),
        );
        registry.register(
            "config_reloads",
            "Limits config reloads by result",
            reloads.clone(),
        );
        registry.register("config_rules", "Rules in the loaded config", rules.clone());
        registry.register(
            "live_cells",
            "Window cells held in memory",
            live_cells.clone(),
        );
        registry.register(
            "cell_bytes",
            "Bytes charged to each share of --max-cell-bytes: evictable cells, and cells \
             protected from eviction (at or near their limit, or holding unreplayed work)",
            cell_bytes.clone(),
        );
        let runtime_stall = Histogram::new(exponential_buckets(0.001, 2.0, STALL_BUCKETS));
        registry.register(
            "runtime_stall_seconds",
            "How late the stall probe's task woke after its deadline: how long a runtime \
             thread could not run a ready task (only with --stall-probe-interval; below 1 ms \
             it is the timer's rounding)",
            runtime_stall.clone(),
        );
        registry.register(
            "replay_pending_cells",
            "Cells with accepted work not yet replayed to the regional origin",
            pending_replay_cells.clone(),
        );
        crate::trace::register_metrics(&mut registry);
        let connections = ConnectionMetricFamilies::register(&mut registry);
        let memory = MemoryMetricFamilies::register(&mut registry);
        // One family for every budget: the plan's pools and those sampled at scrape time.
        let memory_budget_bytes = memory.budget().clone();
        let upstream = Arc::new(UpstreamStats::new());
        let mut upstream_registry = Registry::default();
        upstream_registry.register_collector(Box::new(Arc::clone(&upstream)));
        if let Some(grpc) = request_duration.first() {
            upstream_registry.register_collector(Box::new(UpstreamResponseTime {
                grpc: grpc.clone(),
                in_milliseconds: settings.response_time_in_milliseconds,
            }));
        }
        let quota = QuotaMetrics::register(&mut registry);
        Self {
            id: next_registry_id(),
            quota,
            connections,
            memory,
            registry,
            upstream_registry,
            upstream,
            detailed: DetailedSeries {
                max_per_rule: settings.max_series_per_rule,
                max_total: settings.max_detailed_series,
                created: Mutex::new(DetailedCounts::default()),
            },
            detailed_series_capped,
            requests,
            request_duration,
            decisions,
            unmatched,
            reloads,
            config_generation,
            config_last_reload_success,
            config_last_reload_timestamp,
            switches,
            memory_bytes,
            memory_budget_bytes,
            rules,
            live_cells,
            cell_bytes,
            pending_replay_cells,
            origin_operations,
            origin_latency,
            replay_batch_cells,
            replay_overflow,
            refunded_hits,
            refunds_dropped,
            decisions_by_source,
            origin_circuit,
            global_rows_written,
            global_write_errors,
            global_rows_skipped,
            global_sync_rows_applied,
            global_sync_errors,
            global_sync_cells_created,
            global_sync_last_rows,
            global_clock_offset,
            global_duration,
            runtime_stall,
        }
    }

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
        self.reloads
            .get_or_create(&ReloadLabels { result: "ok" })
            .inc();
        self.rules.set(i64::try_from(rules).unwrap_or(i64::MAX));
        self.config_generation.inc();
        self.config_attempted(true);
    }

    pub fn config_rejected(&self) {
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

/// envoyproxy/ratelimit's `ratelimit_service_response_time_seconds{grpc_method}`: the
/// response time of its gRPC methods as its default statsd mapping exports it (a histogram
/// with the Prometheus client's default buckets, `grpc_method="ShouldRateLimit"`), read from
/// `rls_request_duration_seconds{method="should_rate_limit"}`. Upstream records whole
/// milliseconds (a sub-millisecond answer is 0); these are exact. With
/// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, the observations (buckets and sum) are in
/// milliseconds, as upstream's legacy mapping has them.
#[derive(Debug)]
struct UpstreamResponseTime {
    grpc: LatencyHistogram,
    in_milliseconds: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GrpcMethodLabels {
    grpc_method: &'static str,
}

impl Collector for UpstreamResponseTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.grpc.snapshot();
        let scale = if self.in_milliseconds { 1_000.0 } else { 1.0 };
        let buckets = snapshot.rebucketed(&DEFAULT_BUCKETS, scale);
        let labels = GrpcMethodLabels {
            grpc_method: "ShouldRateLimit",
        };
        let mut family = encoder.encode_descriptor(
            "ratelimit_service_response_time_seconds",
            "ShouldRateLimit response time (upstream's ratelimit_server.*.response_time)",
            None,
            MetricType::Histogram,
        )?;
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(
                snapshot.sum_seconds * scale,
                snapshot.count,
                &buckets,
                None,
            )?;
        // Upstream's request counter, named as its mapping names it (no `_total`: a gauge,
        // as `upstream_stats` exports upstream's counters).
        let mut family = encoder.encode_descriptor(
            "ratelimit_service_total_requests",
            "ShouldRateLimit calls answered (upstream's ratelimit_server.*.total_requests)",
            None,
            MetricType::Gauge,
        )?;
        family
            .encode_family(&labels)?
            .encode_gauge(&snapshot.count)?;
        Ok(())
    }
}

/// The engine's and the global counters' reports, into this registry.
impl Recorder for Metrics {
    fn decision_source(&self, source: DecisionSource) {
        // Indexed by the enum's order, as registered in `with_settings`.
        if let Some(counter) = self.decisions_by_source.get(source as usize) {
            counter.inc();
        }
    }

    fn origin_call(&self, op: OriginOp, ok: bool, took: std::time::Duration) {
        let result = if ok { "ok" } else { "error" };
        let op = op.as_str();
        self.origin_operations
            .get_or_create(&OriginLabels { op, result })
            .inc();
        self.origin_latency
            .get_or_create(&OpLabels { op })
            .observe(took.as_secs_f64());
    }

    fn replay_batch(&self, cells: usize) {
        self.replay_batch_cells.observe(cells as f64);
    }

    fn replay_overflow(&self) {
        self.replay_overflow.inc();
    }

    fn refund(&self, refunded: u64, dropped: u64) {
        self.refunded_hits.inc_by(refunded);
        self.refunds_dropped.inc_by(dropped);
    }

    fn global_flush(&self, flush: FlushRecord) {
        self.global_rows_written.inc_by(flush.written);
        self.global_write_errors.inc_by(flush.failed_chunks);
        self.global_rows_skipped.inc_by(flush.skipped);
        self.global_duration
            .get_or_create(&GlobalOpLabels { op: "flush" })
            .observe(flush.took.as_secs_f64());
    }

    fn global_sync(&self, rows: u64, created: u64, took: std::time::Duration) {
        self.global_sync_rows_applied.inc_by(rows);
        self.global_sync_cells_created.inc_by(created);
        self.global_sync_last_rows
            .set(i64::try_from(rows).unwrap_or(i64::MAX));
        self.global_duration
            .get_or_create(&GlobalOpLabels { op: "sync" })
            .observe(took.as_secs_f64());
    }

    fn global_sync_failed(&self) {
        self.global_sync_errors.inc();
    }

    fn global_clock_offset(&self, seconds: f64) {
        self.global_clock_offset.set(seconds);
    }

    fn global_cleanup(&self, took: std::time::Duration) {
        self.global_duration
            .get_or_create(&GlobalOpLabels { op: "cleanup" })
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests;
