//! `serve`'s command-line flags (and their `RLS_*` variables), as clap parses them, one group
//! per concern; each group is one heading of `serve --help`, in the order below. Nothing here
//! is checked beyond what clap's value parsers check (ranges of sizes and durations):
//! [`super::ServeSettings::from_args`] validates them once into typed settings.

mod engine;
mod global;
mod limits;
mod listeners;
mod quota;
mod redis;
mod telemetry;
mod tls;
mod transport;

pub use engine::EngineArgs;
pub use global::GlobalArgs;
pub use limits::{ConfigReadArgs, LimitsArgs};
pub use listeners::{DebugAddr, ListenerArgs};
pub use quota::{QuotaArgs, UnmatchedArg};
pub use redis::RedisArgs;
pub use telemetry::{StatsdFormatArg, TelemetryArgs};
pub use tls::TlsArgs;
pub use transport::TransportArgs;

/// The headings of `serve --help`, in their order.
pub const LISTENERS: &str = "Listeners";
pub const LIMITS: &str = "Limits config";
pub const ENGINE: &str = "Engine and memory";
pub const REDIS: &str = "Redis (regional origin)";
pub const GLOBAL: &str = "SQL and global counters";
pub const XDS: &str = "xDS";
pub const TLS: &str = "TLS";
pub const TRANSPORT: &str = "Transport bounds";
pub const QUOTA: &str = "RLQS (rate_limit_quota)";
pub const TELEMETRY: &str = "Telemetry (logging/metrics)";

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub listeners: ListenerArgs,
    #[command(flatten)]
    pub limits: LimitsArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The xDS config source (instead of --config).
    #[command(flatten)]
    pub xds: crate::xds::XdsArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub transport: TransportArgs,
    #[command(flatten)]
    pub quota: QuotaArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// `--windows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WindowsArg {
    /// The current window plus the previous one, weighted by what is left of it (ours)
    Sliding,
    /// The current window alone, reset on the unit's boundary (envoyproxy/ratelimit's)
    Fixed,
}

impl From<WindowsArg> for gcounter_engine::Windows {
    fn from(arg: WindowsArg) -> Self {
        match arg {
            WindowsArg::Sliding => Self::Sliding,
            WindowsArg::Fixed => Self::Fixed,
        }
    }
}

/// `--response-header-style`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeaderStyleArg {
    /// RateLimit-Limit, -Remaining and -Reset (upstream's)
    Draft03,
    /// RateLimit-Policy and RateLimit (the IETF draft's latest)
    Structured,
}
