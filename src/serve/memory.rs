//! `--max-memory` and the budgets derived from it, from `serve`'s flags; and the one line
//! that reports them at start.

use crate::byte_size_arg::Bytes;
use crate::memory::cgroup::{CgroupError, CgroupLimit};
use crate::memory::plan::{self, limit_in_force};
use crate::memory::{MemoryPlan, Origin, PlanInputs};

use super::args::ServeArgs;

/// The budgets for these flags, under `container`'s limit (as [`crate::memory::cgroup`]
/// read it). `min_cell_bytes`: the least `--max-cell-bytes` that works.
pub(super) fn memory_plan(
    args: &ServeArgs,
    container: Result<Option<CgroupLimit>, CgroupError>,
    min_cell_bytes: u64,
) -> anyhow::Result<MemoryPlan> {
    let (limit, unknown) = limit_in_force(args.engine.max_memory, container);
    let inputs = PlanInputs {
        limit,
        max_config_bytes: args.limits.read.max_config_bytes,
        max_cell_bytes: args.engine.max_cell_bytes,
        min_cell_bytes,
        max_buffered_request_bytes: args.transport.max_buffered_request_bytes.map(|n| n as u64),
        max_request_bytes: args.transport.max_request_bytes as u64,
        max_rlqs_bucket_bytes: args.quota.rlqs_max_bucket_bytes,
        max_connections: args.transport.max_connections.map(|n| n as u64),
        http2_connection_window: u64::from(args.transport.http2_connection_window),
        max_inflight_requests: args.transport.max_inflight_requests.map(|n| n as u64),
    };
    let mut plan = plan::plan(&inputs)?;
    plan.unknown = unknown;
    Ok(plan)
}

/// Logs the limit found, where it came from, and each budget with its origin.
pub(super) fn log_memory_plan(plan: &MemoryPlan) {
    let origin = |origin: Origin| match origin {
        Origin::Default => "default",
        Origin::Derived => "derived",
        Origin::Flag => "flag",
    };
    let cells = format!(
        "{} ({})",
        Bytes(plan.cells.value),
        origin(plan.cells.origin)
    );
    let request_bytes = format!(
        "{} ({})",
        Bytes(plan.request_bytes.value),
        origin(plan.request_bytes.origin)
    );
    let rlqs_buckets = format!(
        "{} ({})",
        Bytes(plan.rlqs_buckets.value),
        origin(plan.rlqs_buckets.origin)
    );
    let connections = format!(
        "{} ({})",
        plan.connections.value,
        origin(plan.connections.origin)
    );
    let inflight = format!("{} ({})", plan.inflight.value, origin(plan.inflight.origin));
    let transport = Bytes(plan.transport_bytes()).to_string();
    let series = plan
        .detailed_series
        .map_or_else(|| "no cap".to_owned(), |n| n.to_string());
    match (&plan.limit, &plan.unknown) {
        (Some(limit), _) => tracing::info!(
            max_memory = %Bytes(limit.bytes),
            source = limit.source.label(),
            container_limit = %limit.container_bytes.map_or_else(|| "none".to_owned(), |b| Bytes(b).to_string()),
            reserve = %Bytes(plan.reserve),
            max_cell_bytes = %cells,
            max_buffered_request_bytes = %request_bytes,
            rlqs_max_bucket_bytes = %rlqs_buckets,
            max_connections = %connections,
            max_inflight_requests = %inflight,
            transport = %transport,
            detailed_series = %series,
            "memory budgets derived from the memory limit"
        ),
        (None, unknown) => tracing::info!(
            max_memory = "none",
            container_limit = if unknown.is_some() { "unknown" } else { "no memory limit" },
            max_cell_bytes = %cells,
            max_buffered_request_bytes = %request_bytes,
            rlqs_max_bucket_bytes = %rlqs_buckets,
            max_connections = %connections,
            max_inflight_requests = %inflight,
            transport = %transport,
            "no memory limit: each budget is its flag's value"
        ),
    }
    if let Some(unknown) = &plan.unknown {
        tracing::warn!("the container's memory limit is unknown ({unknown}); set --max-memory");
    }
    if let Some(limit) = &plan.limit
        && let Some(container) = limit.container_bytes
        && limit.bytes > container
    {
        tracing::warn!(
            "--max-memory {} is above the container's memory limit {}: the kernel may kill the \
             process before its budgets bind",
            Bytes(limit.bytes),
            Bytes(container)
        );
    }
}

#[cfg(test)]
mod tests;
