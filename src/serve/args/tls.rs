//! TLS on the gRPC listener.

use std::path::PathBuf;
use std::time::Duration;

use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::TLS)]
pub struct TlsArgs {
    /// TLS on the gRPC listener: the PEM certificate chain (with --grpc-tls-key)
    ///
    /// Also read from upstream's `GRPC_SERVER_TLS_CERT`: when this flag is unset and
    /// upstream's `GRPC_SERVER_USE_TLS` is true, upstream's four TLS variables apply.
    #[arg(long, env = "RLS_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert
    ///
    /// Also read from upstream's `GRPC_SERVER_TLS_KEY` (see --grpc-tls-cert).
    #[arg(long, env = "RLS_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
    /// mTLS: PEM CA certificates; clients must present a certificate they signed
    ///
    /// Also read from upstream's `GRPC_CLIENT_TLS_CACERT` (see --grpc-tls-cert).
    #[arg(long, env = "RLS_GRPC_TLS_CLIENT_CA", requires = "grpc_tls_cert")]
    pub grpc_tls_client_ca: Option<PathBuf>,
    /// mTLS: the client certificate must also carry this DNS name or IP address as a SAN
    ///
    /// Also read from upstream's `GRPC_CLIENT_TLS_SAN` (see --grpc-tls-cert).
    #[arg(long, env = "RLS_GRPC_TLS_CLIENT_SAN", requires = "grpc_tls_client_ca")]
    pub grpc_tls_client_san: Option<String>,
    /// How often the TLS files are re-read; changes apply to new connections [range: 100ms to 1h]
    #[arg(long, env = "RLS_GRPC_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(1)).parser())]
    pub grpc_tls_reload_interval: Duration,
}
