//! gcounter-sim: how accurate are the global counters across regions, and what do they cost
//! the database? N regions × M processes, each the real `gcounter_engine` engine and global
//! counters, on a virtual clock, against an in-memory global store with a lag.
//!
//! `scenario` says who sends what where; `sim` runs it and measures admitted ÷ limit per
//! window and over the worst sliding interval, and the rows and statements per second the
//! store saw; `store` is the lagged, counted store; `oracle` judges every denial from the
//! run's true counts ("never below"); `sliding` finds the worst sliding interval; `tick` draws
//! the jittered flush and sync instants; `error` says what stops a run before its report.
//!
//! `bounded` runs the same scenarios as a bounded counter (docs/bounded-counter.md): rights
//! to shares of each limit, spent locally, against an ideal single limiter; `never_above`
//! judges its log of admissions.

pub mod bounded;
pub mod error;
pub mod never_above;
pub mod oracle;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod sliding;
pub mod store;
pub mod tick;

pub use error::SimError;
pub use scenario::{Scenario, named};
pub use sim::{Report, run};
