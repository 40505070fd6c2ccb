//! gcounter-rls: an Envoy external rate-limit service with sliding windows and multi-region
//! G-Counters. See ARCHITECTURE.md for the codemap.

pub mod admin;
pub mod allocator;
pub mod bounded_arg;
pub mod byte_size_arg;
pub mod capped_read;
pub mod carry_over;
pub mod cli;
pub mod config;
pub mod duration_arg;
pub mod environment;
pub mod envoy_config;
pub mod explain;
pub mod memory;
pub mod rlqs;
pub mod rls;
pub mod serve;
pub mod supervisor;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod trace;
pub mod transport;
pub mod upstream_env;
pub mod xds;
