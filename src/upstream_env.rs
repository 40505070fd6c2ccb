//! envoyproxy/ratelimit's environment variables, read where `serve` has no flag of its own
//! set, so a deployment written for upstream runs with only the image changed.
//!
//! Our flags and `RLS_*` variables win over upstream's; upstream's apply when ours are unset.
//! Values are parsed as upstream parses them (Go's `strconv.ParseBool` for booleans), and a
//! value that cannot be parsed stops start-up naming the variable.
//!
//! `serve_argv` writes `serve`'s command line from them; the Redis variables are read in
//! `redis` and the xDS ones in `xds`, `origins` names each flag's variables for the start log,
//! and `known` lists every upstream variable read or refused.

use std::path::PathBuf;

use crate::environment::Environment;
use crate::transport::TlsFiles;

mod go_value;
mod known;
mod origins;
pub use origins::is_behaviour;
mod redis;
mod xds;
use self::redis::{redis_tls_files, redis_urls};
use self::xds::{XDS_CONFIG_TYPE, xds_argv};
pub use go_value::{GoKind, parse_map as parse_go_map};
pub use known::{Treatment, VARIABLES, Variable, is_known, known_names, unread_with_arguments};

/// The environment upstream's variables are read from (see [`crate::environment`]).
pub type Lookup<'a> = &'a Environment;

/// An upstream variable that cannot be used; the text names it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{variable}: {problem}")]
pub struct UpstreamEnvError {
    pub variable: &'static str,
    pub problem: String,
}

/// A boolean as Go's `strconv.ParseBool` reads it (what upstream's envconfig uses).
fn parse_bool(variable: &'static str, value: &str) -> Result<bool, UpstreamEnvError> {
    go_value::parse_bool(value).ok_or_else(|| UpstreamEnvError {
        variable,
        problem: format!("{value:?} is not a boolean (true/false, 1/0, t/f)"),
    })
}

/// A non-empty value (upstream's default for these is the empty string, meaning unset).
pub(crate) fn non_empty(env: Lookup<'_>, variable: &str) -> Option<String> {
    env.get(variable)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}

/// Upstream's gRPC TLS settings: `GRPC_SERVER_USE_TLS` turns TLS on with
/// `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY`; `GRPC_CLIENT_TLS_CACERT` turns mTLS on;
/// `GRPC_CLIENT_TLS_SAN` adds the client SAN check. Off (`None`) unless `GRPC_SERVER_USE_TLS`
/// is true, as upstream (which then ignores the other three).
pub fn grpc_tls(env: Lookup<'_>) -> Result<Option<TlsFiles>, UpstreamEnvError> {
    const USE_TLS: &str = "GRPC_SERVER_USE_TLS";
    let enabled = match non_empty(env, USE_TLS) {
        Some(value) => parse_bool(USE_TLS, &value)?,
        None => false,
    };
    if !enabled {
        return Ok(None);
    }
    let required = |variable: &'static str| {
        non_empty(env, variable).ok_or_else(|| UpstreamEnvError {
            variable,
            problem: format!("required with {USE_TLS}=true (a PEM file path)"),
        })
    };
    let client_ca = non_empty(env, "GRPC_CLIENT_TLS_CACERT").map(PathBuf::from);
    let client_san = non_empty(env, "GRPC_CLIENT_TLS_SAN");
    if client_san.is_some() && client_ca.is_none() {
        // Upstream accepts it and checks nothing (no client certificate is asked for).
        return Err(UpstreamEnvError {
            variable: "GRPC_CLIENT_TLS_SAN",
            problem: "needs GRPC_CLIENT_TLS_CACERT: without a client CA no client certificate \
                      is asked for, so there is no SAN to check"
                .into(),
        });
    }
    Ok(Some(TlsFiles {
        cert: PathBuf::from(required("GRPC_SERVER_TLS_CERT")?),
        key: PathBuf::from(required("GRPC_SERVER_TLS_KEY")?),
        client_ca,
        client_san,
    }))
}

/// Upstream's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` (default false).
pub fn healthy_with_at_least_one_config_loaded(env: Lookup<'_>) -> Result<bool, UpstreamEnvError> {
    const VARIABLE: &str = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED";
    match non_empty(env, VARIABLE) {
        Some(value) => parse_bool(VARIABLE, &value),
        None => Ok(false),
    }
}

/// The command line `serve` runs with when the binary is started without arguments, as
/// upstream's image starts it: every setting from upstream's variables (with upstream's
/// defaults), except where one of our `RLS_*` variables is set (ours win). The variables
/// `serve` reads itself (`GRPC_SERVER_USE_TLS` & co., `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`)
/// are not repeated here. A setting we do not support is refused, naming it and what to use.
pub fn serve_argv(env: Lookup<'_>) -> Result<UpstreamServe, UpstreamEnvError> {
    let mut argv = UpstreamServe {
        warnings: known::check(env)?,
        ..UpstreamServe::default()
    };
    refuse_unsupported(env)?;
    let ours = |variable: &str| env.has(variable);
    let flag = |argv: &mut UpstreamServe, rls: &str, flag: &str, value: String| {
        if !ours(rls) {
            argv.args.push(flag.to_owned());
            argv.args.push(value);
        }
    };

    // Logging (global flags, before the subcommand).
    let level = get(env, "LOG_LEVEL").unwrap_or_else(|| "WARN".into());
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" | "debug" | "info" | "error" => level.to_ascii_lowercase(),
        "warn" | "warning" => "warn".into(),
        "panic" | "fatal" => "error".into(),
        _ => {
            return Err(problem(
                "LOG_LEVEL",
                format!("{level:?} is not a log level (debug, info, warn, error)"),
            ));
        }
    };
    flag(&mut argv, "RLS_LOG_LEVEL", "--log-level", level);
    let format = get(env, "LOG_FORMAT").unwrap_or_else(|| "text".into());
    if !matches!(format.as_str(), "text" | "json") {
        return Err(problem(
            "LOG_FORMAT",
            format!("{format:?} is neither text nor json"),
        ));
    }
    flag(&mut argv, "RLS_LOG_FORMAT", "--log-format", format);
    argv.args.push("serve".into());

    // Listeners.
    let http = socket_addr(env, ("HOST", "0.0.0.0"), "PORT", 8080)?;
    flag(&mut argv, "RLS_HTTP_ADDR", "--http-addr", http);
    let grpc = socket_addr(env, ("GRPC_HOST", "0.0.0.0"), "GRPC_PORT", 8081)?;
    flag(&mut argv, "RLS_GRPC_ADDR", "--grpc-addr", grpc);
    // Upstream binds its debug port on every address; ours serves counter inspection, so it
    // stays on loopback unless DEBUG_HOST says otherwise.
    let debug = socket_addr(env, ("DEBUG_HOST", "127.0.0.1"), "DEBUG_PORT", 6070)?;
    flag(&mut argv, "RLS_DEBUG_ADDR", "--debug-addr", debug);

    // The limits: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
    let mut config = PathBuf::from(
        get(env, "RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into()),
    );
    if let Some(sub) = get(env, "RUNTIME_SUBDIRECTORY") {
        config.push(sub);
    }
    config.push(get(env, "RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
    // `serve` reads RUNTIME_IGNOREDOTFILES itself (`serve::sources`).
    if boolean(env, "RUNTIME_WATCH_ROOT")? == Some(false) {
        argv.warnings.push(
            "RUNTIME_WATCH_ROOT=false has no effect here: the config directory is watched \
             with its parent, so a ConfigMap's swap of the whole directory is seen either way"
                .into(),
        );
    }
    if get(env, "CONFIG_TYPE").as_deref() == Some(XDS_CONFIG_TYPE) {
        xds_argv(env, &mut argv)?;
    } else {
        boolean(env, "FORCE_START_WITHOUT_INITIAL_CONFIG")?;
        flag(
            &mut argv,
            "RLS_CONFIG",
            "--config",
            config.to_string_lossy().into_owned(),
        );
    }

    // The answer. SHADOW_MODE and the other switches `serve` reads however it is started are
    // resolved with the other settings (`serve::sources`), not here.
    if boolean(env, "LIMIT_RESPONSE_HEADERS_ENABLED")? == Some(true)
        && !ours("RLS_RESPONSE_HEADERS")
    {
        argv.args.push("--response-headers".into());
    }
    for (variable, rls, name) in [
        ("LIMIT_LIMIT_HEADER", "RLS_LIMIT_HEADER", "--limit-header"),
        (
            "LIMIT_REMAINING_HEADER",
            "RLS_REMAINING_HEADER",
            "--remaining-header",
        ),
        ("LIMIT_RESET_HEADER", "RLS_RESET_HEADER", "--reset-header"),
    ] {
        if let Some(value) = get(env, variable) {
            flag(&mut argv, rls, name, value);
        }
    }

    // Upstream's window semantics, which an operator switching expects: fixed windows and
    // every hit counted, denied or not (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, read by
    // `serve` as --all-or-nothing, then spares the descriptors that passed, as upstream).
    flag(&mut argv, "RLS_WINDOWS", "--windows", "fixed".into());
    if !ours("RLS_COUNT_DENIED") {
        argv.args.push("--count-denied".into());
    }

    // Redis.
    if let Some(prefix) = get(env, "CACHE_KEY_PREFIX") {
        if prefix.contains(['{', '}']) {
            return Err(problem(
                "CACHE_KEY_PREFIX",
                "must not contain '{' or '}' (Redis Cluster hashes on them)",
            ));
        }
        flag(
            &mut argv,
            "RLS_REDIS_PREFIX",
            "--redis-prefix",
            prefix.clone(),
        );
        // Upstream's keys start with it: what a carry-over reads.
        flag(
            &mut argv,
            "RLS_CARRY_OVER_KEY_PREFIX",
            "--carry-over-key-prefix",
            prefix,
        );
    }
    // Upstream's default, 10 s, rather than ours: the migration keeps upstream's timeouts.
    let timeout = go_duration(
        env,
        "REDIS_TIMEOUT",
        "10s",
        (std::time::Duration::from_millis(1), "1ms"),
        (std::time::Duration::from_secs(3_600), "1h"),
    )?;
    flag(
        &mut argv,
        "RLS_REDIS_REPLAY_TIMEOUT",
        "--redis-replay-timeout",
        timeout,
    );
    if !ours("RLS_REDIS_URL") {
        let redis = redis_urls(env)?;
        argv.args.push("--redis-url".into());
        argv.args.push(redis.urls.join(","));
        if redis.cluster && !ours("RLS_REDIS_CLUSTER") {
            argv.args.push("--redis-cluster".into());
        }
        if let Some(master) = redis.sentinel_master {
            flag(
                &mut argv,
                "RLS_REDIS_SENTINEL_MASTER",
                "--redis-sentinel-master",
                master,
            );
        }
        if let Some(auth) = redis.master_auth {
            flag(
                &mut argv,
                "RLS_REDIS_SENTINEL_MASTER_AUTH",
                "--redis-sentinel-master-auth",
                auth,
            );
        }
    }
    redis_tls_files(env, &mut argv)?;

    if let Some(ratio) = get(env, "NEAR_LIMIT_RATIO") {
        match ratio.parse::<f64>() {
            Ok(r) if r > 0.0 && r <= 1.0 => {
                flag(
                    &mut argv,
                    "RLS_NEAR_LIMIT_RATIO",
                    "--near-limit-ratio",
                    ratio,
                );
            }
            _ => {
                return Err(problem(
                    "NEAR_LIMIT_RATIO",
                    format!("{ratio:?} is not a ratio in (0, 1]"),
                ));
            }
        }
    }
    stats_argv(env, &mut argv)?;
    if boolean(env, "USE_PROMETHEUS")? == Some(true) {
        // Go's ":9090" means every address.
        let addr = get(env, "PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let addr = match addr.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => addr,
        };
        if addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(problem(
                "PROMETHEUS_ADDR",
                format!("{addr:?} is not [ip]:port"),
            ));
        }
        flag(&mut argv, "RLS_METRICS_ADDR", "--metrics-addr", addr);
        if let Some(path) = get(env, "PROMETHEUS_PATH") {
            flag(&mut argv, "RLS_METRICS_PATH", "--metrics-path", path);
        }
    }
    // grpc-go's keepalive enforcement, with upstream's defaults.
    for (variable, rls, name, default) in [
        (
            "GRPC_MAX_CONNECTION_AGE",
            "RLS_MAX_CONNECTION_AGE",
            "--max-connection-age",
            "24h",
        ),
        (
            "GRPC_MAX_CONNECTION_AGE_GRACE",
            "RLS_MAX_CONNECTION_AGE_GRACE",
            "--max-connection-age-grace",
            "1h",
        ),
    ] {
        let value = go_duration(
            env,
            variable,
            default,
            (std::time::Duration::from_millis(100), "100ms"),
            (std::time::Duration::from_secs(30 * 86_400), "30 days"),
        )?;
        flag(&mut argv, rls, name, value);
    }
    argv.origins = origins::of(&argv.args, env);
    Ok(argv)
}

/// Upstream's stats sink: statsd (its default, `USE_STATSD`), DogStatsD (`USE_DOG_STATSD`),
/// or none (`DISABLE_STATS`, or both false). Upstream refuses two sinks at once; here
/// `/metrics` is always served, so `USE_PROMETHEUS=true` turns statsd off only when
/// `USE_STATSD` is left to its default.
fn stats_argv(env: Lookup<'_>, argv: &mut UpstreamServe) -> Result<(), UpstreamEnvError> {
    let ours = |variable: &str| env.has(variable);
    if boolean(env, "DISABLE_STATS")? == Some(true) || ours("RLS_STATSD_ADDR") {
        return Ok(());
    }
    let statsd = boolean(env, "USE_STATSD")?;
    let dog = boolean(env, "USE_DOG_STATSD")? == Some(true);
    let prometheus = boolean(env, "USE_PROMETHEUS")? == Some(true);
    if dog && statsd == Some(true) {
        return Err(problem(
            "USE_DOG_STATSD",
            "and USE_STATSD are both true: one stats sink at a time, as upstream; set USE_STATSD=false",
        ));
    }
    if !dog && !statsd.unwrap_or(!prometheus) {
        return Ok(());
    }
    let host = get(env, "STATSD_HOST").unwrap_or_else(|| "localhost".into());
    let port = match get(env, "STATSD_PORT") {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| problem("STATSD_PORT", format!("{port:?} is not a port number")))?,
        None => 8125,
    };
    if host.contains(['/', ' ', ',']) {
        return Err(problem(
            "STATSD_HOST",
            format!("{host:?} is not a host name or address"),
        ));
    }
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    argv.args.push("--statsd-addr".into());
    argv.args.push(addr);
    if dog {
        argv.args.push("--statsd-format".into());
        argv.args.push("dogstatsd".into());
        if let Some(names) = get(env, "USE_DOG_STATSD_MOGRIFIERS") {
            argv.args.push("--statsd-mogrifiers".into());
            argv.args.push(names);
        }
    } else if let Some(protocol) = get(env, "STATSD_PROTOCOL") {
        // gostats dials whatever Go's net.Dial takes; these are the ones a collector speaks.
        let protocol = match protocol.as_str() {
            "tcp" | "tcp4" | "tcp6" => "tcp",
            "udp" | "udp4" | "udp6" => "udp",
            other => {
                return Err(problem(
                    "STATSD_PROTOCOL",
                    format!("{other:?} is neither tcp nor udp"),
                ));
            }
        };
        argv.args.push("--statsd-protocol".into());
        argv.args.push(protocol.into());
    }
    if let Some(interval) = get(env, "STATS_FLUSH_INTERVAL") {
        let interval = go_duration(
            env,
            "STATS_FLUSH_INTERVAL",
            &interval,
            (std::time::Duration::from_millis(100), "100ms"),
            (std::time::Duration::from_secs(3_600), "1h"),
        )?;
        argv.args.push("--statsd-flush-interval".into());
        argv.args.push(interval);
    }
    if let Some(tags) = get(env, "EXTRA_TAGS") {
        argv.args.push("--statsd-tags".into());
        argv.args.push(tags);
    }
    Ok(())
}

/// `serve`'s arguments from upstream's variables, and what to warn about once logging is up.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpstreamServe {
    /// Global flags, then `serve` and its flags (without the program name).
    pub args: Vec<String>,
    pub warnings: Vec<String>,
    /// Each flag on `args` (`http-addr`, without `--`), the upstream variables it was set
    /// from, and whether one of them was set (else it is upstream's default).
    pub origins: Vec<(String, String, bool)>,
}

fn problem(variable: &'static str, problem: impl Into<String>) -> UpstreamEnvError {
    UpstreamEnvError {
        variable,
        problem: problem.into(),
    }
}

fn get(env: Lookup<'_>, variable: &str) -> Option<String> {
    non_empty(env, variable)
}

/// Upstream's boolean `variable`: `None` when unset or empty, else Go's `strconv.ParseBool`
/// reading of it (anything else is an error naming it).
pub fn boolean(env: Lookup<'_>, variable: &'static str) -> Result<Option<bool>, UpstreamEnvError> {
    get(env, variable)
        .map(|v| parse_bool(variable, &v))
        .transpose()
}

/// Upstream's duration `variable` (Go's syntax; `default` when unset) within `min..=max`, as
/// our duration flags write it.
fn go_duration(
    env: Lookup<'_>,
    variable: &'static str,
    default: &str,
    (min, min_text): (std::time::Duration, &str),
    (max, max_text): (std::time::Duration, &str),
) -> Result<String, UpstreamEnvError> {
    let value = get(env, variable).unwrap_or_else(|| default.into());
    let parsed = match go_value::parse_duration(&value) {
        Some((false, parsed)) => parsed,
        Some((true, _)) | None => {
            return Err(problem(
                variable,
                format!("{value:?} is not a duration (a number and a unit: 300ms, 10s, 1h)"),
            ));
        }
    };
    if parsed < min || parsed > max {
        return Err(problem(
            variable,
            format!("{value:?} must be between {min_text} and {max_text}"),
        ));
    }
    // As given where our flags read it alike (the start log then shows it as set).
    if humantime::parse_duration(&value).ok() == Some(parsed) {
        return Ok(value);
    }
    Ok(humantime::format_duration(parsed).to_string())
}

/// `HOST:PORT`; the host must be an IP address (the listener binds it).
fn socket_addr(
    env: Lookup<'_>,
    (host_variable, default_host): (&'static str, &str),
    port_variable: &'static str,
    default_port: u16,
) -> Result<String, UpstreamEnvError> {
    let host = get(env, host_variable).unwrap_or_else(|| default_host.into());
    let ip: std::net::IpAddr = host
        .parse()
        .map_err(|_| problem(host_variable, format!("{host:?} is not an IP address")))?;
    let port = match get(env, port_variable) {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| problem(port_variable, format!("{port:?} is not a port number")))?,
        None => default_port,
    };
    Ok(std::net::SocketAddr::new(ip, port).to_string())
}

/// Values of upstream's settings we do not support: refused, with what to use instead (the
/// variables refused whatever their value are in [`known`]).
fn refuse_unsupported(env: Lookup<'_>) -> Result<(), UpstreamEnvError> {
    if let Some(backend) = get(env, "BACKEND_TYPE") {
        match backend.to_ascii_lowercase().as_str() {
            "redis" => {}
            "memcache" => {
                return Err(problem(
                    "BACKEND_TYPE",
                    "memcache is not supported: use Redis (BACKEND_TYPE=redis, REDIS_URL)",
                ));
            }
            _ => {
                return Err(problem(
                    "BACKEND_TYPE",
                    format!("{backend:?} is not a backend (redis)"),
                ));
            }
        }
    }
    if get(env, "CONFIG_TYPE").is_some_and(|t| t != "FILE" && t != XDS_CONFIG_TYPE) {
        return Err(problem(
            "CONFIG_TYPE",
            format!(
                "FILE (limits from RUNTIME_ROOT) or {XDS_CONFIG_TYPE} (limits from an xDS server)"
            ),
        ));
    }
    if let Some(behavior) = get(env, "REDIS_POOL_ON_EMPTY_BEHAVIOR")
        && !behavior.eq_ignore_ascii_case("WAIT")
    {
        // Upstream refuses CREATE and ERROR at start too (radix v4 has no such pool).
        return Err(problem(
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            format!(
                "{behavior:?} is not supported: unset it or set WAIT (there is no pool: one multiplexed connection)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
