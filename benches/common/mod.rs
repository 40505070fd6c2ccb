//! What the engine and memory benches share: their clock, the names their counters live
//! under, the identifiers they count (client addresses) and a decision without an executor.

use std::sync::Arc;

use futures_util::FutureExt;
use gcounter_engine::cell_key::{CounterKeyRef, Scope};
use gcounter_engine::{Check, Engine, Hit, Verdict};

pub const MINUTE_MS: u64 = 60_000;
/// Where the benches' clock starts: in the middle of a minute window, so no decision
/// crosses a window boundary mid-measurement.
pub const START_MS: u64 = 1_000 * MINUTE_MS + MINUTE_MS / 2;

/// The scope (workspace and namespace) of every bench counter, shared as a compiled config
/// shares it.
pub struct Ids {
    scope: Arc<Scope>,
}

impl Ids {
    pub fn new() -> Self {
        Self {
            scope: Scope::new("bench", "14:remote_address/"),
        }
    }

    /// One hit on `identifier`'s one-minute counter under `limit`.
    pub fn hit<'a>(&'a self, identifier: &'a str, limit: u64) -> Hit<'a> {
        Hit {
            counter: CounterKeyRef::new(&self.scope, identifier, MINUTE_MS),
            limit,
            cost: 1,
            exact: false,
        }
    }
}

/// The `i`th client address (10.x.y.z), written over `into`: the benches' identifiers.
pub fn write_address(into: &mut String, i: u64) {
    use std::fmt::Write;
    into.clear();
    let _ = write!(into, "10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
}

/// The `i`th client address as a new string.
pub fn address(i: u64) -> String {
    let mut address = String::new();
    write_address(&mut address, i);
    address
}

/// Decide without an executor: a warm decision awaits nothing, and neither does the
/// in-process origin, so the future is ready at its first poll.
pub fn decide(engine: &Engine, hit: Hit<'_>) -> Verdict {
    match engine.check(hit) {
        Check::Ready(verdict) => verdict,
        // A cold cell: the in-process origin answers without waiting.
        Check::Slow(slow) => slow
            .now_or_never()
            .expect("the embedded engine decides without waiting"),
    }
}
