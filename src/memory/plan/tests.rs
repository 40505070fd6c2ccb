use super::*;

const MIB: u64 = 1 << 20;

/// The plan's inputs at the defaults, under `limit` (also the telemetry tests' plan).
pub(crate) fn inputs(limit: Option<MemoryLimit>) -> PlanInputs {
    PlanInputs {
        limit,
        max_config_bytes: 16 * MIB,
        max_cell_bytes: None,
        min_cell_bytes: 18 * MIB,
        max_buffered_request_bytes: None,
        max_request_bytes: 256 << 10,
        max_rlqs_bucket_bytes: None,
        max_connections: None,
        http2_connection_window: 128 << 10,
        max_inflight_requests: None,
    }
}

fn cgroup(bytes: u64) -> Option<MemoryLimit> {
    limit_in_force(
        None,
        Ok(Some(CgroupLimit {
            bytes,
            version: Version::V1,
        })),
    )
    .0
}

/// A `--max-memory` of `bytes`, no container limit.
pub(crate) fn flag(bytes: u64) -> Option<MemoryLimit> {
    limit_in_force(Some(bytes), Ok(None)).0
}

#[test]
fn no_limit_keeps_the_defaults() {
    let plan = plan(&inputs(None)).expect("valid");
    assert_eq!(plan.cells.value, 256 * MIB);
    assert_eq!(plan.cells.origin, Origin::Default);
    assert_eq!(plan.request_bytes.value, 64 * MIB);
    assert_eq!(plan.rlqs_buckets.value, 256 * MIB);
    assert_eq!(plan.connections.value, 1_024);
    assert_eq!(plan.inflight.value, 4_096);
    assert_eq!(plan.detailed_series, None);
    let pools: Vec<&str> = plan.pools().iter().map(|p| p.0).collect();
    assert_eq!(
        pools,
        ["cell_bytes", "request_bytes", "rlqs_buckets", "transport"]
    );
}

#[test]
fn a_256mib_container_is_split_by_the_weights() {
    let limit = cgroup(256 * MIB);
    assert_eq!(limit.map(|l| l.bytes), Some(192 * MIB));
    let plan = plan(&inputs(limit)).expect("valid");
    // 192 MiB - 48 MiB reserve = 144 MiB, in sixteenths.
    assert_eq!(plan.reserve, 48 * MIB);
    assert_eq!(plan.cells, Budget::new(72 * MIB, Origin::Derived));
    assert_eq!(plan.request_bytes.value, 18 * MIB);
    assert_eq!(plan.rlqs_buckets, Budget::new(9 * MIB, Origin::Derived));
    assert_eq!(plan.connections.value, 27 * MIB / (160 << 10));
    assert_eq!(plan.inflight.value, 9 * MIB / (12 << 10));
    assert_eq!(plan.detailed_series, Some(9 * MIB / (16 << 10)));
    let total: u64 = plan.pools().iter().map(|p| p.1).sum();
    assert!(total <= 192 * MIB, "{total}");
}

#[test]
fn the_shipped_512mi_limit() {
    let plan = plan(&inputs(cgroup(512 * MIB))).expect("valid");
    assert_eq!(plan.cells.value, 168 * MIB);
    assert_eq!(plan.request_bytes.value, 42 * MIB);
    assert_eq!(plan.rlqs_buckets.value, 21 * MIB);
    assert_eq!(plan.connections.value, 403);
    assert_eq!(plan.inflight.value, 1_792);
    assert_eq!(plan.detailed_series, Some(1_344));
}

#[test]
fn derived_pools_stop_at_the_defaults_but_cells_grow() {
    let plan = plan(&inputs(flag(8 << 30))).expect("valid");
    assert_eq!(plan.request_bytes.value, 64 * MIB);
    assert_eq!(plan.rlqs_buckets.value, 256 * MIB);
    assert_eq!(plan.connections.value, 1_024);
    assert_eq!(plan.inflight.value, 4_096);
    assert!(plan.cells.value > 4_000 * MIB, "{:?}", plan.cells);
}

#[test]
fn a_flag_wins_and_the_others_share_the_rest() {
    let mut set = inputs(flag(192 * MIB));
    set.max_cell_bytes = Some(32 * MIB);
    let plan = plan(&set).expect("valid");
    assert_eq!(plan.cells, Budget::new(32 * MIB, Origin::Flag));
    // 192 - 48 - 32 = 112 MiB over the weights 2 + 1 + 3 + 1 + 1.
    assert_eq!(plan.request_bytes.value, 28 * MIB);
    assert_eq!(plan.rlqs_buckets.value, 14 * MIB);
    assert_eq!(plan.inflight.value, 14 * MIB / (12 << 10));
    assert_eq!(plan.detailed_series, Some(14 * MIB / (16 << 10)));
}

#[test]
fn flags_that_do_not_fit_are_refused() {
    let mut set = inputs(cgroup(256 * MIB));
    set.max_cell_bytes = Some(128 * MIB);
    set.max_buffered_request_bytes = Some(32 * MIB);
    let error = plan(&set).expect_err("over").to_string();
    for needle in [
        "--max-cell-bytes (128MiB)",
        "--max-buffered-request-bytes (32MiB)",
        "48MiB reserve",
        "208MiB",
        "--max-memory 192MiB (75% of the cgroup v1 memory limit 256MiB)",
    ] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

#[test]
fn a_limit_too_small_for_the_cells_names_what_to_change() {
    let error = plan(&inputs(flag(64 * MIB)))
        .expect_err("small")
        .to_string();
    assert!(error.contains("--max-memory 64MiB is too small"), "{error}");
    assert!(error.contains("--max-cell-bytes"), "{error}");
    // The flag's least value works with the default descriptor size.
    assert!(plan(&inputs(flag(128 * MIB))).is_ok());
}

#[test]
fn an_unreadable_cgroup_is_unknown_not_an_error() {
    let error = CgroupError::Parse {
        path: "/sys/fs/cgroup/memory.max".into(),
        text: "x".into(),
    };
    let (limit, unknown) = limit_in_force(None, Err(error));
    assert_eq!(limit, None);
    assert!(unknown.is_some_and(|u| u.contains("memory.max")));
    let (limit, _) = limit_in_force(
        Some(MIB << 10),
        Ok(Some(CgroupLimit {
            bytes: 256 * MIB,
            version: Version::V2,
        })),
    );
    assert_eq!(limit.map(|l| l.source), Some(LimitSource::Flag));
}
