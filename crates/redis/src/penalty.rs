//! The region's penalty box in Redis: one string key per penalized counter, holding until
//! when (ms since the epoch) the counter is held, expiring at that moment (so the keys are
//! bounded by the penalized clients of the last penalty, at most a day: `config::penalty`).
//!
//! Key: the counter's cell key without the sequence, then `:penalty` (same hash tag, so it
//! lands in the slot of the counter's cells; no cell key ends in a non-number).

use crate::RedisOrigin;
use crate::reply::total;
use gcounter_engine::cell_key::{CellKey, CounterKey};
use gcounter_engine::regional::OriginError;

/// Keep the later moment: KEYS[1] the counter's penalty key, ARGV[1] until (ms), ARGV[2]
/// its TTL (ms). Sent with `EVAL` (no cached script to lose): penalties are rare.
const PENALIZE_SCRIPT: &str = r"
local held = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tonumber(ARGV[1]) > held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
";

/// A day and a minute: the longest penalty config accepts, and some slack for clock skew.
const MAX_PENALTY_TTL_MS: u64 = (24 * 60 + 1) * 60 * 1_000;

/// The penalty key of `counter` under `prefix`.
pub(crate) fn penalty_key(prefix: &str, counter: &CounterKey) -> String {
    let cell = CellKey {
        scope: std::sync::Arc::clone(&counter.scope),
        identifier: counter.identifier.clone(),
        duration_ms: counter.duration_ms,
        sequence: 0,
    };
    let mut key = crate::key::redis_key(prefix, &cell);
    // The cell key ends in `:0` (the sequence); the penalty key has `:penalty` there.
    key.truncate(key.len().saturating_sub(2));
    key.push_str(":penalty");
    key
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl RedisOrigin {
    pub(crate) async fn put_penalties(
        &self,
        penalties: &[(CounterKey, u64)],
    ) -> Result<(), OriginError> {
        let now = now_ms();
        let commands: Vec<redis::Cmd> = penalties
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(counter, until)| {
                let ttl = (until - now).clamp(1, MAX_PENALTY_TTL_MS);
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(PENALIZE_SCRIPT)
                    .arg(1)
                    .arg(penalty_key(&self.key_prefix, counter))
                    .arg(*until)
                    .arg(ttl);
                cmd
            })
            .collect();
        self.run_all(commands).await
    }

    pub(crate) async fn read_penalty(&self, counter: &CounterKey) -> Result<u64, OriginError> {
        let name = penalty_key(&self.key_prefix, counter);
        let mut get = redis::cmd("GET");
        get.arg(&name);
        let value = self.query(&get).await?;
        total(value, &name)
    }
}

#[cfg(test)]
mod tests;
