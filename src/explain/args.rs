//! `explain`'s command line.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::serve::args::ConfigReadArgs;

#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// The limits: a YAML file, or a directory of them (as `serve --config`)
    ///
    /// Without it, the limits of --service are used (its `/rlconfig?format=yaml`).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub read: ConfigReadArgs,
    /// A running service's admin address (`http://host:port`): its answer now, not consuming
    ///
    /// Every descriptor is asked with `hitsAddend: 0` through `POST /json`, which checks
    /// without counting a hit; with --config, its `/rlconfig` is compared with the file's.
    #[arg(long, value_name = "URL")]
    pub service: Option<String>,
    /// The request's domain (with --descriptor)
    #[arg(long)]
    pub domain: Option<String>,
    /// A descriptor of the request: its entries in order, `key=value` joined by `,`
    ///
    /// Repeat it for several descriptors. A key cannot hold `=` or `,`, a value cannot hold
    /// `,` (use --json-request for those).
    #[arg(long = "descriptor", value_name = "KEY=VALUE[,...]")]
    pub descriptors: Vec<String>,
    /// The request's `hits_addend` (with --descriptor; 0 counts as 1)
    #[arg(long, default_value_t = 0)]
    pub hits_addend: u32,
    /// A whole request in upstream's JSON form (the body of `POST /json`)
    ///
    /// Instead of --domain and --descriptor: per-descriptor `hitsAddend`, `limit` overrides
    /// and `isNegativeHits` included.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["domain", "descriptors", "envoy"])]
    pub json_request: Option<PathBuf>,
    /// An Envoy config: the descriptors come from --request through its `rate_limits`
    ///
    /// A bootstrap, a listener, a route configuration (then give --domain) or an admin
    /// `/config_dump`.
    #[arg(long, value_name = "FILE", conflicts_with = "descriptors")]
    pub envoy: Option<PathBuf>,
    /// The HTTP request for --envoy: `METHOD /path?query`
    #[arg(long, value_name = "REQUEST", requires = "envoy")]
    pub request: Option<String>,
    /// A request header for --envoy, `name: value` (repeat it for several)
    #[arg(
        long = "header",
        short = 'H',
        value_name = "NAME: VALUE",
        requires = "envoy"
    )]
    pub headers: Vec<String>,
    /// The request's authority (`:authority`) for --envoy (default: the `host` header, or
    /// `localhost`)
    #[arg(long, requires = "envoy")]
    pub authority: Option<String>,
    /// The address the request comes from, for --envoy (the connection's peer)
    #[arg(long, default_value = "127.0.0.1", requires = "envoy")]
    pub remote_address: IpAddr,
    /// A response header for --envoy, `name: value`, read by a `hits_addend` at stream done
    #[arg(
        long = "response-header",
        value_name = "NAME: VALUE",
        requires = "envoy"
    )]
    pub response_headers: Vec<String>,
    /// Only this listener of --envoy
    #[arg(long, requires = "envoy")]
    pub listener: Option<String>,
    /// Print the explanation as JSON
    #[arg(long)]
    pub json: bool,
}
