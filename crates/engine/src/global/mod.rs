//! The global layer: per-region G-Counters in a SQL table, converging the regions.
//!
//! `store` keeps the components (sea-orm, or in memory for tests); `counters` runs flush and
//! sync beside the engine; `cadence` times them; `clock` measures this process's clock against the database's; `rights` keeps the rights of
//! `never_above` counters there, for every region. Nothing here is on the request path.

mod cadence;
mod clock;
mod counters;
mod overload;
mod rights;
mod store;

pub use clock::{CLOCK_CHECK_INTERVAL, clock_offset_seconds};
pub use counters::{
    DEFAULT_CONTENDED_OVERLOAD, DEFAULT_CONTENDED_SPEEDUP, DEFAULT_FULL_SYNC_INTERVAL,
    DEFAULT_ONSET_FRACTION, DEFAULT_ONSET_INTERVAL, DEFAULT_ONSET_MIN_HITS,
    DEFAULT_ONSET_URGENT_DIVISOR, DEFAULT_PUBLISH_FLOOR, DEFAULT_RIGHTS_TIMEOUT, Flushed,
    GlobalCounters, GlobalSettings,
};
pub use rights::GlobalRights;
pub use store::*;
