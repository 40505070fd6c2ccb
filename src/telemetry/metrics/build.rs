//! Building the registry: every series of [`Metrics`] created and registered once, in the
//! order the exposition lists them, and the per-request handles resolved up front.

use prometheus_client::metrics::histogram::exponential_buckets;

use crate::telemetry::register::SeriesSet;
use crate::telemetry::rule_series::next_registry_id;

use super::upstream_time::UpstreamResponseTime;
use super::*;

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
             protected), replay_queue, strict_mode, penalty_box, rights (of never_above \
             limits, with Redis), foreign_components (the other regions' components of the \
             cells sync read) (shares of --max-cell-bytes), request_bytes (request bytes \
             being buffered, --max-buffered-request-bytes) and rlqs_buckets (RLQS buckets' \
             ids, state and groups, --rlqs-max-bucket-bytes); their budgets are in \
             rls_memory_budget_bytes",
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
        let carry_over = Family::<OutcomeLabels, Counter>::default();
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
            "Rows (a region's component of a cell each) returned by the last global sync",
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
            "Regional origin calls by operation (cold, stale, strict, replay, rights) and result",
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
            "carry_over_reads",
            "Cold counters' reads of the replaced service's count (--carry-over-from-redis), by \
             outcome: seeded, absent, over_cap (past --carry-over-max-reads-per-second), failed \
             (an error or past --carry-over-timeout); all but seeded start without it",
            carry_over.clone(),
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
        let upstream_service = Arc::new(UpstreamServiceStats::default());
        upstream_registry.register_collector(Box::new(Arc::clone(&upstream_service)));
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
            upstream_service,
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
            carry_over,
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
}
