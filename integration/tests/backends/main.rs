//! The layers behind the process, end to end: the Redis regional origin (one node, TLS, a
//! cluster, Sentinel) and the global layer on SQL.

mod cleanup;
mod global_sql;
mod never_above_redis;
mod never_above_regions;
mod quota_fleet;
mod redis_sentinel;
mod regional_redis;
mod upstream_semantics;
