//! `serve`'s flags for the xDS config source (flattened into `ServeArgs`), as clap parses
//! them; [`super::XdsSettings::from_args`] checks them.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::ReadLimits;
use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
pub struct XdsArgs {
    /// Limits from an xDS management server instead of --config (ADS, state of the world,
    /// `type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig`, as Envoy Gateway
    /// serves them): `host:port` (upstream's CONFIG_GRPC_XDS_SERVER_URL), `http://host:port`,
    /// or `https://host:port` (TLS, as --config-xds-tls).
    #[arg(long, env = "RLS_CONFIG_XDS_SERVER", conflicts_with = "config")]
    pub config_xds_server: Option<String>,
    /// The node id sent to the xDS server (it serves a snapshot per node id).
    #[arg(long, env = "RLS_CONFIG_XDS_NODE_ID", default_value = "default")]
    pub config_xds_node_id: String,
    /// The node's metadata: `key=value,key2=value2` (string values), as upstream's
    /// CONFIG_GRPC_XDS_NODE_METADATA.
    #[arg(long, env = "RLS_CONFIG_XDS_NODE_METADATA", default_value = "")]
    pub config_xds_node_metadata: String,
    /// Headers sent on the xDS stream: `name:value,name2:value2`, as upstream's
    /// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS.
    #[arg(
        long,
        env = "RLS_CONFIG_XDS_HEADERS",
        default_value = "",
        hide_env_values = true
    )]
    pub config_xds_headers: String,
    /// TLS to the xDS server (needs --config-xds-ca).
    #[arg(long, env = "RLS_CONFIG_XDS_TLS")]
    pub config_xds_tls: bool,
    /// PEM CA certificates that sign the xDS server's certificate.
    #[arg(long, env = "RLS_CONFIG_XDS_CA")]
    pub config_xds_ca: Option<PathBuf>,
    /// PEM client certificate chain for mTLS to the xDS server (with --config-xds-client-key).
    #[arg(long, env = "RLS_CONFIG_XDS_CLIENT_CERT")]
    pub config_xds_client_cert: Option<PathBuf>,
    /// PEM private key of --config-xds-client-cert.
    #[arg(long, env = "RLS_CONFIG_XDS_CLIENT_KEY")]
    pub config_xds_client_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry (else the URL's host).
    #[arg(long, env = "RLS_CONFIG_XDS_SAN")]
    pub config_xds_san: Option<String>,
    /// Delay between attempts while the xDS server cannot be reached (±50 % jitter), and the
    /// bound on one attempt to connect and open the stream (upstream's
    /// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL).
    #[arg(long, env = "RLS_CONFIG_XDS_CONNECT_RETRY_INTERVAL", default_value = "3s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_connect_retry_interval: Duration,
    /// After an established stream ends: first delay before reconnecting (upstream's
    /// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL).
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_INITIAL", default_value = "10s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_backoff_initial: Duration,
    /// Longest delay before reconnecting (upstream's XDS_CLIENT_BACKOFF_MAX_INTERVAL).
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_MAX", default_value = "60s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_backoff_max: Duration,
    /// Each further delay is the previous one × this factor (upstream's
    /// XDS_CLIENT_BACKOFF_RANDOM_FACTOR, which its back-off library uses as the factor).
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_FACTOR", default_value_t = 0.5)]
    pub config_xds_backoff_factor: f64,
    /// Draw each delay between the initial one and the computed one (upstream's
    /// XDS_CLIENT_BACKOFF_JITTER).
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set)]
    pub config_xds_backoff_jitter: bool,
    /// Bytes of one xDS response; a bigger one ends the stream (upstream's
    /// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
    #[arg(long, env = "RLS_CONFIG_XDS_MAX_MESSAGE_BYTES", default_value_t = ReadLimits::DEFAULT_MAX_BYTES, value_parser = clap::value_parser!(u64).range(1024..=1024 * 1024 * 1024))]
    pub config_xds_max_message_bytes: u64,
    /// Serve before the first config arrived (every request answered OK, no limits); without
    /// it nothing is served until the xDS server sent a config (upstream's
    /// FORCE_START_WITHOUT_INITIAL_CONFIG).
    #[arg(long, env = "RLS_FORCE_START_WITHOUT_INITIAL_CONFIG")]
    pub force_start_without_initial_config: bool,
}
