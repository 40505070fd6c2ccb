//! `serve`'s settings that envoyproxy/ratelimit's variables can also set however the binary
//! is started, resolved by the one precedence rule (see [`crate::environment`]): our flag,
//! else our `RLS_*` variable, else upstream's variable, else the default.

use crate::environment::{Environment, Origin, Origins, Switch, resolve_switch};
use crate::transport::TlsFiles;
use crate::upstream_env;

use super::args::ServeArgs;

/// The switches upstream reads from its environment, with ours.
pub const SWITCHES: &[Switch] = &[
    Switch {
        id: "shadow_mode",
        flag: "--shadow-mode",
        upstream: "SHADOW_MODE",
    },
    Switch {
        id: "quota_mode",
        flag: "--quota-mode",
        upstream: "QUOTA_MODE",
    },
    // Upstream's "do not charge the other descriptors of a request that is over a limit".
    Switch {
        id: "all_or_nothing",
        flag: "--all-or-nothing",
        upstream: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    },
    Switch {
        id: "response_dynamic_metadata",
        flag: "--response-dynamic-metadata",
        upstream: "RESPONSE_DYNAMIC_METADATA",
    },
    Switch {
        id: "ignore_dot_files",
        flag: "--ignore-dot-files",
        upstream: "RUNTIME_IGNOREDOTFILES",
    },
    Switch {
        id: "merge_domain_config",
        flag: "--merge-domain-config",
        upstream: "MERGE_DOMAIN_CONFIG",
    },
    Switch {
        id: "healthy_with_at_least_one_config_loaded",
        flag: "--healthy-with-at-least-one-config-loaded",
        upstream: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    },
];

/// The field of `args` a switch sets.
fn field<'a>(args: &'a mut ServeArgs, id: &str) -> Option<&'a mut bool> {
    let limits = &mut args.limits;
    Some(match id {
        "shadow_mode" => &mut limits.shadow_mode,
        "quota_mode" => &mut limits.quota_mode,
        "all_or_nothing" => &mut limits.all_or_nothing,
        "response_dynamic_metadata" => &mut limits.response_dynamic_metadata,
        "ignore_dot_files" => &mut limits.read.ignore_dot_files,
        "merge_domain_config" => &mut limits.read.merge_domain_config,
        "healthy_with_at_least_one_config_loaded" => {
            &mut limits.healthy_with_at_least_one_config_loaded
        }
        _ => return None,
    })
}

/// Applies upstream's switches where ours are unset, recording each one's origin; the
/// warnings about ours overriding upstream's.
pub(super) fn apply_switches(
    args: &mut ServeArgs,
    origins: &mut Origins,
    env: &Environment,
) -> anyhow::Result<Vec<String>> {
    let mut warnings = Vec::new();
    for switch in SWITCHES {
        let Some(value) = field(args, switch.id) else {
            continue;
        };
        let resolved = resolve_switch(switch, *value, origins.of(switch.id), env)?;
        *value = resolved.value;
        origins.set_switch(switch.id, switch.flag, resolved.value, resolved.origin);
        warnings.extend(resolved.warning);
    }
    Ok(warnings)
}

/// The gRPC listener's TLS files: ours (`--grpc-tls-cert` and `--grpc-tls-key`, flags or
/// variables), else upstream's `GRPC_SERVER_USE_TLS` & co., else plaintext. Ours set with
/// upstream's also set: ours win, and the warning says so.
pub(super) fn grpc_tls_files(
    args: &ServeArgs,
    origins: &mut Origins,
    env: &Environment,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Option<TlsFiles>> {
    match (&args.tls.grpc_tls_cert, &args.tls.grpc_tls_key) {
        (Some(cert), Some(key)) => {
            let theirs: Vec<&str> = UPSTREAM_TLS
                .iter()
                .copied()
                .filter(|v| env.get(v).is_some_and(|v| !v.is_empty()))
                .collect();
            if !theirs.is_empty() {
                warnings.push(format!(
                    "--grpc-tls-cert and --grpc-tls-key from {} win over upstream's {}, which \
                     are ignored",
                    origins.of("grpc_tls_cert"),
                    theirs.join(", ")
                ));
            }
            Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.tls.grpc_tls_client_ca.clone(),
                client_san: args.tls.grpc_tls_client_san.clone(),
            }))
        }
        // clap's `requires` makes cert and key come together.
        _ => {
            let files = upstream_env::grpc_tls(env)?;
            if files.is_some() {
                origins.set_switch(
                    "grpc_tls",
                    "--grpc-tls-cert",
                    true,
                    Origin::Upstream {
                        variables: "GRPC_SERVER_USE_TLS".to_owned(),
                        set: true,
                    },
                );
            }
            Ok(files)
        }
    }
}

/// Upstream's gRPC TLS variables.
const UPSTREAM_TLS: &[&str] = &[
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
];

/// The switches in effect, for the start log: `shadow_mode=false quota_mode=true ...`.
pub(super) fn switches_line(args: &ServeArgs) -> String {
    let limits = &args.limits;
    [
        ("shadow_mode", limits.shadow_mode),
        ("quota_mode", limits.quota_mode),
        ("all_or_nothing", limits.all_or_nothing),
        ("count_denied", limits.count_denied),
        (
            "response_dynamic_metadata",
            limits.response_dynamic_metadata,
        ),
        ("response_headers", limits.response_headers),
        ("ignore_dot_files", limits.read.ignore_dot_files),
        ("merge_domain_config", limits.read.merge_domain_config),
        (
            "healthy_with_at_least_one_config_loaded",
            limits.healthy_with_at_least_one_config_loaded,
        ),
        (
            "inspection_on_http_addr",
            args.listeners.inspection_on_http_addr,
        ),
        (
            "inspection_show_values",
            args.listeners.inspection_show_values,
        ),
    ]
    .iter()
    .map(|(name, on)| format!("{name}={on}"))
    .collect::<Vec<_>>()
    .join(" ")
}
