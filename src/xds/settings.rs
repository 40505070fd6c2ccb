//! The xDS config source's settings, checked once from [`XdsArgs`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use http::Uri;

use super::args::XdsArgs;

/// Where the limits come from, and how.
#[derive(Debug, Clone)]
pub struct XdsSettings {
    /// `http://host:port` (the transport adds TLS when `tls` is set).
    pub server: Uri,
    /// The host the connection is made to (and the TLS name without `san`).
    pub host: String,
    pub port: u16,
    pub node_id: String,
    /// Node metadata (string values), in the order given.
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata on the stream.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub tls: Option<XdsTls>,
    pub connect_retry_interval: Duration,
    pub backoff: Backoff,
    pub max_message_bytes: usize,
    /// Serve before the first config arrived.
    pub force_start: bool,
}

/// TLS to the xDS server.
#[derive(Debug, Clone)]
pub struct XdsTls {
    pub ca: PathBuf,
    /// Client certificate and key (mTLS).
    pub client: Option<(PathBuf, PathBuf)>,
    /// The name the server's certificate must carry.
    pub server_name: String,
}

/// The delay before reconnecting after an established stream ended, as upstream's back-off
/// library (`jpillora/backoff`) computes it: `initial × factor^attempt`, drawn between
/// `initial` and that with jitter, within `[initial, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub factor: f64,
    pub jitter: bool,
}

impl Backoff {
    /// The delay after `attempt` earlier reconnections (0 for the first).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let initial = self.initial.as_secs_f64();
        let exponent = i32::try_from(attempt.min(64)).unwrap_or(64);
        let mut delay = initial * self.factor.powi(exponent);
        if self.jitter {
            delay = random * (delay - initial) + initial;
        }
        let delay = delay.clamp(initial, self.max.as_secs_f64().max(initial));
        Duration::try_from_secs_f64(delay).unwrap_or(self.max)
    }
}

impl XdsSettings {
    /// `None` when no xDS server is configured (limits come from `--config`).
    pub fn from_args(args: &XdsArgs) -> anyhow::Result<Option<Self>> {
        let Some(server) = &args.config_xds_server else {
            if args.force_start_without_initial_config {
                bail!(
                    "--force-start-without-initial-config (FORCE_START_WITHOUT_INITIAL_CONFIG) \
                     needs the xDS config source (--config-xds-server, CONFIG_TYPE=GRPC_XDS_SOTW): \
                     a config file is always loaded before serving"
                );
            }
            return Ok(None);
        };
        let (scheme_tls, authority) = match server.split_once("://") {
            None => (false, server.as_str()),
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            Some((scheme, _)) => bail!(
                "--config-xds-server: scheme {scheme:?} is neither http nor https (or give host:port)"
            ),
        };
        let authority = authority.trim_end_matches('/');
        let server: Uri = format!("http://{authority}")
            .parse()
            .with_context(|| format!("--config-xds-server: {server:?} is not host:port"))?;
        let (Some(host), Some(port)) = (server.host(), server.port_u16()) else {
            bail!("--config-xds-server: {server:?} needs a host and a port (host:port)");
        };
        if server.path() != "/" {
            bail!("--config-xds-server: {server:?} must be host:port with no path");
        }
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();

        let tls = if args.config_xds_tls || scheme_tls {
            let Some(ca) = args.config_xds_ca.clone() else {
                bail!(
                    "TLS to the xDS server needs --config-xds-ca (CONFIG_GRPC_XDS_SERVER_TLS_CACERT): \
                     the CA that signs its certificate"
                );
            };
            let client = match (&args.config_xds_client_cert, &args.config_xds_client_key) {
                (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
                (None, None) => None,
                _ => bail!(
                    "--config-xds-client-cert and --config-xds-client-key go together \
                     (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY)"
                ),
            };
            Some(XdsTls {
                ca,
                client,
                server_name: args.config_xds_san.clone().unwrap_or_else(|| host.clone()),
            })
        } else {
            for (set, flag) in [
                (args.config_xds_ca.is_some(), "--config-xds-ca"),
                (
                    args.config_xds_client_cert.is_some(),
                    "--config-xds-client-cert",
                ),
                (
                    args.config_xds_client_key.is_some(),
                    "--config-xds-client-key",
                ),
                (args.config_xds_san.is_some(), "--config-xds-san"),
            ] {
                if set {
                    bail!(
                        "{flag} needs TLS to the xDS server (--config-xds-tls, CONFIG_GRPC_XDS_SERVER_USE_TLS)"
                    );
                }
            }
            None
        };
        if !(args.config_xds_backoff_factor.is_finite() && args.config_xds_backoff_factor > 0.0) {
            bail!(
                "--config-xds-backoff-factor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR) must be a positive number, got {}",
                args.config_xds_backoff_factor
            );
        }
        if args.config_xds_backoff_max < args.config_xds_backoff_initial {
            bail!(
                "--config-xds-backoff-max ({:?}) is shorter than --config-xds-backoff-initial ({:?})",
                args.config_xds_backoff_max,
                args.config_xds_backoff_initial
            );
        }
        if args.config_xds_node_id.is_empty() {
            bail!("--config-xds-node-id (CONFIG_GRPC_XDS_NODE_ID) must not be empty");
        }
        Ok(Some(Self {
            server,
            host,
            port,
            node_id: args.config_xds_node_id.clone(),
            node_metadata: pairs(
                "--config-xds-node-metadata (CONFIG_GRPC_XDS_NODE_METADATA)",
                &args.config_xds_node_metadata,
                '=',
            )?,
            headers: headers(&args.config_xds_headers)?,
            tls,
            connect_retry_interval: args.config_xds_connect_retry_interval,
            backoff: Backoff {
                initial: args.config_xds_backoff_initial,
                max: args.config_xds_backoff_max,
                factor: args.config_xds_backoff_factor,
                jitter: args.config_xds_backoff_jitter,
            },
            max_message_bytes: usize::try_from(args.config_xds_max_message_bytes)
                .unwrap_or(usize::MAX),
            force_start: args.force_start_without_initial_config,
        }))
    }
}

/// `k<sep>v,k2<sep>v2` (empty: none). An entry without the separator is refused (upstream
/// skips it silently for the node metadata).
fn pairs(what: &str, text: &str, separator: char) -> anyhow::Result<Vec<(String, String)>> {
    text.split(',')
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once(separator) {
            Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
            _ => bail!("{what}: {entry:?} is not key{separator}value"),
        })
        .collect()
}

fn headers(text: &str) -> anyhow::Result<Vec<(http::HeaderName, http::HeaderValue)>> {
    const WHAT: &str = "--config-xds-headers (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)";
    pairs(WHAT, text, ':')?
        .into_iter()
        .map(|(name, value)| {
            let header = http::HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
                .with_context(|| format!("{WHAT}: {name:?} is not a header name"))?;
            let value = http::HeaderValue::from_str(value.trim())
                .with_context(|| format!("{WHAT}: the value of {name:?} is not a header value"))?;
            Ok((header, value))
        })
        .collect()
}

#[cfg(test)]
mod tests;
