//! The regional origin of a region made of several processes: Redis, one node, a cluster, or
//! the master Redis Sentinel names.
//!
//! A cell is one hash (layout in the `key` module): a PN-counter with one component per process, the
//! field `<process>` holding that process's cumulative hits of the cell and `r:<process>` its
//! cumulative refunds (never above its hits). Replay runs `replay.lua` per cell (keep each
//! field's `max`, refresh the expiry, return the sums) in one pipelined round trip (one per
//! hash slot on a cluster, sent together); read is `HGETALL`. Because a field only takes the
//! max, a replay sent twice (a retry after a timeout whose command did land, a cluster
//! redirect) counts once. Connections are made lazily and re-made by themselves: start-up
//! never waits for Redis, and an origin error only makes the engine decide from local counts.
//!
//! The settings and their checks (`settings`; `RedisSettings::check` does everything but
//! connect, without a runtime, so `serve` refuses a bad URL with its other settings); TLS
//! (private CA, client certificate, hostname check) and the choice of one node, a cluster or
//! Sentinel (`connect`); a connection made lazily in a spawned task and made again after it
//! fails (`lazy`: the cluster's, Sentinel's master's); the master the sentinels name and
//! which errors mean it moved (`sentinel`); replay's pipelines per slot (`replay`); the
//! region's penalty box, one expiring key per penalized counter (`penalty`); the rights of
//! `never_above` counters its processes took (`rights`); replies and
//! errors (`reply`); the key layout (`key`); a cell's carried-over component and the reader
//! of the replaced limiter's counts (`carry`); throwaway `redis-server`s for tests: plain, TLS,
//! a Unix socket with a password, a cluster, a Sentinel set that fails over (`testing`).

mod carry;
mod connect;
mod key;
mod lazy;
mod penalty;
mod replay;
mod reply;
mod rights;
mod sentinel;
mod settings;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

use redis::Value;

pub use carry::CountReader;
use connect::Backend;
use gcounter_engine::cell_key::{CellKey, CounterKey};
use gcounter_engine::pn::PnCount;
use gcounter_engine::regional::{
    CellRead, OriginError, OriginFuture, RegionalOrigin, RightsAsk, RightsReturn,
};
use replay::REPLAY_SCRIPT;
use reply::{cluster_error, components, origin_error, sentinel_error};
pub use settings::{
    RedisConfigError, RedisSettings, RedisTls, SentinelMaster, install_tls_provider,
};

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
        let mut settings = settings;
        if root_ca_pem.is_some() {
            settings.tls.root_ca_pem = root_ca_pem;
        }
        let backend = Backend::new(&settings)?;
        let key_prefix = settings.key_prefix;
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

    /// Whether this origin talks to the master Redis Sentinel names.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.backend, Backend::Sentinel(_))
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
        let value = self.query(&get).await?;
        components(value, name, &self.process)
    }

    /// One command on whichever backend this origin talks to; a failure is mapped as the
    /// backend needs (a cluster's moved slots, Sentinel's moved master).
    pub(crate) async fn query(&self, cmd: &redis::Cmd) -> Result<Value, OriginError> {
        match &self.backend {
            Backend::Single(manager) => {
                let mut conn = manager.clone();
                cmd.query_async::<Value>(&mut conn)
                    .await
                    .map_err(origin_error)
            }
            Backend::Cluster(cluster) => {
                let (mut conn, generation) = cluster.connection().await?;
                cmd.query_async::<Value>(&mut conn)
                    .await
                    .map_err(|error| cluster_error(cluster, generation, error))
            }
            Backend::Sentinel(master) => {
                let (mut conn, generation) = master.connection().await?;
                cmd.query_async::<Value>(&mut conn)
                    .await
                    .map_err(|error| sentinel_error(master, generation, error))
            }
        }
    }
}

impl RedisOrigin {
    /// Commands whose replies nobody reads, each on the key it names, in as few round trips
    /// as the backend allows: one pipeline on one node or Sentinel's master; on a cluster,
    /// one call each (the keys sit in different slots), sent together.
    pub(crate) async fn run_all(&self, commands: Vec<redis::Cmd>) -> Result<(), OriginError> {
        if commands.is_empty() {
            return Ok(());
        }
        match &self.backend {
            Backend::Single(manager) => {
                let mut pipe = redis::pipe();
                for cmd in commands {
                    pipe.add_command(cmd).ignore();
                }
                let mut conn = manager.clone();
                pipe.query_async::<()>(&mut conn)
                    .await
                    .map_err(origin_error)
            }
            Backend::Cluster(cluster) => {
                let (conn, generation) = cluster.connection().await?;
                let sent = commands.into_iter().map(|cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async::<Value>(&mut conn).await }
                });
                for outcome in futures_util::future::join_all(sent).await {
                    outcome.map_err(|error| cluster_error(cluster, generation, error))?;
                }
                Ok(())
            }
            Backend::Sentinel(master) => {
                // A write that lands on a demoted master fails (READONLY), which moves the
                // origin.
                let mut pipe = redis::pipe();
                for cmd in commands {
                    pipe.add_command(cmd).ignore();
                }
                let (mut conn, generation) = master.connection().await?;
                pipe.query_async::<()>(&mut conn)
                    .await
                    .map_err(|error| sentinel_error(master, generation, error))
            }
        }
    }
}

impl RegionalOrigin for RedisOrigin {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn read<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        Box::pin(async move { self.get(&self.redis_key(key)).await })
    }

    /// Set-if-absent in the cell's hash, atomically in Redis (`carry.lua`).
    fn seed<'a>(&'a self, key: &'a CellKey, carried: u64) -> OriginFuture<'a, CellRead> {
        Box::pin(self.put_carried(key, carried))
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        Box::pin(self.add(batch))
    }

    fn penalize<'a>(&'a self, penalties: &'a [(CounterKey, u64)]) -> OriginFuture<'a, ()> {
        Box::pin(self.put_penalties(penalties))
    }

    fn penalty_until<'a>(&'a self, counter: &'a CounterKey) -> OriginFuture<'a, u64> {
        Box::pin(self.read_penalty(counter))
    }

    /// Every process of the region decides from it.
    fn shares_rights(&self) -> bool {
        true
    }

    fn take_rights<'a>(&'a self, ask: &'a RightsAsk) -> OriginFuture<'a, u64> {
        Box::pin(self.take(ask))
    }

    fn give_back_rights<'a>(&'a self, returns: &'a [RightsReturn]) -> OriginFuture<'a, ()> {
        Box::pin(self.give_back(returns))
    }

    /// Moves to another master under Sentinel (one node and a cluster keep 0).
    fn epoch(&self) -> u64 {
        match &self.backend {
            Backend::Sentinel(sentinel) => sentinel.epoch(),
            Backend::Single(_) | Backend::Cluster(_) => 0,
        }
    }
}
