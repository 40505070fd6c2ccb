//! The global layer: per-region G-Counters in a SQL table, converging the regions.
//!
//! `store` keeps the components (sea-orm, or in memory for tests); `counters` runs flush and
//! sync beside the engine; `cadence` times them. Nothing here is on the request path.

mod cadence;
mod counters;
mod overload;
mod store;

pub use counters::{
    DEFAULT_CONTENDED_OVERLOAD, DEFAULT_CONTENDED_SPEEDUP, DEFAULT_PUBLISH_FLOOR, Flushed,
    GlobalCounters, GlobalSettings,
};
pub use store::*;
