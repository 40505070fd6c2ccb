//! `serve`'s settings, validated once from the flags ([`ServeSettings::from_args`]) and
//! grouped by concern. Every error about a flag or an upstream variable is raised here; what
//! runs afterwards takes typed values and never checks a flag again.
//!
//! The settings checked on their own (a region, a non-zero duration) are `values`; those
//! derived from several flags at once, each in its own function, are `derived`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::args::HeaderStyleArg;
use crate::admin;
use crate::byte_size_arg::Bytes;
use crate::config::{LoadOptions, ReadLimits};
use crate::environment::{Environment, Origins};
use crate::rlqs::QuotaSettings;
use crate::rls::{HeaderNames, HeaderStyle, RequestLimits, RlsSettings};
use crate::telemetry::MetricsSettings;
use crate::trace::{SpanOptions, TracingSettings};
use crate::transport::{TlsFiles, TransportSettings};
use crate::upstream_env;
use crate::xds::XdsSettings;
use gcounter_engine::global::GlobalSettings;
use gcounter_engine::regional::GuardSettings;
use gcounter_engine::{CELL_OVERHEAD_BYTES, EngineSettings};
use gcounter_redis::{RedisSettings, RedisTls, SentinelMaster};

use super::args::ServeArgs;
use super::memory::memory_plan;
use super::sources;
use crate::memory::MemoryPlan;
use crate::memory::cgroup::{CgroupError, CgroupLimit};

mod derived;
mod values;
use crate::telemetry::statsd::StatsdSettings;
use derived::{
    largest_cell_bytes, max_cells, redis_tls, region, response_time_in_milliseconds, rls_settings,
    sentinel_master, statsd_settings, transport_settings,
};
pub use values::{MAX_REGION_BYTES, NonZeroDuration, Region};

/// Where `serve` listens (the addresses [`super::bind`] binds).
#[derive(Debug, Clone)]
pub struct Addresses {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// Metrics alone (upstream's PROMETHEUS_ADDR).
    pub metrics: Option<SocketAddr>,
    /// `/rlconfig` and counter inspection (upstream's DEBUG_HOST:DEBUG_PORT).
    pub debug: Option<SocketAddr>,
    /// Counter inspection on the HTTP listener too.
    pub inspection_on_http: bool,
    /// Descriptor values shown as sent by counter inspection (else hashed).
    pub inspection_show_values: bool,
}

/// Where the limits come from: a file or directory (watched), or an xDS server (pushed).
#[derive(Debug, Clone)]
pub enum ConfigSource {
    File(PathBuf),
    Xds(Box<XdsSettings>),
}

/// The limits config and what reports on it.
#[derive(Debug, Clone)]
pub struct LimitsSettings {
    /// Where the limits come from.
    pub source: ConfigSource,
    pub load: LoadOptions,
    pub metrics: MetricsSettings,
    /// In (0, 1].
    pub near_limit_ratio: f64,
    /// `/healthcheck` fails while no domain is loaded.
    pub healthy_with_at_least_one_config_loaded: bool,
    /// The path of the metrics on the metrics-only listener (checked).
    pub metrics_path: String,
}

/// The engine's bounds and cadence (its freshness comes from [`Regional`]).
#[derive(Debug, Clone)]
pub struct EngineGroup {
    pub max_cells: usize,
    pub max_cell_bytes: u64,
    pub largest_cell_bytes: u64,
    pub replay_interval: NonZeroDuration,
    pub max_pending_replay: usize,
    pub final_replay_timeout: NonZeroDuration,
    pub repeated_warning_interval: NonZeroDuration,
    /// `--windows`.
    pub windows: gcounter_engine::Windows,
    /// `--count-denied`.
    pub count_denied: bool,
    /// `--clock-skew`.
    pub clock_skew: Duration,
}

impl EngineGroup {
    pub fn engine_settings(&self, freshness: Option<Duration>) -> EngineSettings {
        EngineSettings {
            max_cells: self.max_cells,
            max_cell_bytes: self.max_cell_bytes,
            largest_cell_bytes: self.largest_cell_bytes,
            replay_interval: self.replay_interval.get(),
            max_pending_replay: self.max_pending_replay,
            freshness,
            final_replay_timeout: self.final_replay_timeout.get(),
            repeated_warning_interval: self.repeated_warning_interval.get(),
            windows: self.windows,
            count_denied: self.count_denied,
            clock_skew: self.clock_skew,
            ..EngineSettings::default()
        }
    }
}

/// The regional origin: this process alone, or a Redis (node or cluster) behind the guard.
#[derive(Clone)]
pub enum Regional {
    /// The embedded default: this process is the whole region.
    InProcess,
    /// Boxed: its settings (TLS files, Sentinel) are large and read once.
    Redis(Box<RedisGroup>),
}

#[derive(Clone)]
pub struct RedisGroup {
    pub redis: RedisSettings,
    pub read_timeout: NonZeroDuration,
    pub replay_timeout: NonZeroDuration,
    /// How long a count read from Redis is trusted.
    pub freshness: NonZeroDuration,
}

impl RedisGroup {
    pub fn guard(&self) -> GuardSettings {
        GuardSettings {
            read_timeout: self.read_timeout.get(),
            replay_timeout: self.replay_timeout.get(),
            ..GuardSettings::default()
        }
    }
}

impl fmt::Debug for Regional {
    // RedisSettings holds passwords in its URLs: not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InProcess => f.write_str("InProcess"),
            Self::Redis(redis) => write!(f, "Redis({} node(s))", redis.redis.urls.len()),
        }
    }
}

/// The global counters, when a database is configured.
#[derive(Clone)]
pub struct GlobalGroup {
    pub database_url: String,
    pub settings: GlobalSettings,
    /// `--global-sync-overlap` (`SqlSettings::sync_overlap`).
    pub sync_overlap: Duration,
}

impl fmt::Debug for GlobalGroup {
    // The URL may hold a password: not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalGroup")
            .field("settings", &self.settings)
            .field("sync_overlap", &self.sync_overlap)
            .finish_non_exhaustive()
    }
}

/// TLS on the gRPC listener.
#[derive(Debug, Clone)]
pub struct TlsGroup {
    pub files: TlsFiles,
    pub reload_interval: NonZeroDuration,
}

/// Everything `serve` runs with, validated.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub addresses: Addresses,
    pub limits: LimitsSettings,
    pub engine: EngineGroup,
    pub regional: Regional,
    /// Names this process's components in the global counters (`local` without them).
    pub region: Region,
    pub global: Option<GlobalGroup>,
    /// How requests are answered: modes, request bounds, response headers.
    pub rls: RlsSettings,
    pub tls: Option<TlsGroup>,
    /// Checked by [`TransportSettings::validate`].
    pub transport: TransportSettings,
    /// On shutdown, how long in-flight requests may take.
    pub drain_timeout: NonZeroDuration,
    /// What the start log says about where the settings came from.
    pub report: StartReport,
    /// `--max-memory` and the budgets in force (already applied to `engine` and `transport`).
    pub memory: MemoryPlan,
    /// OpenTelemetry tracing; `None`: off.
    pub tracing: Option<TracingSettings>,
    /// The RLQS service's answers and bounds.
    pub quota: QuotaSettings,
    /// Counts carried over from the replaced service's Redis; `None`: off.
    pub carry_over: Option<crate::carry_over::CarryOverGroup>,
    /// Upstream's stats pushed over statsd or DogStatsD; `None`: off.
    pub statsd: Option<StatsdSettings>,
}

/// The start log's account of the settings: one line per setting that differs from its
/// default (value and source, secrets redacted), the warnings about contradicting sources,
/// and the switches in effect.
#[derive(Debug, Clone, Default)]
pub struct StartReport {
    pub settings: Vec<String>,
    pub warnings: Vec<String>,
    pub switches: String,
}

impl StartReport {
    pub fn log(&self) {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
        for line in &self.settings {
            tracing::info!("setting {line}");
        }
        tracing::info!("switches: {}", self.switches);
    }
}

/// One line per setting that differs from its default, with its source: our flags' and
/// variables' (and upstream's they were set from), then tracing's from upstream's variables.
fn start_lines(
    origins: &Origins,
    args: &ServeArgs,
    tracing: &Option<TracingSettings>,
    env: &Environment,
) -> Vec<String> {
    let mut lines = origins.lines();
    if tracing.is_some() {
        lines.extend(crate::trace::upstream_lines(&args.telemetry, env));
    }
    lines
}

/// `--max-cell-bytes` must hold at least this many cells of the largest descriptor: below
/// it the table's shards could not admit such a cell at all.
const MIN_LARGEST_CELLS_IN_BUDGET: u64 = 1_024;

/// Above these, a count is a typo, not a plan: the byte cap would bind long before.
const MAX_CELLS_CEILING: usize = 1_000_000_000;
const MAX_PENDING_REPLAY_CEILING: usize = 100_000_000;

impl ServeSettings {
    /// Validate the flags, with envoyproxy/ratelimit's variables read from `env` where ours
    /// are unset (`origins`: where clap found each of ours; see [`crate::environment`]).
    ///
    /// The container's memory limit is read from this process's cgroup.
    pub fn from_args(args: ServeArgs, origins: Origins, env: &Environment) -> anyhow::Result<Self> {
        Self::from_args_in(args, origins, env, crate::memory::cgroup::container_limit())
    }

    /// [`Self::from_args`] in a container whose memory limit is `container`.
    pub fn from_args_in(
        mut args: ServeArgs,
        mut origins: Origins,
        env: &Environment,
        container: Result<Option<CgroupLimit>, CgroupError>,
    ) -> anyhow::Result<Self> {
        let mut warnings = sources::apply_switches(&mut args, &mut origins, env)?;
        let region = region(&args)?;
        if !(args.telemetry.near_limit_ratio > 0.0 && args.telemetry.near_limit_ratio <= 1.0) {
            anyhow::bail!(
                "--near-limit-ratio (NEAR_LIMIT_RATIO) must be in (0, 1], got {}",
                args.telemetry.near_limit_ratio
            );
        }
        if !(0.0..=1.0).contains(&args.global.publish_floor) {
            anyhow::bail!(
                "--publish-floor must be between 0 and 1, got {}",
                args.global.publish_floor
            );
        }
        if !(0.0..=1.0).contains(&args.global.global_onset_fraction) {
            anyhow::bail!(
                "--global-onset-fraction must be between 0 and 1, got {}",
                args.global.global_onset_fraction
            );
        }
        if !(0.0..=1_000.0).contains(&args.global.global_contended_overload) {
            anyhow::bail!(
                "--global-contended-overload must be between 0 and 1000, got {}",
                args.global.global_contended_overload
            );
        }
        if let Some(max_cells) = args.engine.max_cells
            && !(1..=MAX_CELLS_CEILING).contains(&max_cells)
        {
            anyhow::bail!("--max-cells must be 1 to {MAX_CELLS_CEILING}, got {max_cells}");
        }
        if !(1..=MAX_PENDING_REPLAY_CEILING).contains(&args.engine.max_pending_replay) {
            anyhow::bail!(
                "--max-pending-replay must be 1 to {MAX_PENDING_REPLAY_CEILING}, got {}",
                args.engine.max_pending_replay
            );
        }
        if args.transport.max_descriptor_bytes == 0 {
            anyhow::bail!("--max-descriptor-bytes must be at least 1 byte");
        }
        let defaults = HeaderNames::default();
        let renamed = args.limits.limit_header != defaults.limit
            || args.limits.remaining_header != defaults.remaining
            || args.limits.reset_header != defaults.reset;
        if args.limits.response_header_style == HeaderStyleArg::Structured && renamed {
            anyhow::bail!(
                "--limit-header, --remaining-header and --reset-header (LIMIT_*_HEADER) name the \
                 draft03 headers; --response-header-style structured writes RateLimit-Policy \
                 and RateLimit: drop one or the other"
            );
        }
        let tracing = crate::trace::resolve(&args.telemetry, env)?;
        let largest_cell_bytes = largest_cell_bytes(&args);
        let floor = MIN_LARGEST_CELLS_IN_BUDGET.saturating_mul(largest_cell_bytes);
        let memory = memory_plan(&args, container, floor)?;
        if memory.cells.value < floor {
            anyhow::bail!(
                "--max-cell-bytes {} is too small: it must hold at least {MIN_LARGEST_CELLS_IN_BUDGET} \
                 cells of the largest descriptor (--max-descriptor-bytes {}), i.e. {}",
                Bytes(memory.cells.value),
                Bytes(args.transport.max_descriptor_bytes),
                Bytes(floor)
            );
        }
        let source = match (XdsSettings::from_args(&args.xds)?, &args.limits.config) {
            (Some(xds), _) => ConfigSource::Xds(Box::new(xds)),
            (None, Some(path)) => ConfigSource::File(path.clone()),
            (None, None) => anyhow::bail!("--config (or --config-xds-server) is required"),
        };
        let transport = transport_settings(&args, &memory);
        transport.validate()?;
        if !admin::valid_metrics_path(&args.listeners.metrics_path) {
            anyhow::bail!(
                "--metrics-path (PROMETHEUS_PATH) must start with / and hold only letters, \
                 digits and /_.- (at most 256 bytes), got {:?}",
                args.listeners.metrics_path
            );
        }
        let tls = sources::grpc_tls_files(&args, &mut origins, env, &mut warnings)?
            .map(|files| {
                Ok::<_, anyhow::Error>(TlsGroup {
                    files,
                    reload_interval: NonZeroDuration::flag(
                        "grpc-tls-reload-interval",
                        args.tls.grpc_tls_reload_interval,
                    )?,
                })
            })
            .transpose()?;
        let healthy_with_at_least_one_config_loaded =
            args.limits.healthy_with_at_least_one_config_loaded;

        if args.redis.redis_url.is_empty()
            && let Some(flag) = [
                (
                    "redis-sentinel-master",
                    args.redis.redis_sentinel_master.is_some(),
                ),
                ("redis-tls-ca", args.redis.redis_tls_ca.is_some()),
                ("redis-tls-cert", args.redis.redis_tls_cert.is_some()),
                (
                    "redis-tls-skip-hostname-verification",
                    args.redis.redis_tls_skip_hostname_verification,
                ),
            ]
            .into_iter()
            .find_map(|(flag, set)| set.then_some(flag))
        {
            anyhow::bail!("--{flag} needs --redis-url (without it the region is this process)");
        }
        let regional = if args.redis.redis_url.is_empty() {
            Regional::InProcess
        } else {
            let redis = RedisSettings {
                urls: args.redis.redis_url.clone(),
                cluster: args.redis.redis_cluster,
                key_prefix: args.redis.redis_prefix.clone(),
                sentinel: sentinel_master(&args),
                tls: redis_tls(&args)?,
            };
            redis
                .check()
                .context("invalid --redis-url / --redis-prefix")?;
            Regional::Redis(Box::new(RedisGroup {
                redis,
                read_timeout: NonZeroDuration::flag(
                    "redis-read-timeout",
                    args.redis.redis_read_timeout,
                )?,
                replay_timeout: NonZeroDuration::flag(
                    "redis-replay-timeout",
                    args.redis.redis_replay_timeout,
                )?,
                freshness: NonZeroDuration::flag("freshness", args.redis.freshness)?,
            }))
        };
        if let Some(url) = &args.global.database_url {
            gcounter_sql::check_url(url).context("invalid --database-url")?;
        }
        let global = args
            .global
            .database_url
            .clone()
            .map(|database_url| GlobalGroup {
                database_url,
                sync_overlap: args.global.global_sync_overlap,
                settings: GlobalSettings {
                    migrate: args.global.migrate,
                    repeated_warning_interval: args.telemetry.repeated_warning_interval,
                    flush_interval: args.global.global_flush_interval,
                    sync_interval: args.global.global_sync_interval,
                    publish_floor: args.global.publish_floor,
                    contended_speedup: args.global.global_contended_speedup,
                    contended_overload: args.global.global_contended_overload,
                    onset_fraction: args.global.global_onset_fraction,
                    onset_min_hits: args.global.global_onset_min_hits,
                    onset_interval: args.global.global_onset_interval,
                    onset_urgent_divisor: args.global.global_onset_urgent_divisor,
                    timeout: args.global.global_timeout,
                    rights_timeout: args.global.global_rights_timeout,
                    cleanup_interval: args.global.global_cleanup_interval,
                    ..GlobalSettings::default()
                },
            });
        let sole_process = matches!(regional, Regional::InProcess) && global.is_none();
        let quota = QuotaSettings::from_args(&args.quota, memory.rlqs_buckets.value, sole_process);
        let statsd = statsd_settings(&args, env)?;
        let carry_over = crate::carry_over::CarryOverGroup::from_flags(
            args.redis.carry_over_from_redis.as_deref(),
            args.redis.carry_over_per_second_redis.as_deref(),
            &args.redis.carry_over_key_prefix,
            args.redis.carry_over_timeout,
            args.redis.carry_over_max_reads_per_second,
        )?;
        Ok(Self {
            carry_over,
            statsd,
            quota,
            addresses: Addresses {
                grpc: args.listeners.grpc_addr,
                http: args.listeners.http_addr,
                metrics: args.listeners.metrics_addr,
                debug: args.listeners.debug_addr.0,
                inspection_on_http: args.listeners.inspection_on_http_addr,
                inspection_show_values: args.listeners.inspection_show_values,
            },
            limits: LimitsSettings {
                source,
                load: LoadOptions {
                    limits: ReadLimits {
                        max_bytes: args.limits.read.max_config_bytes,
                        ..ReadLimits::default()
                    },
                    ignore_dot_files: args.limits.read.ignore_dot_files,
                    merge_domains: args.limits.read.merge_domain_config,
                    // The margin binds only where decisions spend rights: one process alone
                    // decides `never_above` exactly, whatever its clock.
                    never_above_clock_skew: if matches!(regional, Regional::InProcess)
                        && global.is_none()
                    {
                        Duration::ZERO
                    } else {
                        args.limits.clock_skew
                    },
                },
                metrics: MetricsSettings {
                    max_series_per_rule: args.telemetry.max_metric_series_per_rule,
                    max_detailed_series: memory.detailed_series,
                    stall_probe_interval: args.telemetry.stall_probe_interval,
                    response_time_in_milliseconds: response_time_in_milliseconds(env)?,
                },
                near_limit_ratio: args.telemetry.near_limit_ratio,
                healthy_with_at_least_one_config_loaded,
                metrics_path: args.listeners.metrics_path.clone(),
            },
            engine: EngineGroup {
                max_cells: max_cells(
                    args.engine.max_cells,
                    memory.cells.value,
                    args.redis.redis_url.is_empty(),
                ),
                max_cell_bytes: memory.cells.value,
                largest_cell_bytes,
                replay_interval: NonZeroDuration::flag(
                    "replay-interval",
                    args.engine.replay_interval,
                )?,
                max_pending_replay: args.engine.max_pending_replay,
                final_replay_timeout: NonZeroDuration::flag(
                    "final-replay-timeout",
                    args.engine.final_replay_timeout,
                )?,
                repeated_warning_interval: NonZeroDuration::flag(
                    "repeated-warning-interval",
                    args.telemetry.repeated_warning_interval,
                )?,
                windows: args.limits.windows.into(),
                count_denied: args.limits.count_denied,
                clock_skew: args.limits.clock_skew,
            },
            regional,
            region,
            global,
            rls: RlsSettings {
                tracing: tracing.as_ref().map(|t| SpanOptions {
                    descriptor_values: t.descriptor_values,
                }),
                ..rls_settings(&args)
            },
            tls,
            transport,
            drain_timeout: NonZeroDuration::flag("drain-timeout", args.transport.drain_timeout)?,
            report: StartReport {
                settings: start_lines(&origins, &args, &tracing, env),
                warnings,
                switches: sources::switches_line(&args),
            },
            memory,
            tracing,
        })
    }
}
