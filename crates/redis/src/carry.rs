//! Counts carried over from the limiter this service replaces: the cell's carried component,
//! seeded once per region (`carry.lua`), and [`CountReader`], which reads the replaced
//! limiter's integer keys and never writes them.

use gcounter_engine::cell_key::CellKey;
use gcounter_engine::regional::{CellRead, OriginError};

use crate::RedisOrigin;
use crate::replay::cell_ttl_ms;
use crate::reply::{components, total};
use crate::settings::{RedisConfigError, RedisSettings};

/// The longest count upstream's keys hold: `u64::MAX` in decimal.
const COUNT_BYTES: usize = 20;

/// Set the cell's carried component unless it has one, and read the cell (`HGETALL`).
pub(crate) const CARRY_SCRIPT: &str = include_str!("carry.lua");

impl RedisOrigin {
    pub(crate) async fn put_carried(
        &self,
        key: &CellKey,
        carried: u64,
    ) -> Result<CellRead, OriginError> {
        let name = self.redis_key(key);
        // EVAL, not EVALSHA: a cell is seeded once per process at most, and the text spares
        // a NOSCRIPT retry after a restart or failover of Redis.
        let mut eval = redis::cmd("EVAL");
        eval.arg(CARRY_SCRIPT)
            .arg(1)
            .arg(&name)
            .arg(carried)
            .arg(cell_ttl_ms(key));
        let value = self.query(&eval).await?;
        components(value, &name, &self.process)
    }
}

/// Reads integer counts at given keys of a Redis (one node, a cluster or Sentinel's master):
/// the replaced limiter's store, read-only.
pub struct CountReader {
    origin: RedisOrigin,
}

impl CountReader {
    /// Prepares connections without making any (as [`RedisOrigin::connect`]). The settings'
    /// key prefix is not used: [`count`](Self::count) takes whole key names.
    pub fn connect(settings: RedisSettings) -> Result<Self, RedisConfigError> {
        Ok(Self {
            origin: RedisOrigin::connect(settings)?,
        })
    }

    /// The count at `name`; `None` when the key does not exist (or is empty: upstream's
    /// `INCRBY` never leaves one so).
    ///
    /// Read with `GETRANGE`, one byte past the longest count, so that a key holding a large
    /// value costs `COUNT_BYTES` + 1 bytes, not the value: the replaced Redis is not ours.
    pub async fn count(&self, name: &str) -> Result<Option<u64>, OriginError> {
        let mut get = redis::cmd("GETRANGE");
        get.arg(name).arg(0).arg(COUNT_BYTES);
        let value = self.origin.query(&get).await?;
        match &value {
            redis::Value::Nil => return Ok(None),
            redis::Value::BulkString(bytes) if bytes.is_empty() => return Ok(None),
            redis::Value::BulkString(bytes) if bytes.len() > COUNT_BYTES => {
                return Err(OriginError::InvalidValue(format!(
                    "Redis key {name:?} holds more than {COUNT_BYTES} bytes, not a count"
                )));
            }
            _ => {}
        }
        total(value, name).map(Some)
    }
}

#[cfg(test)]
mod tests;
