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
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_upstreams_library() {
        let halving = Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        };
        // Upstream's defaults: a factor below 1 keeps every delay at the initial one.
        for attempt in 0..5 {
            assert_eq!(halving.delay(attempt, 0.9), Duration::from_secs(10));
        }
        let doubling = Backoff {
            factor: 2.0,
            jitter: false,
            ..halving
        };
        assert_eq!(doubling.delay(0, 0.0), Duration::from_secs(10));
        assert_eq!(doubling.delay(1, 0.0), Duration::from_secs(20));
        assert_eq!(doubling.delay(3, 0.0), Duration::from_secs(60));
        assert_eq!(doubling.delay(1000, 0.0), Duration::from_secs(60));
        let jittered = Backoff {
            jitter: true,
            ..doubling
        };
        assert_eq!(jittered.delay(1, 0.5), Duration::from_secs(15));
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        xds: XdsArgs,
    }

    fn settings(argv: &[&str]) -> Result<Option<XdsSettings>, String> {
        use clap::Parser;
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        XdsSettings::from_args(&cli.xds).map_err(|e| e.to_string())
    }

    #[test]
    fn the_server_url_and_tls_settings_are_checked() {
        let plain = settings(&["--config-xds-server", "localhost:18000"]);
        let Ok(Some(plain)) = plain else {
            panic!("{plain:?}")
        };
        assert_eq!((plain.host.as_str(), plain.port), ("localhost", 18000));
        assert!(plain.tls.is_none());
        assert_eq!(plain.node_id, "default");
        assert!(!plain.force_start);
        assert!(matches!(settings(&[]), Ok(None)));

        let refused = |argv: &[&str], needle: &str| {
            let result = settings(argv);
            assert!(
                result.as_ref().is_err_and(|e| e.contains(needle)),
                "{argv:?}: {result:?}"
            );
        };
        refused(
            &["--config-xds-server", "https://h:1"],
            "needs --config-xds-ca",
        );
        refused(
            &["--config-xds-server", "grpc://h:1"],
            "neither http nor https",
        );
        refused(&["--config-xds-server", "h"], "needs a host and a port");
        refused(&["--config-xds-server", "h:1/x"], "no path");
        refused(
            &["--config-xds-server", "h:1", "--config-xds-ca", "ca.pem"],
            "needs TLS",
        );
        refused(
            &[
                "--config-xds-server",
                "h:1",
                "--config-xds-tls",
                "--config-xds-ca",
                "ca.pem",
                "--config-xds-client-cert",
                "c.pem",
            ],
            "go together",
        );
        refused(
            &["--force-start-without-initial-config"],
            "needs the xDS config source",
        );
        refused(
            &["--config-xds-server", "h:1", "--config", "x.yaml"],
            "cannot be used with",
        );
        refused(
            &[
                "--config-xds-server",
                "h:1",
                "--config-xds-backoff-initial",
                "2s",
                "--config-xds-backoff-max",
                "1s",
            ],
            "shorter than",
        );

        let tls = settings(&[
            "--config-xds-server",
            "https://[::1]:9",
            "--config-xds-ca",
            "ca.pem",
            "--config-xds-san",
            "xds.internal",
        ]);
        let Ok(Some(tls)) = tls else {
            panic!("{tls:?}")
        };
        assert_eq!(tls.host, "::1");
        assert_eq!(
            tls.tls.map(|t| t.server_name),
            Some("xds.internal".to_owned())
        );
    }

    #[test]
    fn pairs_and_headers_are_checked() {
        let parsed = pairs("m", "a=1,b=x=y", '=').map_err(|e| e.to_string());
        assert_eq!(
            parsed,
            Ok(vec![("a".into(), "1".into()), ("b".into(), "x=y".into())])
        );
        assert_eq!(pairs("m", "", '=').map_err(|e| e.to_string()), Ok(vec![]));
        let refused = pairs("m", "a=1,b", '=').map_err(|e| e.to_string());
        assert_eq!(refused, Err("m: \"b\" is not key=value".to_owned()));

        let parsed = headers("X-Token: abc,y:2").map_err(|e| e.to_string());
        assert!(
            parsed
                .as_ref()
                .is_ok_and(|h| h.len() == 2 && h[0].0 == "x-token" && h[0].1 == "abc"),
            "{parsed:?}"
        );
        assert!(headers("bad name:1").is_err());
        assert!(headers("a:x\u{1}y").is_err());
    }
}
