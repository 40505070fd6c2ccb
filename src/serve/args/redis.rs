//! The regional origin: a Redis (node, cluster or Sentinel) shared by a region's processes.

use std::path::PathBuf;
use std::time::Duration;

use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::REDIS)]
pub struct RedisArgs {
    /// Redis URL (`redis://`, `rediss://` for TLS), or a comma-separated list of cluster nodes
    ///
    /// User and password go in the URL. Unset: the region is this process. With no arguments,
    /// set from upstream's `REDIS_URL`, `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_AUTH`,
    /// `REDIS_SENTINEL_AUTH` and `REDIS_TLS`.
    #[arg(
        long,
        env = "RLS_REDIS_URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_url: Vec<String>,
    /// Treat --redis-url as a Redis Cluster even with a single seed node
    ///
    /// With no arguments, set when upstream's `REDIS_TYPE` is `cluster`.
    #[arg(long, env = "RLS_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// Redis Sentinel: the name of the master set; --redis-url then lists the sentinels
    ///
    /// The name of `sentinel monitor <name> ...`. The sentinels' URLs are
    /// `redis://[user:password@]host:port`, with the sentinels' own credentials.
    #[arg(
        long,
        env = "RLS_REDIS_SENTINEL_MASTER",
        conflicts_with = "redis_cluster"
    )]
    pub redis_sentinel_master: Option<String>,
    /// With --redis-sentinel-master: `password` or `user:password` of the master
    ///
    /// The master's (and its replicas'), not the sentinels'.
    #[arg(
        long,
        env = "RLS_REDIS_SENTINEL_MASTER_AUTH",
        requires = "redis_sentinel_master",
        hide_env_values = true
    )]
    pub redis_sentinel_master_auth: Option<String>,
    /// PEM file of the CA(s) that signed Redis's certificate (instead of the system's roots)
    ///
    /// For `rediss://`. With no arguments, set from upstream's `REDIS_TLS_CACERT`.
    #[arg(long, env = "RLS_REDIS_TLS_CA")]
    pub redis_tls_ca: Option<PathBuf>,
    /// PEM client certificate (chain) for a Redis with `tls-auth-clients yes`
    ///
    /// With no arguments, set from upstream's `REDIS_TLS_CLIENT_CERT`.
    #[arg(long, env = "RLS_REDIS_TLS_CERT", requires = "redis_tls_key")]
    pub redis_tls_cert: Option<PathBuf>,
    /// PEM private key of --redis-tls-cert
    ///
    /// With no arguments, set from upstream's `REDIS_TLS_CLIENT_KEY`.
    #[arg(long, env = "RLS_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    pub redis_tls_key: Option<PathBuf>,
    /// Check Redis's certificate chain but not that it names the host (one node only)
    ///
    /// For a certificate issued for another name, e.g. GCP Memorystore's. With no arguments,
    /// set from upstream's `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`.
    #[arg(long, env = "RLS_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")]
    pub redis_tls_skip_hostname_verification: bool,
    /// Prefix of every Redis key, so deployments can share a Redis (no `{` or `}`)
    ///
    /// With no arguments, set from upstream's `CACHE_KEY_PREFIX`.
    #[arg(long, env = "RLS_REDIS_PREFIX", default_value = "rls:")]
    pub redis_prefix: String,
    /// Deadline of a synchronous Redis read (cold, stale, strict) [range: 1ms to 1m]
    #[arg(long, env = "RLS_REDIS_READ_TIMEOUT", default_value = "50ms", value_parser = DurationRange::new(millis(1), millis(60_000)).parser())]
    pub redis_read_timeout: Duration,
    /// Deadline of one replay round trip [range: 1ms to 1h]
    ///
    /// With no arguments, set from upstream's `REDIS_TIMEOUT`.
    #[arg(long, env = "RLS_REDIS_REPLAY_TIMEOUT", default_value = "1s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub redis_replay_timeout: Duration,
    /// How long a count read from Redis is trusted before a decision re-reads it [range: 1ms to 24h]
    #[arg(long, env = "RLS_FRESHNESS", default_value = "3s", value_parser = DurationRange::new(millis(1), hours(24)).parser())]
    pub freshness: Duration,
    /// Redis of the envoyproxy/ratelimit this service replaces: carry its counts over at the switch
    ///
    /// Off by default. When set, the first time a counter is seen its count in the replaced
    /// service's Redis (upstream's key layout, --carry-over-key-prefix, the window that began
    /// before the switch, and the one before it) is read and seeded into the region's count
    /// once, so a quota 7/10 used before the switch allows 3 after it. Upstream's keys are only
    /// read, never written. A URL as --redis-url's (one node; may be the same server).
    #[arg(long, env = "RLS_CARRY_OVER_FROM_REDIS", hide_env_values = true)]
    pub carry_over_from_redis: Option<String>,
    /// With --carry-over-from-redis: the Redis upstream kept per-second limits in
    ///
    /// Upstream's `REDIS_PERSECOND_URL` with `REDIS_PERSECOND=true`; unset: per-second counts
    /// are read from --carry-over-from-redis too.
    #[arg(
        long,
        env = "RLS_CARRY_OVER_PER_SECOND_REDIS",
        requires = "carry_over_from_redis",
        hide_env_values = true
    )]
    pub carry_over_per_second_redis: Option<String>,
    /// With --carry-over-from-redis: upstream's `CACHE_KEY_PREFIX`, the start of its keys
    ///
    /// With no arguments, set from upstream's `CACHE_KEY_PREFIX`.
    #[arg(long, env = "RLS_CARRY_OVER_KEY_PREFIX", default_value = "")]
    pub carry_over_key_prefix: String,
    /// Deadline of one carry-over read; a slower one lets the counter start without it [range: 1ms to 10s]
    #[arg(long, env = "RLS_CARRY_OVER_TIMEOUT", default_value = "20ms", value_parser = DurationRange::new(millis(1), millis(10_000)).parser())]
    pub carry_over_timeout: Duration,
    /// Carry-over reads per second at most; past it a counter starts without it [range: 1 to 1000000]
    #[arg(long, env = "RLS_CARRY_OVER_MAX_READS_PER_SECOND", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub carry_over_max_reads_per_second: u32,
}
