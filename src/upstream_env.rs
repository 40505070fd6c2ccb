//! envoyproxy/ratelimit's environment variables, read where `serve` has no flag of its own
//! set, so a deployment written for upstream runs with only the image changed.
//!
//! Our flags and `RLS_*` variables win over upstream's; upstream's apply when ours are unset.
//! Values are parsed as upstream parses them (Go's `strconv.ParseBool` for booleans), and a
//! value that cannot be parsed stops start-up naming the variable.

use std::path::PathBuf;

use crate::transport::TlsFiles;

/// A lookup of one environment variable (`std::env::var` in the binary, a map in tests).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, as a [`Lookup`]. A variable that is not valid UTF-8 is unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

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
fn non_empty(env: Lookup<'_>, variable: &str) -> Option<String> {
    env(variable).filter(|value| !value.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn tls_is_off_unless_use_tls_is_true() {
        assert_eq!(grpc_tls(&env(&[])), Ok(None));
        assert_eq!(
            grpc_tls(&env(&[
                ("GRPC_SERVER_USE_TLS", "false"),
                ("GRPC_SERVER_TLS_CERT", "/c")
            ])),
            Ok(None)
        );
    }

    #[test]
    fn tls_reads_upstreams_variables() {
        let files = grpc_tls(&env(&[
            ("GRPC_SERVER_USE_TLS", "True"),
            ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
            ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
            ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
            ("GRPC_CLIENT_TLS_SAN", "envoy.internal"),
        ]))
        .expect("valid")
        .expect("on");
        assert_eq!(files.cert, PathBuf::from("/tls/cert.pem"));
        assert_eq!(files.key, PathBuf::from("/tls/key.pem"));
        assert_eq!(files.client_ca, Some(PathBuf::from("/tls/ca.pem")));
        assert_eq!(files.client_san.as_deref(), Some("envoy.internal"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let error = grpc_tls(&env(&[("GRPC_SERVER_USE_TLS", "yes")])).expect_err("not a bool");
        assert_eq!(error.variable, "GRPC_SERVER_USE_TLS");
        let error = grpc_tls(&env(&[
            ("GRPC_SERVER_USE_TLS", "1"),
            ("GRPC_SERVER_TLS_CERT", "/c"),
        ]))
        .expect_err("no key");
        assert_eq!(error.variable, "GRPC_SERVER_TLS_KEY");
        let error = grpc_tls(&env(&[
            ("GRPC_SERVER_USE_TLS", "1"),
            ("GRPC_SERVER_TLS_CERT", "/c"),
            ("GRPC_SERVER_TLS_KEY", "/k"),
            ("GRPC_CLIENT_TLS_SAN", "x"),
        ]))
        .expect_err("SAN without CA");
        assert_eq!(error.variable, "GRPC_CLIENT_TLS_SAN");
    }
}
