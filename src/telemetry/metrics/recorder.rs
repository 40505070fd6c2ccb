//! The engine's and the global counters' reports ([`Recorder`]), each into its series.

use gcounter_engine::recorder::{CarryOutcome, FlushRecord, OriginOp, Recorder};

use super::*;

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

    fn carry_over(&self, outcome: CarryOutcome) {
        self.carry_over
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
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
