//! The in-memory engine: its bounds, its replay cadence, its threads.

use std::time::Duration;

use crate::byte_size_arg::{ByteSizeRange, kib, mib};
use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::ENGINE)]
pub struct EngineArgs {
    /// Cap on window cells held in memory [range: 1 to 1000000000]
    ///
    /// Default: as many as --max-cell-bytes holds (its evictable share over the bytes of the
    /// smallest cell, the embedded origin's part of it and its share of the slots that
    /// remember evicted keys included). The least recently used are evicted first. Cells
    /// protected from eviction (at or near their limit) come on top, bounded by
    /// --max-cell-bytes.
    #[arg(long, env = "RLS_MAX_CELLS")]
    pub max_cells: Option<usize>,
    /// Memory of the whole process; the byte budgets below are derived from it [range: 128MiB to 1PiB]
    ///
    /// Default: 75% of the container's memory limit (cgroup v2 or v1); without one, no limit
    /// and each budget keeps its own default. What is left after a reserve (32MiB +
    /// --max-config-bytes) goes 8/16 to cells, 2/16 to --max-buffered-request-bytes, 1/16 to
    /// --rlqs-max-bucket-bytes, 3/16 to --max-connections, 1/16 to --max-inflight-requests,
    /// 1/16 to metric series. A budget flag that is set wins; set ones that do not fit are
    /// refused.
    #[arg(long, env = "RLS_MAX_MEMORY", value_parser = ByteSizeRange::new(mib(128), 1 << 50).parser::<u64>())]
    pub max_memory: Option<u64>,
    /// Cap on the bytes of window cells and what is keyed by them (replay queue, strict mode)
    ///
    /// Default: 256MiB, or 8/16 of what --max-memory leaves. Counters at or near their limit
    /// are evicted last. It must hold at least 1024 cells of the largest descriptor: about
    /// 18MiB with the default --max-descriptor-bytes.
    #[arg(long, env = "RLS_MAX_CELL_BYTES", value_parser = ByteSizeRange::new(kib(1), u64::MAX).parser::<u64>())]
    pub max_cell_bytes: Option<u64>,
    /// Cap on cells waiting for replay [range: 1 to 100000000]
    ///
    /// Overflow stays in memory and is counted.
    #[arg(long, env = "RLS_MAX_PENDING_REPLAY", default_value_t = 100_000)]
    pub max_pending_replay: usize,
    /// How often accepted work is replayed to the regional origin [range: 1ms to 24h]
    ///
    /// Also when a batch fills.
    #[arg(long, env = "RLS_REPLAY_INTERVAL", default_value = "100ms", value_parser = DurationRange::new(millis(1), hours(24)).parser())]
    pub replay_interval: Duration,
    /// On shutdown, after the drain: how long the final replay may try Redis [range: 1ms to 1h]
    ///
    /// Through an open circuit breaker, retrying after failures, before the process gives up
    /// on it.
    #[arg(long, env = "RLS_FINAL_REPLAY_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub final_replay_timeout: Duration,
    /// Threads answering requests (default: the cores this process may run on) [range: 1 to 65535]
    ///
    /// One worker runs a current-thread runtime, the fastest on one core; more, a multi-thread
    /// runtime.
    #[arg(long, env = "RLS_WORKERS", value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,
}
