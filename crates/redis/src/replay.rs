//! Replay: publish this process's cumulative counts of a batch of cells with one script call
//! per cell, pipelined (a pipeline per hash slot on a cluster, sent together), and read the
//! cells' totals back.

use std::collections::HashMap;

use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use redis::{ErrorKind, Pipeline, RedisError, ServerErrorKind, Value};

use crate::RedisOrigin;
use crate::connect::Backend;
use crate::reply::{cluster_error, is_bad_value, origin_error, pn_total, sentinel_error};
use crate::sentinel::is_replica_answer;
use gcounter_engine::cell_key::CellKey;
use gcounter_engine::plant::{self, Plant};
use gcounter_engine::pn::PnCount;
use gcounter_engine::regional::OriginError;

/// Keys outlive any real window; this only keeps `PEXPIRE` from overflowing in Redis.
const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3_600 * 1_000;

/// Publish one process's cumulative hits and refunds of a cell and return the cell's total
/// hits and refunds (`replay.lua`). KEYS[1] the cell; ARGV[1] the process's field, ARGV[2] its
/// cumulative hits, ARGV[3] TTL ms, ARGV[4] its cumulative refunds (field `r:<process>`,
/// capped at its hits). Lua numbers are doubles: exact far beyond any count a window can
/// reach.
pub(crate) const REPLAY_SCRIPT: &str = include_str!("replay.lua");

/// How long a cell's hash outlives its last write: three windows (the sliding window reads
/// the previous one).
pub(crate) fn cell_ttl_ms(key: &CellKey) -> u64 {
    key.duration_ms.saturating_mul(3).clamp(1, MAX_TTL_MS)
}

impl RedisOrigin {
    pub(crate) async fn add(
        &self,
        batch: &[(CellKey, PnCount)],
    ) -> Result<Vec<PnCount>, OriginError> {
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
            Backend::Sentinel(master) => {
                let (mut conn, generation) = master.connection().await?;
                let values = self.send(&mut conn, batch, &names, &all).await;
                let replayed = match values {
                    Ok(values) => Replayed::from_replies(&names, &all, values),
                    Err(error) => {
                        Replayed::failed(all.len(), sentinel_error(master, generation, error))
                    }
                };
                if replayed.replica_answered {
                    // A failover left this connection on what is now a replica.
                    master.reset(generation);
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
        batch: &[(CellKey, PnCount)],
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
        batch: &[(CellKey, PnCount)],
        names: &[String],
        indices: &[usize],
    ) -> Pipeline {
        let mut pipe = redis::pipe();
        // Per-reply errors come back as values, so one bad key cannot hide the other totals.
        pipe.ignore_errors();
        for &index in indices {
            // Indices come from grouping this batch: a miss cannot happen, and would only
            // leave that cell's reply out (a batch mismatch the caller reports).
            let (Some((key, cumulative)), Some(name)) = (batch.get(index), names.get(index)) else {
                continue;
            };
            // About three windows: the cell is read as "previous" during the next window.
            // The hits go one short with the chaos checker's `replay-short` defect planted
            // (debug builds only).
            let ttl = cell_ttl_ms(key);
            pipe.cmd("EVALSHA")
                .arg(self.replay_script.get_hash())
                .arg(1)
                .arg(name)
                .arg(&self.process)
                .arg(plant::short(Plant::ReplayShort, cumulative.hits))
                .arg(ttl)
                .arg(cumulative.refunds);
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
    totals: Vec<PnCount>,
    /// The first failure that retrying could cure (the connection, the server's state).
    failure: Option<OriginError>,
    /// Entries whose key holds something that is not a cell hash.
    bad_keys: usize,
    /// An entry was refused because the node is a replica now (`READONLY`).
    replica_answered: bool,
}

impl Replayed {
    fn new(len: usize) -> Self {
        Self {
            totals: vec![PnCount::default(); len],
            failure: None,
            bad_keys: 0,
            replica_answered: false,
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
                value => Ok(pn_total(value, names.get(index).map_or("", String::as_str))),
            };
            let total = match outcome {
                Ok(Ok(total)) => total,
                Ok(Err(_)) => {
                    out.bad_keys += 1;
                    PnCount::default()
                }
                Err(error) if is_bad_value(&error) => {
                    out.bad_keys += 1;
                    PnCount::default()
                }
                Err(error) => {
                    out.replica_answered |= is_replica_answer(&error);
                    out.failure.get_or_insert_with(|| origin_error(error));
                    PnCount::default()
                }
            };
            out.totals.push(total);
        }
        out
    }

    fn absorb(&mut self, indices: &[usize], part: Replayed) {
        for (&index, total) in indices.iter().zip(part.totals) {
            if let Some(slot) = self.totals.get_mut(index) {
                *slot = total;
            }
        }
        self.bad_keys += part.bad_keys;
        self.replica_answered |= part.replica_answered;
        if let Some(error) = part.failure {
            self.failure.get_or_insert(error);
        }
    }

    fn into_totals(self) -> Result<Vec<PnCount>, OriginError> {
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
