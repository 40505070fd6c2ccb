use clap::Parser;

use super::super::{ServeArgs, ServeSettings};
use crate::memory::cgroup::{CgroupLimit, Version};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

const MIB: u64 = 1 << 20;

fn in_container(extra: &[&str], bytes: u64) -> anyhow::Result<ServeSettings> {
    let argv = ["serve", "--config", "x.yaml"].iter().chain(extra);
    let args = Cli::try_parse_from(argv)?.serve;
    let limit = CgroupLimit {
        bytes,
        version: Version::V2,
    };
    ServeSettings::from_args_in(
        args,
        crate::environment::Origins::default(),
        &crate::environment::Environment::default(),
        Ok(Some(limit)),
    )
}

#[test]
fn a_container_limit_sets_every_budget() {
    let settings = in_container(&[], 256 * MIB).expect("valid");
    assert_eq!(settings.engine.max_cell_bytes, 72 * MIB);
    assert_eq!(settings.transport.max_buffered_request_bytes, 18 << 20);
    assert_eq!(settings.quota.max_bucket_bytes, 9 << 20);
    assert_eq!(settings.transport.max_connections, 172);
    assert_eq!(settings.transport.max_inflight_requests, 768);
    assert_eq!(settings.limits.metrics.max_detailed_series, Some(576));
}

/// Unset, `--max-cells` is what the evictable share of the cell budget holds of the smallest
/// cell (with the in-process origin's component and its share of the table's ghosts): a
/// cell's weight is then the bytes it holds, not the budget over a fixed cap, and a larger
/// limit holds more cells.
#[test]
fn the_cell_cap_follows_the_cell_budget_unless_set() {
    let ghost_share =
        (gcounter_engine::GHOST_BYTES as f64 * gcounter_engine::GHOST_ALLOCATION) as u64;
    let smallest = gcounter_engine::CELL_OVERHEAD_BYTES
        + gcounter_engine::regional::IN_PROCESS_COMPONENT_BYTES
        + ghost_share;
    for limit in [256 * MIB, 4 << 30] {
        let settings = in_container(&[], limit).expect("valid");
        let evictable = settings.engine.max_cell_bytes / 8 * 5;
        assert_eq!(settings.engine.max_cells as u64, evictable / smallest);
    }
    let four_gib = in_container(&[], 4 << 30).expect("valid").engine.max_cells;
    // More than the fixed 1,000,000 the flag defaulted to (~3.0 M).
    assert!(four_gib > 3_000_000, "{four_gib} cells in 4 GiB");
    let set = in_container(&["--max-cells", "1000"], 4 << 30).expect("valid");
    assert_eq!(set.engine.max_cells, 1_000);
    // With Redis as the origin a cell holds no component here: more cells fit.
    let redis = in_container(&["--redis-url", "redis://127.0.0.1:6379"], 4 << 30)
        .expect("valid")
        .engine
        .max_cells;
    assert!(redis > four_gib, "{redis} ≤ {four_gib}");
}

#[test]
fn a_set_flag_wins_over_its_share() {
    let settings = in_container(
        &["--max-cell-bytes", "40MiB", "--max-connections", "10"],
        256 * MIB,
    )
    .expect("valid");
    assert_eq!(settings.engine.max_cell_bytes, 40 * MIB);
    assert_eq!(settings.transport.max_connections, 10);
    // --max-memory set: the container's limit only bounds it in the log's warning.
    let settings = in_container(&["--max-memory", "1GiB"], 256 * MIB).expect("valid");
    assert!(settings.engine.max_cell_bytes > 256 * MIB);
}

#[test]
fn set_flags_over_the_limit_are_refused() {
    let error = in_container(&["--max-cell-bytes", "256MiB"], 256 * MIB)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(error.contains("--max-cell-bytes (256MiB)"), "{error}");
    assert!(error.contains("cgroup v2 memory limit 256MiB"), "{error}");
}
