//! `serve`'s flags for the xDS config source (flattened into `ServeArgs`), as clap parses
//! them; [`super::XdsSettings::from_args`] checks them.

use std::path::PathBuf;
use std::time::Duration;

use crate::byte_size_arg::{ByteSizeRange, gib, kib};
use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = crate::serve::args::XDS)]
pub struct XdsArgs {
    /// Limits from an xDS management server instead of --config: `[http[s]://]host:port`
    ///
    /// ADS, state of the world, `type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig`,
    /// as Envoy Gateway serves them. `https://` means TLS, as --config-xds-tls. With no
    /// arguments, set from upstream's `CONFIG_GRPC_XDS_SERVER_URL` when its `CONFIG_TYPE` is
    /// `GRPC_XDS_SOTW`.
    #[arg(long, env = "RLS_CONFIG_XDS_SERVER", conflicts_with = "config")]
    pub config_xds_server: Option<String>,
    /// The node id sent to the xDS server (it serves a snapshot per node id)
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_NODE_ID`.
    #[arg(long, env = "RLS_CONFIG_XDS_NODE_ID", default_value = "default")]
    pub config_xds_node_id: String,
    /// The node's metadata: `key=value,key2=value2` (string values)
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_NODE_METADATA`.
    #[arg(long, env = "RLS_CONFIG_XDS_NODE_METADATA", default_value = "")]
    pub config_xds_node_metadata: String,
    /// Headers sent on the xDS stream: `name:value,name2:value2`
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`.
    #[arg(
        long,
        env = "RLS_CONFIG_XDS_HEADERS",
        default_value = "",
        hide_env_values = true
    )]
    pub config_xds_headers: String,
    /// TLS to the xDS server (needs --config-xds-ca)
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_SERVER_USE_TLS`.
    #[arg(long, env = "RLS_CONFIG_XDS_TLS")]
    pub config_xds_tls: bool,
    /// PEM CA certificates that sign the xDS server's certificate
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`.
    #[arg(long, env = "RLS_CONFIG_XDS_CA")]
    pub config_xds_ca: Option<PathBuf>,
    /// PEM client certificate chain for mTLS to the xDS server (with --config-xds-client-key)
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`.
    #[arg(long, env = "RLS_CONFIG_XDS_CLIENT_CERT")]
    pub config_xds_client_cert: Option<PathBuf>,
    /// PEM private key of --config-xds-client-cert
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_CLIENT_TLS_KEY`.
    #[arg(long, env = "RLS_CONFIG_XDS_CLIENT_KEY")]
    pub config_xds_client_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry (else the URL's host)
    ///
    /// With no arguments, set from upstream's `CONFIG_GRPC_XDS_SERVER_TLS_SAN`.
    #[arg(long, env = "RLS_CONFIG_XDS_SAN")]
    pub config_xds_san: Option<String>,
    /// Delay between attempts while the xDS server cannot be reached [range: 10ms to 1h]
    ///
    /// ±50 % jitter; also the bound on one attempt to connect and open the stream. With no
    /// arguments, set from upstream's `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`.
    #[arg(long, env = "RLS_CONFIG_XDS_CONNECT_RETRY_INTERVAL", default_value = "3s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_connect_retry_interval: Duration,
    /// After an established stream ends: the first delay before reconnecting [range: 10ms to 1h]
    ///
    /// With no arguments, set from upstream's `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`.
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_INITIAL", default_value = "10s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_backoff_initial: Duration,
    /// The longest delay before reconnecting [range: 10ms to 1h]
    ///
    /// With no arguments, set from upstream's `XDS_CLIENT_BACKOFF_MAX_INTERVAL`.
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_MAX", default_value = "60s", value_parser = DurationRange::new(millis(10), hours(1)).parser())]
    pub config_xds_backoff_max: Duration,
    /// Each further delay is the previous one × this factor
    ///
    /// With no arguments, set from upstream's `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` (which its
    /// back-off library uses as the factor).
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_FACTOR", default_value_t = 0.5)]
    pub config_xds_backoff_factor: f64,
    /// Draw each delay between the initial one and the computed one
    ///
    /// With no arguments, set from upstream's `XDS_CLIENT_BACKOFF_JITTER`.
    #[arg(long, env = "RLS_CONFIG_XDS_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set)]
    pub config_xds_backoff_jitter: bool,
    /// Bytes of one xDS response; a bigger one ends the stream [range: 1KiB to 1GiB]
    ///
    /// With no arguments, set from upstream's `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`.
    #[arg(long, env = "RLS_CONFIG_XDS_MAX_MESSAGE_BYTES", default_value = "16MiB", value_parser = ByteSizeRange::new(kib(1), gib(1)).parser::<u64>())]
    pub config_xds_max_message_bytes: u64,
    /// Serve before the first config arrived: every request answered OK, no limits
    ///
    /// Without it nothing is served until the xDS server sent a config. With no arguments,
    /// set from upstream's `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    #[arg(long, env = "RLS_FORCE_START_WITHOUT_INITIAL_CONFIG")]
    pub force_start_without_initial_config: bool,
}
