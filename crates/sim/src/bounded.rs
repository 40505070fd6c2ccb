//! The bounded counter (docs/bounded-counter.md), simulated: every region holds rights to a
//! share of each counter's budget and spends them locally; rights move between the global
//! ledger, the regions and their processes on the fleet's cadences, max-min fair by measured
//! demand. Every scenario runs in this mode too (`gcounter-sim --bounded`).
//!
//! `curve` is a cell's budget and its fair division; `ledger` the global store's side, one
//! atomic exchange per region; `holding` the regions' and processes' rights; `fleet` their
//! exchanges and decisions; `run` the event loop, which feeds the same arrivals to an ideal single limiter (the real engine deciding
//! alone) and judges the log with [`crate::never_above`].

pub mod curve;
pub mod fleet;
pub mod holding;
pub mod ledger;
pub mod run;

pub use run::{BoundedReport, run};
