//! Where the service's settings and limits come from, through the real binary: config files
//! (checked, reloaded, matching envoyproxy/ratelimit's), xDS, flags and variables, exit codes.

mod check_config;
mod cli_exit_codes;
mod config_parity;
mod config_reload;
mod config_xds;
mod envoy_lint;
mod setting_precedence;
mod start_log;
mod upstream_env;
