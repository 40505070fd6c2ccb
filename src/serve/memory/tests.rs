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
