//! A real Envoy in front of the real binary: every example in `envoy/`, the examples in
//! situations, and envoyproxy/ratelimit's own integration tests.

mod carry_over;
mod envoy_examples;
mod envoy_scenarios;
mod explain_differential;
mod fixed_windows;
mod rlqs_bursts;
mod rule_names;
mod token_budget_regions;
mod upstream_integration;
