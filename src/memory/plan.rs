//! How `--max-memory` is split between the pools that hold bytes.
//!
//! | pool | bounded by | weight |
//! |---|---|---|
//! | reserve | code, threads, runtime, the limits config: 32 MiB + `--max-config-bytes` | fixed |
//! | cells | `--max-cell-bytes` (replay queue, strict and penalty state included) | 8 |
//! | request bytes | `--max-buffered-request-bytes` | 2 |
//! | RLQS buckets | `--rlqs-max-bucket-bytes` (their ids, state and groups) | 1 |
//! | connections | `--max-connections` × (`--http2-connection-window` + 32 KiB) | 3 |
//! | requests in flight | `--max-inflight-requests` × 12 KiB | 1 |
//! | metric series | detailed series × 16 KiB, process-wide | 1 |
//!
//! What is left after the reserve and the budgets set by flags is shared by the other pools
//! in proportion to their weights. A flag always wins over its derived value; flags whose
//! bytes do not fit in the limit are refused. A derived pool never goes above the flag's
//! default, except cells: more memory is worth most as more counters.

use anyhow::bail;

use super::cgroup::{CgroupError, CgroupLimit, Version};
use crate::byte_size_arg::Bytes;
use crate::transport::TransportSettings;
use gcounter_engine::DEFAULT_MAX_CELL_BYTES;

/// The share of the container's limit `--max-memory` takes when it is not set, in percent.
/// The rest is the allocator's slack and fragmentation, memory the kernel charges to the
/// container (socket buffers, page cache) and the error of the estimates below.
pub const DEFAULT_PERCENT: u64 = 75;
/// Code, thread stacks, the runtime and the small allocations of everything else.
pub const RESERVE_BASE: u64 = 32 << 20;
/// One gRPC connection beside its flow-control window: hyper's and h2's state, the read
/// and write buffers, TLS's records.
pub const CONNECTION_OVERHEAD: u64 = 32 << 10;
/// One request in flight whatever it announces: its task, its HTTP/2 stream, tonic's 8 KiB
/// decode buffer.
pub const INFLIGHT_BYTES: u64 = 12 << 10;
/// One `detailed_metric` series: its counter (2 KiB), upstream's five per-label counters
/// (10 KiB) and a label value (up to 4 KiB).
pub const SERIES_BYTES: u64 = 16 << 10;

/// What RLQS buckets may hold without a memory limit: about 200,000 buckets
/// (`--rlqs-max-buckets`) of short ids.
pub const DEFAULT_RLQS_BUCKET_BYTES: u64 = 256 << 20;

/// The weights of the derived pools, in sixteenths.
const CELLS: u64 = 8;
const REQUEST_BYTES: u64 = 2;
const RLQS_BUCKETS: u64 = 1;
const CONNECTIONS: u64 = 3;
const INFLIGHT: u64 = 1;
const METRICS: u64 = 1;

/// Where the limit in force comes from (the `source` label of `rls_memory_limit_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    Flag,
    CgroupV2,
    CgroupV1,
}

impl LimitSource {
    pub fn label(self) -> &'static str {
        match self {
            Self::Flag => "flag",
            Self::CgroupV2 => "cgroup_v2",
            Self::CgroupV1 => "cgroup_v1",
        }
    }
}

/// The `--max-memory` in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    pub source: LimitSource,
    /// The container's limit it is [`DEFAULT_PERCENT`] of (cgroup sources only).
    pub container_bytes: Option<u64>,
}

impl std::fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--max-memory {}", Bytes(self.bytes))?;
        match (self.source, self.container_bytes) {
            (LimitSource::CgroupV2 | LimitSource::CgroupV1, Some(container)) => {
                let version = if self.source == LimitSource::CgroupV2 {
                    2
                } else {
                    1
                };
                write!(
                    f,
                    " ({DEFAULT_PERCENT}% of the cgroup v{version} memory limit {})",
                    Bytes(container)
                )
            }
            _ => Ok(()),
        }
    }
}

/// The limit in force: the flag's, else [`DEFAULT_PERCENT`] of the container's; with why the
/// container's limit is unknown, if it is.
pub fn limit_in_force(
    flag: Option<u64>,
    container: Result<Option<CgroupLimit>, CgroupError>,
) -> (Option<MemoryLimit>, Option<String>) {
    if let Some(bytes) = flag {
        let container_bytes = container.ok().flatten().map(|c| c.bytes);
        let source = LimitSource::Flag;
        return (
            Some(MemoryLimit {
                bytes,
                source,
                container_bytes,
            }),
            None,
        );
    }
    match container {
        Ok(None) => (None, None),
        Err(error) => (None, Some(error.to_string())),
        Ok(Some(CgroupLimit { bytes, version })) => {
            let share = u128::from(bytes) * u128::from(DEFAULT_PERCENT) / 100;
            let limit = MemoryLimit {
                bytes: u64::try_from(share).unwrap_or(u64::MAX),
                source: match version {
                    Version::V2 => LimitSource::CgroupV2,
                    Version::V1 => LimitSource::CgroupV1,
                },
                container_bytes: Some(bytes),
            };
            (Some(limit), None)
        }
    }
}

/// Where a budget's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The flag's default: no memory limit.
    Default,
    /// Its share of the memory limit.
    Derived,
    /// Set by its flag.
    Flag,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub value: u64,
    pub origin: Origin,
}

impl Budget {
    pub const fn new(value: u64, origin: Origin) -> Self {
        Self { value, origin }
    }
}

/// The settings the split reads: the budget flags (`None`: not set) and what sizes them.
#[derive(Debug, Clone)]
pub struct PlanInputs {
    pub limit: Option<MemoryLimit>,
    pub max_config_bytes: u64,
    pub max_cell_bytes: Option<u64>,
    /// The least `--max-cell-bytes` that works (1,024 cells of the largest descriptor).
    pub min_cell_bytes: u64,
    pub max_buffered_request_bytes: Option<u64>,
    pub max_request_bytes: u64,
    pub max_rlqs_bucket_bytes: Option<u64>,
    pub max_connections: Option<u64>,
    pub http2_connection_window: u64,
    pub max_inflight_requests: Option<u64>,
}

/// The budgets in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    pub limit: Option<MemoryLimit>,
    /// Why the container's limit could not be read, if it could not.
    pub unknown: Option<String>,
    pub reserve: u64,
    pub cells: Budget,
    pub request_bytes: Budget,
    pub rlqs_buckets: Budget,
    pub connections: Budget,
    pub inflight: Budget,
    /// Bytes one connection may hold: its window and [`CONNECTION_OVERHEAD`].
    pub connection_bytes: u64,
    /// `detailed_metric` series in the whole process; no cap without a limit.
    pub detailed_series: Option<u64>,
}

impl MemoryPlan {
    /// What connections and requests in flight may hold beside their buffered messages.
    pub fn transport_bytes(&self) -> u64 {
        self.connections
            .value
            .saturating_mul(self.connection_bytes)
            .saturating_add(self.inflight.value.saturating_mul(INFLIGHT_BYTES))
    }

    /// Each pool's bytes, as `rls_memory_budget_bytes{pool}` reports them; the reserve and
    /// the metric series only under a limit.
    pub fn pools(&self) -> Vec<(&'static str, u64)> {
        let mut pools = vec![
            // All of --max-cell-bytes: the cell table (`cells`) and its shares sampled at
            // scrape time (`replay_queue`, `strict_mode`, `penalty_box`, `foreign_components`).
            ("cell_bytes", self.cells.value),
            ("request_bytes", self.request_bytes.value),
            ("rlqs_buckets", self.rlqs_buckets.value),
            ("transport", self.transport_bytes()),
        ];
        if let Some(series) = self.detailed_series {
            pools.push(("metric_series", series.saturating_mul(SERIES_BYTES)));
        }
        if self.limit.is_some() {
            pools.push(("reserve", self.reserve));
        }
        pools
    }
}

/// The budgets: the flags' values where set, else their share of the limit, else (no limit)
/// the flags' defaults. Refuses flags whose bytes do not fit in the limit, and a limit too
/// small for a pool's least workable value, naming what to change.
pub fn plan(inputs: &PlanInputs) -> anyhow::Result<MemoryPlan> {
    let defaults = TransportSettings::default();
    let connection_bytes = inputs
        .http2_connection_window
        .saturating_add(CONNECTION_OVERHEAD);
    let reserve = RESERVE_BASE.saturating_add(inputs.max_config_bytes);
    let flag = |value: u64| Budget::new(value, Origin::Flag);
    let Some(limit) = inputs.limit else {
        let or_default = |set: Option<u64>, default: u64| {
            set.map_or(Budget::new(default, Origin::Default), flag)
        };
        return Ok(MemoryPlan {
            limit: None,
            unknown: None,
            reserve,
            cells: or_default(inputs.max_cell_bytes, DEFAULT_MAX_CELL_BYTES),
            request_bytes: or_default(
                inputs.max_buffered_request_bytes,
                defaults.max_buffered_request_bytes as u64,
            ),
            rlqs_buckets: or_default(inputs.max_rlqs_bucket_bytes, DEFAULT_RLQS_BUCKET_BYTES),
            connections: or_default(inputs.max_connections, defaults.max_connections as u64),
            inflight: or_default(
                inputs.max_inflight_requests,
                defaults.max_inflight_requests as u64,
            ),
            connection_bytes,
            detailed_series: None,
        });
    };

    // (flag, its bytes when set, the pool's weight)
    let pools = [
        ("--max-cell-bytes", inputs.max_cell_bytes, CELLS),
        (
            "--max-buffered-request-bytes",
            inputs.max_buffered_request_bytes,
            REQUEST_BYTES,
        ),
        (
            "--rlqs-max-bucket-bytes",
            inputs.max_rlqs_bucket_bytes,
            RLQS_BUCKETS,
        ),
        (
            "--max-connections",
            inputs
                .max_connections
                .map(|n| n.saturating_mul(connection_bytes)),
            CONNECTIONS,
        ),
        (
            "--max-inflight-requests",
            inputs
                .max_inflight_requests
                .map(|n| n.saturating_mul(INFLIGHT_BYTES)),
            INFLIGHT,
        ),
    ];
    let set: u64 = pools
        .iter()
        .filter_map(|p| p.1)
        .fold(reserve, u64::saturating_add);
    if set > limit.bytes {
        let named: Vec<String> = pools
            .iter()
            .filter_map(|(name, bytes, _)| bytes.map(|b| format!("{name} ({})", Bytes(b))))
            .collect();
        bail!(
            "{} and the {} reserve need {}, more than {limit}: lower them or raise --max-memory",
            if named.is_empty() {
                "the budgets".to_owned()
            } else {
                named.join(", ")
            },
            Bytes(reserve),
            Bytes(set)
        );
    }
    let left = limit.bytes - set;
    let weights = METRICS
        + pools
            .iter()
            .filter(|p| p.1.is_none())
            .map(|p| p.2)
            .sum::<u64>();
    let share = |weight: u64| {
        let bytes = u128::from(left) * u128::from(weight) / u128::from(weights);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    };
    let derived = |value: u64| Budget::new(value, Origin::Derived);
    let too_small = |flag: &str, pool: &str, got: String, need: String| {
        anyhow::anyhow!(
            "{limit} is too small: after the {} reserve and the budgets set by flags, {pool} \
             would get {got}, below the least that works ({need}); raise --max-memory or set \
             {flag}",
            Bytes(reserve)
        )
    };
    let cells = match inputs.max_cell_bytes {
        Some(bytes) => flag(bytes),
        None => {
            let bytes = whole_mib(share(CELLS));
            if bytes < inputs.min_cell_bytes {
                return Err(too_small(
                    "--max-cell-bytes",
                    "cells",
                    Bytes(bytes).to_string(),
                    Bytes(inputs.min_cell_bytes).to_string(),
                ));
            }
            derived(bytes)
        }
    };
    let request_bytes = match inputs.max_buffered_request_bytes {
        Some(bytes) => flag(bytes),
        None => {
            let bytes =
                whole_mib(share(REQUEST_BYTES)).min(defaults.max_buffered_request_bytes as u64);
            if bytes < inputs.max_request_bytes {
                return Err(too_small(
                    "--max-buffered-request-bytes",
                    "request bytes",
                    Bytes(bytes).to_string(),
                    format!("--max-request-bytes {}", Bytes(inputs.max_request_bytes)),
                ));
            }
            derived(bytes)
        }
    };
    let rlqs_buckets = match inputs.max_rlqs_bucket_bytes {
        Some(bytes) => flag(bytes),
        None => derived(whole_mib(share(RLQS_BUCKETS)).min(DEFAULT_RLQS_BUCKET_BYTES)),
    };
    let count =
        |set: Option<u64>, weight: u64, each: u64, default: usize, flag_name: &str| match set {
            Some(n) => Ok(flag(n)),
            None => {
                let n = (share(weight) / each.max(1)).min(default as u64);
                if n == 0 {
                    return Err(too_small(
                        flag_name,
                        flag_name.trim_start_matches("--max-"),
                        "0".to_owned(),
                        "1".to_owned(),
                    ));
                }
                Ok(derived(n))
            }
        };
    let connections = count(
        inputs.max_connections,
        CONNECTIONS,
        connection_bytes,
        defaults.max_connections,
        "--max-connections",
    )?;
    let inflight = count(
        inputs.max_inflight_requests,
        INFLIGHT,
        INFLIGHT_BYTES,
        defaults.max_inflight_requests,
        "--max-inflight-requests",
    )?;
    Ok(MemoryPlan {
        limit: Some(limit),
        unknown: None,
        reserve,
        cells,
        request_bytes,
        rlqs_buckets,
        connections,
        inflight,
        connection_bytes,
        detailed_series: Some(share(METRICS) / SERIES_BYTES),
    })
}

/// A byte budget rounded down to whole MiB (when it is at least one), so it reads plainly in
/// logs and metrics.
fn whole_mib(bytes: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    if bytes >= MIB {
        bytes / MIB * MIB
    } else {
        bytes
    }
}

#[cfg(test)]
pub(crate) mod tests;
