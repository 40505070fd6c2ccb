//! Rights of `never_above` counters in the region's Redis (the engine's `regional::rights`):
//! per cell, one integer key holding how many rights the region's processes have taken; per
//! counter, one hash with the newest cell taken from and the run id of the Redis that granted
//! them. A take is one script call (`rights.lua`); a give-back one per cell.
//!
//! Keys: the counter's penalty-style name (its cells' hash tag, so a cluster keeps every key
//! of a counter in one slot), then `:rights` for the hash and `:rights:<sequence>` for a
//! cell's takes. No cell key has a non-number after its window.
//!
//! Redis replicates asynchronously: a promoted replica may lack the last takes. Two rules
//! keep a failover from granting a right twice:
//!
//! - Under Sentinel, a take is spent only once a replica holds it: the script and a `WAIT 1`
//!   go in one pipeline, and a take no replica acknowledged within [`REPLICATION_WAIT_MS`]
//!   is not used (the master counted it: it returns when its cell ends). A master with no
//!   replica connected has none to promote, and grants as a single node does.
//! - The script compares the run id that granted a counter's rights with its own and, on a
//!   change (a failover, a restart from a snapshot), counts the counter's current and
//!   previous cells as fully taken: refusals until the weight of what may be unknown has
//!   decayed, never an admission above the limit.

use redis::Value;

use crate::RedisOrigin;
use crate::connect::Backend;
use crate::replay::cell_ttl_ms;
use crate::reply::{sentinel_error, total};
use gcounter_engine::cell_key::CellKey;
use gcounter_engine::regional::{OriginError, RightsAsk, RightsReturn};

const TAKE_SCRIPT: &str = include_str!("rights.lua");

/// Lower a cell's takes by rights given back, never below 0, keeping its expiry. KEYS[1] the
/// cell's takes; ARGV[1] the count.
const GIVE_BACK_SCRIPT: &str = r"
local taken = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if taken > 0 then
  redis.call('SET', KEYS[1], math.max(taken - tonumber(ARGV[1]), 0), 'KEEPTTL')
end
return 1
";

/// How long a take under Sentinel waits for a replica to hold it. Well inside the origin's
/// read timeout, which bounds the whole take: a decision waits for it.
pub(crate) const REPLICATION_WAIT_MS: u64 = 20;

/// The counter's rights hash under `prefix`, and the takes key of its cell `sequence`.
pub(crate) fn rights_keys(prefix: &str, cell: &CellKey, sequence: u64) -> (String, String) {
    let mut base = crate::key::redis_key(
        prefix,
        &CellKey {
            sequence: 0,
            ..cell.clone()
        },
    );
    // The cell key ends in `:0` (the sequence); the rights keys have `:rights` there.
    base.truncate(base.len().saturating_sub(2));
    base.push_str(":rights");
    let taken = format!("{base}:{sequence}");
    (base, taken)
}

/// The rights a take may spend, from the script's reply (granted, replicas connected) and,
/// under Sentinel, `WAIT`'s count of replicas that hold it.
fn granted(reply: Vec<Value>, name: &str) -> Result<u64, OriginError> {
    let mut reply = reply.into_iter();
    let (granted, replicas) = match reply.next() {
        Some(Value::Array(pair)) if pair.len() == 2 => {
            let mut pair = pair.into_iter();
            let mut next = || total(pair.next().unwrap_or(Value::Nil), name);
            (next()?, next()?)
        }
        other => {
            return Err(OriginError::InvalidValue(format!(
                "rights script for {name:?} answered {other:?}"
            )));
        }
    };
    match reply.next() {
        Some(acknowledged) if replicas > 0 => {
            let held = total(acknowledged, name)? > 0;
            Ok(if held { granted } else { 0 })
        }
        _ => Ok(granted),
    }
}

impl RedisOrigin {
    pub(crate) async fn take(&self, ask: &RightsAsk) -> Result<u64, OriginError> {
        let sequence = ask.cell.sequence;
        let (hash, taken) = rights_keys(&self.key_prefix, &ask.cell, sequence);
        let (_, previous) = rights_keys(&self.key_prefix, &ask.cell, sequence.saturating_sub(1));
        let mut eval = redis::cmd("EVAL");
        eval.arg(TAKE_SCRIPT)
            .arg(3)
            .arg(&taken)
            .arg(&previous)
            .arg(&hash)
            .arg(ask.limit)
            .arg(ask.cell.duration_ms.max(1))
            .arg(ask.elapsed_ms)
            .arg(ask.want)
            .arg(sequence)
            .arg(cell_ttl_ms(&ask.cell))
            .arg(if ask.sliding && sequence > 0 {
                "1"
            } else {
                "0"
            });
        let reply = match &self.backend {
            Backend::Sentinel(master) => {
                let mut pipe = redis::pipe();
                pipe.add_command(eval)
                    .cmd("WAIT")
                    .arg(1)
                    .arg(REPLICATION_WAIT_MS);
                let (mut conn, generation) = master.connection().await?;
                pipe.query_async::<Vec<Value>>(&mut conn)
                    .await
                    .map_err(|error| sentinel_error(master, generation, error))?
            }
            Backend::Single(_) | Backend::Cluster(_) => vec![self.query(&eval).await?],
        };
        granted(reply, &taken)
    }

    pub(crate) async fn give_back(&self, returns: &[RightsReturn]) -> Result<(), OriginError> {
        let commands = returns
            .iter()
            .map(|returned| {
                let (_, taken) =
                    rights_keys(&self.key_prefix, &returned.cell, returned.cell.sequence);
                let mut eval = redis::cmd("EVAL");
                eval.arg(GIVE_BACK_SCRIPT)
                    .arg(1)
                    .arg(taken)
                    .arg(returned.count);
                eval
            })
            .collect();
        self.run_all(commands).await
    }
}

#[cfg(test)]
mod tests;
