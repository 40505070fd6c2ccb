//! The regional origin of a region made of several processes: Redis, one node or a cluster.
//!
//! A cell is one hash (layout in [`key`]): a G-Counter with one field per process, holding
//! that process's cumulative count of the cell. Replay runs [`REPLAY_SCRIPT`] per cell (keep
//! the field's `max`, refresh the expiry, return the sum) in one pipelined round trip (one per
//! hash slot on a cluster, sent together); read is `HGETALL`. Because a field only takes the
//! max, a replay sent twice (a retry after a timeout whose command did land, a cluster
//! redirect) counts once. Connections are made lazily and re-made by themselves: start-up
//! never waits for Redis, and an origin error only makes the engine decide from local counts.

mod cluster;
mod key;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_routing::Slot;
use redis::{Client, ErrorKind, Pipeline, RedisError, ServerErrorKind, TlsCertificates, Value};

use cluster::LazyCluster;
use gcounter_engine::cell_key::CellKey;
use gcounter_engine::redact::{redact_in, redact_url};
use gcounter_engine::regional::{CellRead, OriginError, OriginFuture, RegionalOrigin};

/// Each connection attempt gives up after this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A reply slower than this fails the call (the guard's timeouts are usually shorter).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Keys outlive any real window; this only keeps `PEXPIRE` from overflowing in Redis.
const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3_600 * 1_000;

/// Publish one process's cumulative count of a cell and return the cell's total.
/// KEYS[1] the cell; ARGV[1] the process's field, ARGV[2] its cumulative count, ARGV[3] TTL ms.
/// Lua numbers are doubles: exact far beyond any count a window can reach.
const REPLAY_SCRIPT: &str = r"
local own = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > own then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local total = 0
for _, n in ipairs(redis.call('HVALS', KEYS[1])) do
  total = total + tonumber(n)
end
return total
";

/// Where the region's Redis is and how its keys are named.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS. Several URLs (or
    /// `cluster`) mean Redis Cluster; they are the seed nodes.
    pub urls: Vec<String>,
    /// Redis Cluster even with a single seed URL.
    pub cluster: bool,
    /// Prepended to every key (e.g. `rl:`); it may not contain `{` or `}`.
    pub key_prefix: String,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may carry a password.
        let urls: Vec<String> = self.urls.iter().map(|url| redact_url(url)).collect();
        f.debug_struct("RedisSettings")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// Settings the Redis origin cannot work with. Redis being down is never one of them.
#[derive(Debug, thiserror::Error)]
pub enum RedisConfigError {
    #[error("no Redis URL given")]
    NoUrl,
    #[error("Redis URL {url} is not usable: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("Redis key prefix {0:?} contains '{{' or '}}': Redis Cluster would hash on it")]
    BadPrefix(String),
    #[error("Redis cluster settings are not usable: {0}")]
    Cluster(String),
    #[error("the Redis origin must be created inside a Tokio runtime")]
    NoRuntime,
}

/// Installs ring as rustls' process-wide crypto provider, which `rediss://` needs.
///
/// Call it once at start-up, before the first TLS connection; calling it again, or after the
/// embedding program installed its own provider, changes nothing.
pub fn install_tls_provider() {
    // An error only says a provider is already installed: that one serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

enum Backend {
    /// Multiplexed, reconnects by itself.
    Single(ConnectionManager),
    /// Boxed: the cluster client is large and built once.
    Cluster(Box<LazyCluster>),
}

/// The regional origin backed by Redis. Cheap to share: hold it in an `Arc`.
pub struct RedisOrigin {
    backend: Backend,
    key_prefix: String,
    /// This process's field in every cell hash: random per start, so a restarted process
    /// adds a new component instead of overwriting what it published before.
    process: String,
    replay_script: redis::Script,
}

/// A field name no other process of the region will pick.
fn new_process_id() -> String {
    use std::hash::BuildHasher;
    // RandomState is seeded from the OS's randomness; mixing in the pid and the time only
    // guards against a platform where it is not.
    let seed = (std::process::id(), std::time::SystemTime::now());
    format!(
        "{:016x}",
        std::collections::hash_map::RandomState::new().hash_one(seed)
    )
}

impl RedisOrigin {
    /// Checks the settings and prepares connections without making any.
    ///
    /// Fails only on settings that can never work; an unreachable Redis is fine (calls fail
    /// until it answers). Must run inside a Tokio runtime.
    pub fn connect(settings: RedisSettings) -> Result<Self, RedisConfigError> {
        Self::connect_with_ca(settings, None)
    }

    /// [`connect`](Self::connect), trusting `root_ca_pem` (PEM) instead of the system's roots
    /// for `rediss://` URLs: for a Redis whose certificate a private CA signed.
    pub fn connect_with_ca(
        settings: RedisSettings,
        root_ca_pem: Option<Vec<u8>>,
    ) -> Result<Self, RedisConfigError> {
        let RedisSettings {
            urls,
            cluster,
            key_prefix,
        } = settings;
        if key_prefix.contains(['{', '}']) {
            return Err(RedisConfigError::BadPrefix(key_prefix));
        }
        if urls.is_empty() {
            return Err(RedisConfigError::NoUrl);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisConfigError::NoRuntime);
        }
        if root_ca_pem.is_some()
            && let Some(url) = urls.iter().find(|url| !is_tls_url(url))
        {
            return Err(bad_url(
                url,
                "a CA certificate is given but the URL is not rediss://",
            ));
        }
        let certificates = |root_cert: Vec<u8>| TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        let backend = if urls.len() == 1 && !cluster {
            let url = urls[0].as_str();
            let client = match root_ca_pem {
                Some(ca) => Client::build_with_tls(url, certificates(ca)),
                None => Client::open(url),
            }
            .map_err(|error| bad_url(url, &error.to_string()))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                // One quick retry per attempt; the next call starts a fresh attempt anyway.
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1));
            let manager = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|error| bad_url(url, &error.to_string()))?;
            Backend::Single(manager)
        } else {
            for url in &urls {
                Client::open(url.as_str()).map_err(|error| bad_url(url, &error.to_string()))?;
            }
            let mut builder = ClusterClient::builder(urls.iter().map(String::as_str))
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .overall_response_timeout(Some(2 * RESPONSE_TIMEOUT))
                // Redirects and slot refreshes need a few retries; long waits are the guard's.
                .retries(3)
                .min_retry_wait(50)
                .max_retry_wait(500);
            if let Some(ca) = root_ca_pem {
                builder = builder.certs(certificates(ca));
            }
            let client = builder
                .build()
                .map_err(|error| RedisConfigError::Cluster(error.to_string()))?;
            Backend::Cluster(Box::new(LazyCluster::new(client)))
        };
        Ok(Self {
            backend,
            key_prefix,
            process: new_process_id(),
            replay_script: redis::Script::new(REPLAY_SCRIPT),
        })
    }

    /// This process's field in the cell hashes.
    pub fn process_id(&self) -> &str {
        &self.process
    }

    /// Whether this origin talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// The Redis key of `key`'s cell hash.
    pub fn redis_key(&self, key: &CellKey) -> String {
        key::redis_key(&self.key_prefix, key)
    }

    async fn get(&self, name: &str) -> Result<CellRead, OriginError> {
        let mut get = redis::cmd("HGETALL");
        get.arg(name);
        let value = match &self.backend {
            Backend::Single(manager) => {
                let mut conn = manager.clone();
                get.query_async::<Value>(&mut conn)
                    .await
                    .map_err(origin_error)?
            }
            Backend::Cluster(cluster) => {
                let (mut conn, generation) = cluster.connection().await?;
                match get.query_async::<Value>(&mut conn).await {
                    Ok(value) => value,
                    Err(error) => return Err(cluster_error(cluster, generation, error)),
                }
            }
        };
        components(value, name, &self.process)
    }

    async fn add(&self, batch: &[(CellKey, u64)]) -> Result<Vec<u64>, OriginError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = batch.iter().map(|(key, _)| self.redis_key(key)).collect();
        let all: Vec<usize> = (0..batch.len()).collect();
        let replayed = match &self.backend {
            Backend::Single(manager) => {
                let mut conn = manager.clone();
                let values = self.send(&mut conn, batch, &names, &all).await;
                match values {
                    Ok(values) => Replayed::from_replies(&names, &all, values),
                    Err(error) => Replayed::failed(all.len(), origin_error(error)),
                }
            }
            Backend::Cluster(cluster) => {
                // A cluster pipeline must stay in one slot: one pipeline per slot, all at once.
                let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
                for (index, name) in names.iter().enumerate() {
                    slots.entry(Slot::for_key(name)).or_default().push(index);
                }
                let (conn, generation) = cluster.connection().await?;
                let names = &names;
                let sent = slots.into_values().map(|indices| {
                    let mut conn = conn.clone();
                    async move {
                        let values = self.send(&mut conn, batch, names, &indices).await;
                        (indices, values)
                    }
                });
                let mut replayed = Replayed::new(batch.len());
                for (indices, values) in join_all(sent).await {
                    let part = match values {
                        Ok(values) => Replayed::from_replies(names, &indices, values),
                        Err(error) => {
                            let error = cluster_error(cluster, generation, error);
                            Replayed::failed(indices.len(), error)
                        }
                    };
                    replayed.absorb(&indices, part);
                }
                replayed
            }
        };
        replayed.into_totals()
    }

    /// One pipeline for the `indices` entries; if Redis lost the script (a restart, a
    /// `SCRIPT FLUSH`, a new cluster node), load it and send the same pipeline again, which
    /// is harmless since publishing a cumulative count is idempotent.
    async fn send<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        batch: &[(CellKey, u64)],
        names: &[String],
        indices: &[usize],
    ) -> Result<Vec<Value>, RedisError> {
        let pipe = self.replay_pipeline(batch, names, indices);
        let values = pipe.query_async::<Vec<Value>>(conn).await?;
        let lost_script = values.iter().any(|value| {
            matches!(value, Value::ServerError(error)
                if RedisError::from(error.clone()).kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        });
        if !lost_script {
            return Ok(values);
        }
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(REPLAY_SCRIPT)
            .query_async::<Value>(conn)
            .await?;
        pipe.query_async::<Vec<Value>>(conn).await
    }

    /// One reply per entry, in order: the cell's total after publishing this process's count.
    fn replay_pipeline(
        &self,
        batch: &[(CellKey, u64)],
        names: &[String],
        indices: &[usize],
    ) -> Pipeline {
        let mut pipe = redis::pipe();
        // Per-reply errors come back as values, so one bad key cannot hide the other totals.
        pipe.ignore_errors();
        for &index in indices {
            let (key, cumulative) = &batch[index];
            // About three windows: the cell is read as "previous" during the next window.
            let ttl = key.duration_ms.saturating_mul(3).clamp(1, MAX_TTL_MS);
            pipe.cmd("EVALSHA")
                .arg(self.replay_script.get_hash())
                .arg(1)
                .arg(&names[index])
                .arg(&self.process)
                .arg(*cumulative)
                .arg(ttl);
        }
        pipe
    }
}

/// The outcome of replaying (part of) a batch, reply by reply.
///
/// Any failure that a retry could cure fails the batch: the engine sends the same cumulative
/// counts again later, which cannot count anything twice. An entry whose key holds something
/// that is not one of our hashes answers 0 instead (the engine's `max` merge ignores it): a
/// retry cannot cure that, and it must not block the other cells' replay forever.
struct Replayed {
    totals: Vec<u64>,
    /// The first failure that retrying could cure (the connection, the server's state).
    failure: Option<OriginError>,
    /// Entries whose key holds something that is not a cell hash.
    bad_keys: usize,
}

impl Replayed {
    fn new(len: usize) -> Self {
        Self {
            totals: vec![0; len],
            failure: None,
            bad_keys: 0,
        }
    }

    fn failed(len: usize, error: OriginError) -> Self {
        Self {
            failure: Some(error),
            ..Self::new(len)
        }
    }

    /// Reads one reply per entry of `indices`, as [`RedisOrigin::replay_pipeline`] asked.
    fn from_replies(names: &[String], indices: &[usize], values: Vec<Value>) -> Self {
        if values.len() != indices.len() {
            let mismatch = OriginError::BatchMismatch {
                expected: indices.len(),
                got: values.len(),
            };
            return Self::failed(indices.len(), mismatch);
        }
        let mut out = Self::new(0);
        for (value, &index) in values.into_iter().zip(indices) {
            let outcome = match value {
                Value::ServerError(error) => Err(RedisError::from(error)),
                value => Ok(total(value, &names[index])),
            };
            let total = match outcome {
                Ok(Ok(total)) => total,
                Ok(Err(_)) => {
                    out.bad_keys += 1;
                    0
                }
                Err(error) if is_bad_value(&error) => {
                    out.bad_keys += 1;
                    0
                }
                Err(error) => {
                    out.failure.get_or_insert_with(|| origin_error(error));
                    0
                }
            };
            out.totals.push(total);
        }
        out
    }

    fn absorb(&mut self, indices: &[usize], part: Replayed) {
        for (&index, total) in indices.iter().zip(part.totals) {
            self.totals[index] = total;
        }
        self.bad_keys += part.bad_keys;
        if let Some(error) = part.failure {
            self.failure.get_or_insert(error);
        }
    }

    fn into_totals(self) -> Result<Vec<u64>, OriginError> {
        if self.bad_keys > 0 {
            tracing::warn!(
                keys = self.bad_keys,
                "Redis keys of this origin hold values that are not cell hashes; their counts stay local"
            );
        }
        match self.failure {
            Some(error) => Err(error),
            None => Ok(self.totals),
        }
    }
}

/// The key holds something that is not one of our cell hashes (another program's key, or a
/// field that is not a count); only deleting or expiring it helps.
fn is_bad_value(error: &RedisError) -> bool {
    let detail = error.detail().unwrap_or_default();
    error.code() == Some("WRONGTYPE")
        || (error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && (detail.contains("not an integer")
                // Before Redis 7, an error inside a script arrives as `ERR … WRONGTYPE …`.
                || detail.contains("WRONGTYPE")
                || detail.contains("overflow")
                || detail.contains("attempt to compare")
                || detail.contains("attempt to perform arithmetic")))
}

impl RegionalOrigin for RedisOrigin {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(async move { self.get(&self.redis_key(key)).await })
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, u64)]) -> OriginFuture<'a, Vec<u64>> {
        Box::pin(self.add(batch))
    }
}

/// A count from a reply: missing is 0; anything but a non-negative integer is an error.
fn total(value: Value, name: &str) -> Result<u64, OriginError> {
    let parsed = match &value {
        Value::Nil => Some(0),
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok()),
        Value::SimpleString(text) => text.parse().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| {
        OriginError::InvalidValue(format!("Redis key {name:?} holds {value:?}, not a count"))
    })
}

/// A cell hash from `HGETALL`: the sum of its fields and this process's own.
fn components(value: Value, name: &str, process: &str) -> Result<CellRead, OriginError> {
    let invalid = |what: &Value| {
        OriginError::InvalidValue(format!(
            "Redis key {name:?} holds {what:?}, not a cell hash"
        ))
    };
    let pairs: Vec<(Value, Value)> = match value {
        Value::Nil => Vec::new(),
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(field), Some(count)) = (items.next(), items.next()) {
                pairs.push((field, count));
            }
            pairs
        }
        other => return Err(invalid(&other)),
    };
    let mut read = CellRead::default();
    for (field, count) in pairs {
        let count = total(count, name)?;
        read.total = read.total.saturating_add(count);
        let is_own = match &field {
            Value::BulkString(bytes) => bytes.as_slice() == process.as_bytes(),
            Value::SimpleString(text) => text == process,
            _ => false,
        };
        if is_own {
            read.own = count;
        }
    }
    Ok(read)
}

/// Connection-level trouble is `Unavailable`, a key holding a non-count `InvalidValue`,
/// anything else the server refused `Redis`.
fn origin_error(error: RedisError) -> OriginError {
    if is_bad_value(&error) {
        return OriginError::InvalidValue(error.to_string());
    }
    let unavailable = error.is_io_error()
        || error.is_cluster_error()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(ServerErrorKind::BusyLoading | ServerErrorKind::MasterDown)
        );
    if unavailable {
        OriginError::Unavailable(error.to_string())
    } else {
        OriginError::Refused(error.to_string())
    }
}

/// Maps a cluster call's error, forgetting the connection when redis-rs says it is beyond repair.
fn cluster_error(cluster: &LazyCluster, generation: u64, error: RedisError) -> OriginError {
    if error.is_unrecoverable_error() {
        cluster.reset(generation);
    }
    origin_error(error)
}

fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

fn bad_url(url: &str, reason: &str) -> RedisConfigError {
    RedisConfigError::BadUrl {
        url: redact_url(url),
        reason: redact_in(reason, url),
    }
}
