//! The export's counters, one set per process (the export thread and the metrics endpoint
//! share them; every `Metrics` registry shows the same values).

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::telemetry::register_all;

pub struct SpanCounters {
    /// Dropped because the export queue was full.
    pub dropped: Counter,
    pub exported: Counter,
    /// In exports that failed or timed out (lost).
    pub failed: Counter,
}

pub fn counters() -> &'static SpanCounters {
    static COUNTERS: OnceLock<SpanCounters> = OnceLock::new();
    COUNTERS.get_or_init(|| SpanCounters {
        dropped: Counter::default(),
        exported: Counter::default(),
        failed: Counter::default(),
    })
}

/// Registers the counters under `rls_tracing_*` (zero while tracing is off).
pub fn register(registry: &mut Registry) {
    let counters = counters();
    register_all(
        registry,
        &[
            (
                "tracing_spans_dropped",
                "Finished spans dropped because the export queue (--tracing-queue-size) was \
                 full: the collector is down or slower than the spans come",
                &counters.dropped,
            ),
            (
                "tracing_spans_exported",
                "Spans the collector accepted",
                &counters.exported,
            ),
            (
                "tracing_spans_export_failed",
                "Spans lost in exports that failed or timed out",
                &counters.failed,
            ),
        ],
    );
}
