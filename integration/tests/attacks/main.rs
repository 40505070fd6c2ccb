//! Attacks on the real binary that load both cores (a slow-loris, floods, a memory-limited
//! container): the nextest config runs each alone, so no timing-sensitive test runs beside them.

mod memory_limit;
mod memory_per_cell;
mod rlqs_abuse;
mod transport_abuse;
