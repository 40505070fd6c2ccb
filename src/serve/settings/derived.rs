//! The settings [`ServeSettings::from_args`](super::ServeSettings::from_args) derives from
//! several flags at once, each in a function of its own: the region, the transport's bounds,
//! the RLS answer's settings, Redis's Sentinel master and TLS files, and upstream's
//! response-time unit.

use super::*;

/// Upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: `ratelimit_service_response_time_seconds`
/// in milliseconds. As upstream, ignored when `PROMETHEUS_MAPPER_YAML` is set (upstream then
/// takes the unit from that mapping, which is not applied here: seconds).
pub(super) fn response_time_in_milliseconds(env: &Environment) -> anyhow::Result<bool> {
    let mapper = env
        .get("PROMETHEUS_MAPPER_YAML")
        .is_some_and(|mapper| !mapper.is_empty());
    let millis = upstream_env::boolean(env, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS")?;
    Ok(!mapper && millis.unwrap_or(false))
}

/// The region: required with a database, at most the column's size.
pub(super) fn region(args: &ServeArgs) -> anyhow::Result<Region> {
    match (&args.global.region, &args.global.database_url) {
        (Some(region), _) => Region::new(region.as_str()),
        (None, Some(_)) => anyhow::bail!(
            "--region (RLS_REGION) is required with --database-url: it names this region's \
             components in the global counters"
        ),
        (None, None) => Ok(Region::local()),
    }
}

/// The weight of the largest cell a request can make: its descriptor's keys and values,
/// their length prefixes (at most 6 bytes per key and per value), the override prefix and
/// the domain (bounded by the config), and a cell's fixed overhead.
pub(super) fn largest_cell_bytes(args: &ServeArgs) -> u64 {
    let entries = RequestLimits::default().max_entries as u64;
    CELL_OVERHEAD_BYTES
        .saturating_add(args.transport.max_descriptor_bytes)
        .saturating_add(entries * 12 + 1_024)
}

/// `--max-cells`, else as many cells as `cell_bytes` (`--max-cell-bytes`) holds: its evictable
/// share over the bytes of the smallest cell (with the in-process origin's component when it
/// is the origin) and its share of the table's ghosts. A fixed default beside a larger byte
/// budget weighed each cell at the budget over the cap, more than it holds: the budget
/// counted up to twice the memory the cells took, and `--max-memory` bought no more cells.
pub(super) fn max_cells(flag: Option<usize>, cell_bytes: u64, embedded: bool) -> usize {
    if let Some(max_cells) = flag {
        return max_cells;
    }
    let origin = if embedded {
        gcounter_engine::regional::IN_PROCESS_COMPONENT_BYTES
    } else {
        0
    };
    let cells = gcounter_engine::CellBudget::new(usize::MAX, cell_bytes)
        .with_origin(origin, false)
        .evictable_cells();
    usize::try_from(cells)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CELLS_CEILING)
}

/// The transport's bounds: the flags, with the budgets of `memory` in force.
pub(super) fn transport_settings(args: &ServeArgs, memory: &MemoryPlan) -> TransportSettings {
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    TransportSettings {
        max_connections: count(memory.connections.value),
        max_admin_connections: args.transport.max_admin_connections,
        preface_timeout: args.transport.preface_timeout,
        admin_header_timeout: args.transport.admin_header_timeout,
        max_accept_backoff: args.transport.max_accept_backoff,
        max_concurrent_streams: args.transport.max_concurrent_streams,
        max_request_bytes: args.transport.max_request_bytes,
        max_buffered_request_bytes: count(memory.request_bytes.value),
        max_inflight_requests: count(memory.inflight.value),
        request_timeout: args.transport.request_timeout,
        http2_stream_window: args.transport.http2_stream_window,
        http2_connection_window: args.transport.http2_connection_window,
        http2_keepalive_interval: args.transport.http2_keepalive_interval,
        http2_keepalive_timeout: args.transport.http2_keepalive_timeout,
        max_connection_age: args.transport.max_connection_age,
        max_connection_age_grace: args.transport.max_connection_age_grace,
        ..TransportSettings::default()
    }
}

pub(super) fn rls_settings(args: &ServeArgs) -> RlsSettings {
    RlsSettings {
        request_limits: RequestLimits {
            max_descriptor_bytes: usize::try_from(args.transport.max_descriptor_bytes)
                .unwrap_or(usize::MAX),
            ..RequestLimits::default()
        },
        shadow_mode: args.limits.shadow_mode,
        quota_mode: args.limits.quota_mode,
        response_dynamic_metadata: args.limits.response_dynamic_metadata,
        all_or_nothing: args.limits.all_or_nothing,
        response_headers: args.limits.response_headers.then(|| HeaderNames {
            limit: args.limits.limit_header.clone(),
            remaining: args.limits.remaining_header.clone(),
            reset: args.limits.reset_header.clone(),
        }),
        rule_header: args.limits.rule_header.clone(),
        header_style: match args.limits.response_header_style {
            HeaderStyleArg::Draft03 => HeaderStyle::Draft03,
            HeaderStyleArg::Structured => HeaderStyle::Structured,
        },
        tracing: None,
    }
}

/// `--redis-sentinel-master` with the master's `[user:]password` (`--redis-sentinel-master-auth`).
pub(super) fn sentinel_master(args: &ServeArgs) -> Option<SentinelMaster> {
    let name = args.redis.redis_sentinel_master.clone()?;
    let (username, password) = match args.redis.redis_sentinel_master_auth.as_deref() {
        None | Some("") => (None, None),
        Some(auth) => match auth.split_once(':') {
            Some((user, password)) => (Some(user.to_owned()), Some(password.to_owned())),
            None => (None, Some(auth.to_owned())),
        },
    };
    Some(SentinelMaster {
        name,
        username,
        password,
    })
}

/// The Redis TLS files, read now so a missing or unreadable one stops start-up naming it.
pub(super) fn redis_tls(args: &ServeArgs) -> anyhow::Result<RedisTls> {
    let read = |flag: &str, path: &Option<PathBuf>| -> anyhow::Result<Option<Vec<u8>>> {
        let Some(path) = path else { return Ok(None) };
        let pem = crate::config::read_text(path, MAX_PEM_BYTES).map_err(|e| match e {
            crate::config::ReadError::TooLarge { .. } => anyhow::anyhow!(
                "--{flag} {}: larger than {MAX_PEM_BYTES} bytes, not a PEM file",
                path.display()
            ),
            other => anyhow::anyhow!("--{flag} {}: {other}", path.display()),
        })?;
        if !pem.contains("-----BEGIN ") {
            anyhow::bail!("--{flag} {}: not a PEM file", path.display());
        }
        Ok(Some(pem.into_bytes()))
    };
    Ok(RedisTls {
        root_ca_pem: read("redis-tls-ca", &args.redis.redis_tls_ca)?,
        client_cert_pem: read("redis-tls-cert", &args.redis.redis_tls_cert)?,
        client_key_pem: read("redis-tls-key", &args.redis.redis_tls_key)?,
        skip_hostname_verification: args.redis.redis_tls_skip_hostname_verification,
    })
}

/// A CA bundle or a certificate chain is a few KiB; this only keeps a wrong path (a log, a
/// device) from being read whole.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Upstream's stats over statsd or DogStatsD, when `--statsd-addr` is set.
pub(super) fn statsd_settings(
    args: &ServeArgs,
    env: &Environment,
) -> anyhow::Result<Option<StatsdSettings>> {
    use crate::serve::args::StatsdFormatArg;
    use crate::telemetry::statsd::{Format, Mogrifier, Protocol, tag_set};
    let telemetry = &args.telemetry;
    let Some(target) = telemetry.statsd_addr.clone() else {
        if telemetry.statsd_tags.is_some() || telemetry.statsd_mogrifiers.is_some() {
            anyhow::bail!("--statsd-tags and --statsd-mogrifiers need --statsd-addr");
        }
        return Ok(None);
    };
    let port = target
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .and_then(|(_, port)| port.parse::<u16>().ok());
    if port.is_none() {
        anyhow::bail!(
            "--statsd-addr (STATSD_HOST and STATSD_PORT) must be host:port, got {target:?}"
        );
    }
    let format = match telemetry.statsd_format {
        StatsdFormatArg::Statsd => Format::Statsd,
        StatsdFormatArg::Dogstatsd => Format::DogStatsd,
    };
    let protocol = match (format, telemetry.statsd_protocol) {
        (Format::DogStatsd, Some(Protocol::Tcp)) => anyhow::bail!(
            "--statsd-protocol tcp: DogStatsD is sent over udp, as upstream's DogStatsD client"
        ),
        (Format::DogStatsd, _) => Protocol::Udp,
        (Format::Statsd, protocol) => protocol.unwrap_or(Protocol::Tcp),
    };
    let tags = match telemetry.statsd_tags.as_deref() {
        None => Vec::new(),
        Some(text) => {
            let pairs = upstream_env::parse_go_map(text).ok_or_else(|| {
                anyhow::anyhow!(
                    "--statsd-tags (EXTRA_TAGS): {text:?} is not key:value pairs (a:1,b:2)"
                )
            })?;
            tag_set(&pairs)
        }
    };
    let mogrifiers = match telemetry.statsd_mogrifiers.as_deref() {
        None => Vec::new(),
        Some(_) if format != Format::DogStatsd => {
            anyhow::bail!(
                "--statsd-mogrifiers (USE_DOG_STATSD_MOGRIFIERS) need --statsd-format dogstatsd"
            )
        }
        Some(names) => {
            let names: Vec<String> = names
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect();
            Mogrifier::from_env(&names, env)?
        }
    };
    Ok(Some(StatsdSettings {
        target,
        protocol,
        format,
        flush_interval: telemetry.statsd_flush_interval,
        tags,
        mogrifiers,
    }))
}
