//! gcounter-engine: the rate-limit engine of gcounter-rls, apart from any server.
//!
//! Every decision is taken here, from memory ([`local`], the local decision layer, whose [`Engine`] callers name from the crate root); the processes of a region
//! converge through a [`regional::RegionalOrigin`], the regions through
//! [`global::GlobalCounters`] over a [`global::GlobalStore`]. The traits have in-process
//! implementations here; the real backends live in their own crates (`gcounter-redis`,
//! `gcounter-sql`), and the server (`gcounter-rls`) wires them. The engine reports through
//! [`recorder::Recorder`] and knows no gRPC, YAML, Prometheus, Redis or SQL.

pub mod aside;
pub mod cell_key;
pub mod global;
pub mod local;
pub mod plant;
pub mod pn;
pub mod reachability;
pub mod recorder;
pub mod redact;
pub mod regional;
pub mod sharded;
pub mod throttle;

pub use local::{
    CELL_OVERHEAD_BYTES, CellBudget, CellView, Check, Clock, Convergence, CounterState,
    DEFAULT_MAX_CELL_BYTES, Engine, EngineSettings, GHOST_ALLOCATION, GHOST_BYTES, Hit,
    InspectedCounter, Inspection, ManualClock, Penalties, Publication, SKETCH_CAPACITY,
    SystemClock, Verdict, Windows,
};
pub use throttle::Throttle;

/// The target of the spans worth exporting as traces (the regional origin's calls, the
/// replay, the global flush and sync): the server's tracing layer listens to it alone and
/// its log filter never does, so these spans cost nothing while tracing is off.
pub const SPAN_TARGET: &str = "rls_span";
