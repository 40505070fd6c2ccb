//! The regional origin from upstream's Redis variables: the URLs (node, cluster, Sentinel, a
//! socket), their credentials and the TLS files, as `serve`'s `--redis-*` flags take them.

use super::*;

/// Redis as upstream's variables describe it, as `serve`'s flags take it.
pub(super) struct UpstreamRedis {
    /// `--redis-url`'s list.
    pub(super) urls: Vec<String>,
    pub(super) cluster: bool,
    /// `--redis-sentinel-master` and `--redis-sentinel-master-auth`.
    pub(super) sentinel_master: Option<String>,
    pub(super) master_auth: Option<String>,
}

/// `REDIS_URL` is upstream's `host:port` (a comma-separated list for a cluster; for Sentinel
/// `master-name,sentinel-host:port,...`) or a socket's path, with `REDIS_AUTH` (`password` or
/// `user:password`, the master's with Sentinel), `REDIS_SENTINEL_AUTH` (the sentinels'),
/// `REDIS_TLS`, `REDIS_TYPE` and `REDIS_SOCKET_TYPE` (upstream's defaults: unix,
/// `/var/run/nutcracker/ratelimit.sock`).
pub(super) fn redis_urls(env: Lookup<'_>) -> Result<UpstreamRedis, UpstreamEnvError> {
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
pub(super) fn redis_tls_files(
    env: Lookup<'_>,
    argv: &mut UpstreamServe,
) -> Result<(), UpstreamEnvError> {
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
