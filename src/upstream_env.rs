//! envoyproxy/ratelimit's environment variables, read where `serve` has no flag of its own
//! set, so a deployment written for upstream runs with only the image changed.
//!
//! Our flags and `RLS_*` variables win over upstream's; upstream's apply when ours are unset.
//! Values are parsed as upstream parses them (Go's `strconv.ParseBool` for booleans), and a
//! value that cannot be parsed stops start-up naming the variable.

use std::path::PathBuf;

use crate::environment::Environment;
use crate::transport::TlsFiles;

mod known;
mod origins;
pub use known::KNOWN_VARIABLES;

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
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(UpstreamEnvError {
            variable,
            problem: format!("{other:?} is not a boolean (true/false, 1/0, t/f)"),
        }),
    }
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
    refuse_unsupported(env)?;
    let mut argv = UpstreamServe::default();
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
    if let Some(mapper) = get(env, "PROMETHEUS_MAPPER_YAML") {
        // Envoy Gateway always sets it, to a mapping with the default mapping's names and
        // labels: refusing it would refuse every Envoy Gateway deployment.
        argv.warnings.push(format!(
            "PROMETHEUS_MAPPER_YAML={mapper} is not applied: upstream's stats are exported under \
             its default mapping's names and labels (domain, key1, key2), which Envoy \
             Gateway's mapping uses too"
        ));
    }

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
    for variable in ["RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"] {
        // Checked here; `serve` reads RUNTIME_IGNOREDOTFILES itself (`serve::sources`), and the
        // directory is always watched.
        boolean(env, variable)?;
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

    // Redis.
    if let Some(prefix) = get(env, "CACHE_KEY_PREFIX") {
        if prefix.contains(['{', '}']) {
            return Err(problem(
                "CACHE_KEY_PREFIX",
                "must not contain '{' or '}' (Redis Cluster hashes on them)",
            ));
        }
        flag(&mut argv, "RLS_REDIS_PREFIX", "--redis-prefix", prefix);
    }
    if let Some(timeout) = get(env, "REDIS_TIMEOUT") {
        let parsed = humantime::parse_duration(&timeout).map_err(|e| {
            problem(
                "REDIS_TIMEOUT",
                format!("{timeout:?} is not a duration: {e}"),
            )
        })?;
        if parsed.is_zero() || parsed > std::time::Duration::from_secs(3_600) {
            return Err(problem(
                "REDIS_TIMEOUT",
                format!("{timeout:?} must be between 1ms and 1h"),
            ));
        }
        flag(
            &mut argv,
            "RLS_REDIS_REPLAY_TIMEOUT",
            "--redis-replay-timeout",
            timeout,
        );
    }
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
        let value = get(env, variable).unwrap_or_else(|| default.into());
        let parsed = humantime::parse_duration(&value)
            .map_err(|e| problem(variable, format!("{value:?} is not a duration: {e}")))?;
        if parsed < std::time::Duration::from_millis(100)
            || parsed > std::time::Duration::from_secs(30 * 86_400)
        {
            return Err(problem(
                variable,
                format!("{value:?} must be between 100ms and 30 days"),
            ));
        }
        flag(&mut argv, rls, name, value);
    }
    argv.origins = origins::of(&argv.args, env);
    Ok(argv)
}

/// `serve`'s arguments from upstream's variables, and what to warn about once logging is up.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpstreamServe {
    /// Global flags, then `serve` and its flags (without the program name).
    pub args: Vec<String>,
    pub warnings: Vec<String>,
    /// Each flag on `args` (`http-addr`, without `--`), the upstream variables it was set
    /// from, and whether one of them was set (else it is upstream's default).
    pub origins: Vec<(String, &'static str, bool)>,
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

/// Upstream's `CONFIG_TYPE` for limits pushed by an xDS server.
const XDS_CONFIG_TYPE: &str = "GRPC_XDS_SOTW";

/// `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS flags from upstream's `CONFIG_GRPC_XDS_*`,
/// `XDS_CLIENT_*` and `FORCE_START_WITHOUT_INITIAL_CONFIG` (with upstream's defaults where
/// ours differ), unless our `RLS_*` variable is set. The limits then come from the server,
/// not `RUNTIME_ROOT`.
fn xds_argv(env: Lookup<'_>, argv: &mut UpstreamServe) -> Result<(), UpstreamEnvError> {
    let ours = |variable: &str| env.has(variable);
    if ours("RLS_CONFIG") {
        return Err(problem(
            "CONFIG_TYPE",
            "GRPC_XDS_SOTW takes the limits from the xDS server: unset RLS_CONFIG",
        ));
    }
    let mut push = |rls: &str, flag: &str, value: String| {
        if !ours(rls) {
            argv.args.push(flag.to_owned());
            argv.args.push(value);
        }
    };
    let server = get(env, "CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".into());
    push("RLS_CONFIG_XDS_SERVER", "--config-xds-server", server);
    for (variable, rls, flag) in [
        (
            "CONFIG_GRPC_XDS_NODE_ID",
            "RLS_CONFIG_XDS_NODE_ID",
            "--config-xds-node-id",
        ),
        (
            "CONFIG_GRPC_XDS_NODE_METADATA",
            "RLS_CONFIG_XDS_NODE_METADATA",
            "--config-xds-node-metadata",
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "RLS_CONFIG_XDS_HEADERS",
            "--config-xds-headers",
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "RLS_CONFIG_XDS_CLIENT_CERT",
            "--config-xds-client-cert",
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            "RLS_CONFIG_XDS_CLIENT_KEY",
            "--config-xds-client-key",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            "RLS_CONFIG_XDS_CA",
            "--config-xds-ca",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            "RLS_CONFIG_XDS_SAN",
            "--config-xds-san",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "RLS_CONFIG_XDS_CONNECT_RETRY_INTERVAL",
            "--config-xds-connect-retry-interval",
        ),
        (
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "RLS_CONFIG_XDS_BACKOFF_INITIAL",
            "--config-xds-backoff-initial",
        ),
        (
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            "RLS_CONFIG_XDS_BACKOFF_MAX",
            "--config-xds-backoff-max",
        ),
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "RLS_CONFIG_XDS_BACKOFF_FACTOR",
            "--config-xds-backoff-factor",
        ),
        (
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            "RLS_CONFIG_XDS_MAX_MESSAGE_BYTES",
            "--config-xds-max-message-bytes",
        ),
    ] {
        if let Some(value) = get(env, variable) {
            push(rls, flag, value);
        }
    }
    if let Some(jitter) = boolean(env, "XDS_CLIENT_BACKOFF_JITTER")? {
        push(
            "RLS_CONFIG_XDS_BACKOFF_JITTER",
            "--config-xds-backoff-jitter",
            jitter.to_string(),
        );
    }
    if boolean(env, "CONFIG_GRPC_XDS_SERVER_USE_TLS")? == Some(true) && !ours("RLS_CONFIG_XDS_TLS")
    {
        argv.args.push("--config-xds-tls".into());
    }
    if boolean(env, "FORCE_START_WITHOUT_INITIAL_CONFIG")? == Some(true)
        && !ours("RLS_FORCE_START_WITHOUT_INITIAL_CONFIG")
    {
        argv.args
            .push("--force-start-without-initial-config".into());
    }
    Ok(())
}

/// Settings upstream has and we do not: refused, with what to use instead.
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
    let refused_if_true: [(&'static str, &str); 3] = [
        (
            "REDIS_PERSECOND",
            "a second Redis for per-second limits is not supported: one Redis (REDIS_URL) serves every unit; unset it",
        ),
        (
            "USE_DOG_STATSD",
            "DogStatsD is not supported: scrape the Prometheus metrics at /metrics on the HTTP port",
        ),
        (
            "USE_STATSD",
            "statsd is not supported: set USE_STATSD=false and scrape /metrics on the HTTP port",
        ),
    ];
    for (variable, instead) in refused_if_true {
        if boolean(env, variable)? == Some(true) {
            return Err(problem(variable, instead));
        }
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
    if get(env, "GRPC_UDS").is_some() {
        return Err(problem(
            "GRPC_UDS",
            "gRPC on a Unix socket is not supported: use GRPC_HOST and GRPC_PORT",
        ));
    }
    Ok(())
}

/// Redis as upstream's variables describe it, as `serve`'s flags take it.
struct UpstreamRedis {
    /// `--redis-url`'s list.
    urls: Vec<String>,
    cluster: bool,
    /// `--redis-sentinel-master` and `--redis-sentinel-master-auth`.
    sentinel_master: Option<String>,
    master_auth: Option<String>,
}

/// `REDIS_URL` is upstream's `host:port` (a comma-separated list for a cluster; for Sentinel
/// `master-name,sentinel-host:port,...`) or a socket's path, with `REDIS_AUTH` (`password` or
/// `user:password`, the master's with Sentinel), `REDIS_SENTINEL_AUTH` (the sentinels'),
/// `REDIS_TLS`, `REDIS_TYPE` and `REDIS_SOCKET_TYPE` (upstream's defaults: unix,
/// `/var/run/nutcracker/ratelimit.sock`).
fn redis_urls(env: Lookup<'_>) -> Result<UpstreamRedis, UpstreamEnvError> {
    let socket = get(env, "REDIS_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
    let unix = match socket.to_ascii_lowercase().as_str() {
        "tcp" => false,
        "unix" => true,
        _ => {
            return Err(problem(
                "REDIS_SOCKET_TYPE",
                format!("{socket:?} is neither tcp nor unix"),
            ));
        }
    };
    let kind = get(env, "REDIS_TYPE").unwrap_or_else(|| "SINGLE".into());
    let kind = kind.to_ascii_lowercase();
    if !matches!(kind.as_str(), "single" | "cluster" | "sentinel") {
        return Err(problem(
            "REDIS_TYPE",
            format!("{kind:?} is not one of single, cluster, sentinel"),
        ));
    }
    if kind != "sentinel" && get(env, "REDIS_SENTINEL_AUTH").is_some() {
        return Err(problem(
            "REDIS_SENTINEL_AUTH",
            "only used with REDIS_TYPE=sentinel: unset it (REDIS_AUTH is the Redis password)",
        ));
    }
    if unix {
        // Upstream's default: REDIS_URL is the socket's path.
        let path =
            get(env, "REDIS_URL").unwrap_or_else(|| "/var/run/nutcracker/ratelimit.sock".into());
        if !path.starts_with('/') || path.contains(['?', '#']) {
            return Err(problem(
                "REDIS_URL",
                format!("{path:?} is not an absolute socket path (REDIS_SOCKET_TYPE=unix)"),
            ));
        }
        if get(env, "REDIS_TLS").is_some_and(|v| v != "false") {
            return Err(problem(
                "REDIS_TLS",
                "TLS over a Unix socket makes no sense: use REDIS_SOCKET_TYPE=tcp",
            ));
        }
        if kind != "single" {
            return Err(problem(
                "REDIS_TYPE",
                "only single over a Unix socket (REDIS_SOCKET_TYPE=unix)",
            ));
        }
        let auth = match get(env, "REDIS_AUTH") {
            None => String::new(),
            Some(auth) => match auth.split_once(':') {
                Some((user, password)) => {
                    format!("?user={}&pass={}", encode(user), encode(password))
                }
                None => format!("?pass={}", encode(&auth)),
            },
        };
        return Ok(UpstreamRedis {
            urls: vec![format!("redis+unix://{path}{auth}")],
            cluster: false,
            sentinel_master: None,
            master_auth: None,
        });
    }
    let scheme = if boolean(env, "REDIS_TLS")? == Some(true) {
        "rediss"
    } else {
        "redis"
    };
    let userinfo = |auth: Option<String>| match auth {
        None => String::new(),
        Some(auth) => match auth.split_once(':') {
            Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
            None => format!(":{}@", encode(&auth)),
        },
    };
    let list = get(env, "REDIS_URL")
        .ok_or_else(|| problem("REDIS_URL", "required: host:port of Redis"))?;
    let mut nodes: Vec<&str> = list.split(',').map(str::trim).collect();
    let sentinel = kind == "sentinel";
    let (auth, sentinel_master, master_auth) = if sentinel {
        // Upstream: the master's name, then the sentinels.
        if nodes.len() < 2 {
            return Err(problem(
                "REDIS_URL",
                "REDIS_TYPE=sentinel needs <master name>,<sentinel host:port>,...",
            ));
        }
        let master = nodes.remove(0).to_owned();
        if master.is_empty() || master.contains(':') || master.contains(char::is_whitespace) {
            return Err(problem(
                "REDIS_URL",
                format!(
                    "{master:?} is not a master name (REDIS_TYPE=sentinel: <master name>,<sentinel host:port>,...)"
                ),
            ));
        }
        (
            userinfo(get(env, "REDIS_SENTINEL_AUTH")),
            Some(master),
            get(env, "REDIS_AUTH"),
        )
    } else {
        (userinfo(get(env, "REDIS_AUTH")), None, None)
    };
    let mut urls = Vec::new();
    for node in nodes {
        let valid = node.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !host.contains(['/', '@', ' ']) && port.parse::<u16>().is_ok()
        });
        if !valid {
            return Err(problem("REDIS_URL", format!("{node:?} is not host:port")));
        }
        urls.push(format!("{scheme}://{auth}{node}"));
    }
    let cluster = kind == "cluster";
    if urls.len() > 1 && !cluster && !sentinel {
        return Err(problem(
            "REDIS_URL",
            "several nodes need REDIS_TYPE=cluster",
        ));
    }
    Ok(UpstreamRedis {
        urls,
        cluster,
        sentinel_master,
        master_auth,
    })
}

/// `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT` + `REDIS_TLS_CLIENT_KEY` and
/// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: applied with `REDIS_TLS=true` (as upstream) or with
/// our own `rediss://` `RLS_REDIS_URL`; set without either, refused (upstream ignores them).
fn redis_tls_files(env: Lookup<'_>, argv: &mut UpstreamServe) -> Result<(), UpstreamEnvError> {
    let ca = get(env, "REDIS_TLS_CACERT");
    let cert = get(env, "REDIS_TLS_CLIENT_CERT");
    let key = get(env, "REDIS_TLS_CLIENT_KEY");
    let skip = boolean(env, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")? == Some(true);
    let first_set = [
        ("REDIS_TLS_CACERT", ca.is_some()),
        ("REDIS_TLS_CLIENT_CERT", cert.is_some()),
        ("REDIS_TLS_CLIENT_KEY", key.is_some()),
        ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", skip),
    ]
    .into_iter()
    .find_map(|(variable, set)| set.then_some(variable));
    let Some(first_set) = first_set else {
        return Ok(());
    };
    let tls = boolean(env, "REDIS_TLS")? == Some(true) || env.has("RLS_REDIS_URL");
    if !tls {
        return Err(problem(
            first_set,
            "applies to TLS only: set REDIS_TLS=true (or unset it)",
        ));
    }
    match (&cert, &key) {
        (Some(_), None) => {
            return Err(problem(
                "REDIS_TLS_CLIENT_KEY",
                "required with REDIS_TLS_CLIENT_CERT (the client certificate's key)",
            ));
        }
        (None, Some(_)) => {
            return Err(problem(
                "REDIS_TLS_CLIENT_CERT",
                "required with REDIS_TLS_CLIENT_KEY (the key's certificate)",
            ));
        }
        _ => {}
    }
    let ours = |variable: &str| env.has(variable);
    for (value, rls, name) in [
        (ca, "RLS_REDIS_TLS_CA", "--redis-tls-ca"),
        (cert, "RLS_REDIS_TLS_CERT", "--redis-tls-cert"),
        (key, "RLS_REDIS_TLS_KEY", "--redis-tls-key"),
    ] {
        if let Some(value) = value
            && !ours(rls)
        {
            argv.args.push(name.to_owned());
            argv.args.push(value);
        }
    }
    if skip && !ours("RLS_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
        argv.args
            .push("--redis-tls-skip-hostname-verification".to_owned());
    }
    Ok(())
}

/// Percent-encodes what may not appear in a URL's user information.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
