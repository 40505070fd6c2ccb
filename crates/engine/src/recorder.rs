//! The engine's metrics seam: what the engine and the global counters report, and nothing of
//! how it is exported.
//!
//! The server implements [`Recorder`] on its Prometheus registry (`telemetry::Metrics`);
//! tests and embedders that want no metrics pass [`NoRecorder`]. Keeping the seam this narrow
//! is what lets the engine crate carry no Prometheus types: a layer owns its instruments, the
//! engine only says what happened.

use std::time::Duration;

/// Why the engine talked to the regional origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OriginOp {
    /// First use of a cell in this process.
    Cold,
    /// Past the cell's freshness deadline.
    Stale,
    /// The counter is in strict mode after a denial.
    Strict,
    /// Batched accepted work.
    Replay,
    /// Rights of a `never_above` counter taken or given back (`regional::rights`).
    Rights,
}

impl OriginOp {
    /// The label value the server exports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cold => "cold",
            Self::Stale => "stale",
            Self::Strict => "strict",
            Self::Replay => "replay",
            Self::Rights => "rights",
        }
    }
}

/// Where a decision's counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionSource {
    /// Memory only.
    Local,
    /// After a synchronous read of the regional origin.
    Origin,
}

impl DecisionSource {
    /// The label value the server exports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Origin => "origin",
        }
    }
}

/// What became of one cold cell's carry-over from the limiter this service replaced
/// ([`CarryOverOrigin`](crate::regional::CarryOverOrigin)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CarryOutcome {
    /// A count was read and seeded (or the region had seeded one already).
    Seeded,
    /// The replaced limiter holds no count for the cell.
    Absent,
    /// Past the cap on reads per second: the cell starts without a carried count.
    OverCap,
    /// The read failed or timed out: the cell starts without a carried count.
    Failed,
}

impl CarryOutcome {
    /// The label value the server exports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seeded => "seeded",
            Self::Absent => "absent",
            Self::OverCap => "over_cap",
            Self::Failed => "failed",
        }
    }
}

/// One global flush as the recorder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushRecord {
    /// Rows committed.
    pub written: u64,
    /// Chunk statements that failed (their rows stay pending).
    pub failed_chunks: u64,
    /// Rows the store cannot hold (too long for a column); they stay local.
    pub skipped: u64,
    pub took: Duration,
}

/// What the engine and the global counters report. Every method is called off the hot path
/// but [`decision_source`](Self::decision_source), which is called once per decision and so
/// must not block or allocate.
pub trait Recorder: Send + Sync + 'static {
    /// A decision was taken from memory or after an origin read.
    fn decision_source(&self, source: DecisionSource);
    /// An origin call ended (`ok` false for any error, a timeout or an open circuit).
    fn origin_call(&self, op: OriginOp, ok: bool, took: Duration);
    /// One replay round trip carried `cells` cells.
    fn replay_batch(&self, cells: usize);
    /// The replay queue was full: a cell was marked overflowed instead of queued.
    fn replay_overflow(&self);
    /// A refund gave back `refunded` and could not give back `dropped` (more than this
    /// process consumed in the current and previous cells: the refund rule). Default: ignored.
    fn refund(&self, refunded: u64, dropped: u64) {
        let _ = (refunded, dropped);
    }
    /// A cold cell's carry-over ended. Default: ignored.
    fn carry_over(&self, outcome: CarryOutcome) {
        let _ = outcome;
    }
    /// One global flush ended.
    fn global_flush(&self, flush: FlushRecord);
    /// One global sync succeeded: rows applied, cells it created, how long it took.
    fn global_sync(&self, rows: u64, created: u64, took: Duration);
    /// One global sync failed.
    fn global_sync_failed(&self);
    /// One cleanup of expired global rows ended.
    fn global_cleanup(&self, took: Duration);
    /// This process's wall clock minus the database's, in seconds, as the sync last measured
    /// it. Default: ignored.
    fn global_clock_offset(&self, seconds: f64) {
        let _ = seconds;
    }
}

/// Records nothing: for tests and embedders without metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRecorder;

impl Recorder for NoRecorder {
    fn decision_source(&self, _: DecisionSource) {}
    fn origin_call(&self, _: OriginOp, _: bool, _: Duration) {}
    fn replay_batch(&self, _: usize) {}
    fn replay_overflow(&self) {}
    fn global_flush(&self, _: FlushRecord) {}
    fn global_sync(&self, _: u64, _: u64, _: Duration) {}
    fn global_sync_failed(&self) {}
    fn global_cleanup(&self, _: Duration) {}
}
