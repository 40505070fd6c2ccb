//! One memory limit for the whole process, and the byte budgets derived from it.
//!
//! Each bound of the service (cells, request bytes in flight, connections, metric series) has
//! its own setting; left alone, their sum can pass the container's limit, and then the kernel's
//! OOM killer, not the service, decides what happens under a flood. So the process reads its
//! container's limit ([`cgroup`]), takes a fraction of it as `--max-memory` (or the flag's
//! value), and splits that between its pools ([`plan`]): the service refuses, evicts or
//! makes wait at its own bounds before the kernel kills it.

pub mod cgroup;
pub mod plan;

pub use plan::{Budget, LimitSource, MemoryLimit, MemoryPlan, Origin, PlanInputs};
