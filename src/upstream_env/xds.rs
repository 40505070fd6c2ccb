//! `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS client's flags from upstream's variables.

use super::*;

/// Upstream's `CONFIG_TYPE` for limits pushed by an xDS server.
pub(super) const XDS_CONFIG_TYPE: &str = "GRPC_XDS_SOTW";

/// `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS flags from upstream's `CONFIG_GRPC_XDS_*`,
/// `XDS_CLIENT_*` and `FORCE_START_WITHOUT_INITIAL_CONFIG` (with upstream's defaults where
/// ours differ), unless our `RLS_*` variable is set. The limits then come from the server,
/// not `RUNTIME_ROOT`.
pub(super) fn xds_argv(env: Lookup<'_>, argv: &mut UpstreamServe) -> Result<(), UpstreamEnvError> {
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
