//! Counts carried over from the limiter this service replaces: the cell's carried component,
//! seeded once per region (`carry.lua`), and [`CountReader`], which reads the replaced
//! limiter's integer keys and never writes them.

use gcounter_engine::cell_key::CellKey;
use gcounter_engine::regional::{CellRead, OriginError};

use crate::RedisOrigin;
use crate::replay::cell_ttl_ms;
use crate::reply::{components, total};
use crate::settings::{RedisConfigError, RedisSettings};

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

    /// The count at `name` (`GET`); `None` when the key does not exist.
    pub async fn count(&self, name: &str) -> Result<Option<u64>, OriginError> {
        let mut get = redis::cmd("GET");
        get.arg(name);
        let value = self.origin.query(&get).await?;
        if value == redis::Value::Nil {
            return Ok(None);
        }
        total(value, name).map(Some)
    }
}

#[cfg(test)]
mod tests;
