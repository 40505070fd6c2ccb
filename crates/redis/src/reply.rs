//! Reading Redis's replies: counts, cell hashes, and which errors mean what to the engine.

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use redis::cluster_async::ClusterConnection;

use crate::lazy::LazyConnection;
use crate::sentinel::{SentinelBackend, lost_master};
use gcounter_engine::regional::{CellRead, OriginError};

/// A count from a reply: missing is 0; anything but a non-negative integer is an error.
pub(crate) fn total(value: Value, name: &str) -> Result<u64, OriginError> {
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
pub(crate) fn components(value: Value, name: &str, process: &str) -> Result<CellRead, OriginError> {
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
pub(crate) fn origin_error(error: RedisError) -> OriginError {
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
pub(crate) fn cluster_error(
    cluster: &LazyConnection<ClusterConnection>,
    generation: u64,
    error: RedisError,
) -> OriginError {
    if error.is_unrecoverable_error() {
        cluster.reset(generation);
    }
    origin_error(error)
}

/// Maps a call's error on the Sentinel-named master, forgetting the connection when it no
/// longer leads to a working master (the next call asks the sentinels again).
pub(crate) fn sentinel_error(
    master: &SentinelBackend,
    generation: u64,
    error: RedisError,
) -> OriginError {
    if lost_master(&error) {
        master.reset(generation);
    }
    origin_error(error)
}

/// The key holds something that is not one of our cell hashes (another program's key, or a
/// field that is not a count); only deleting or expiring it helps.
pub(crate) fn is_bad_value(error: &RedisError) -> bool {
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
