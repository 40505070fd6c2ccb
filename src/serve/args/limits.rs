//! The limits config, and how requests are answered with it.

use std::path::PathBuf;
use std::time::Duration;

use crate::byte_size_arg::{ByteSizeRange, gib};
use crate::duration_arg::{DurationRange, millis};

/// How the limits config is read: the same flags for `serve` and `check-config`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigReadArgs {
    /// Bytes read from the limits config in one load, all files together [range: 1B to 1GiB]
    ///
    /// A bigger config is refused: at start, or on reload (the running one is kept).
    #[arg(long, env = "RLS_MAX_CONFIG_BYTES", default_value = "16MiB", value_parser = ByteSizeRange::new(1, gib(1)).parser::<u64>())]
    pub max_config_bytes: u64,
    /// In a config directory, skip files and subdirectories whose name starts with `.`
    ///
    /// Loaded by default, as upstream does. Also read from upstream's `RUNTIME_IGNOREDOTFILES`.
    #[arg(long, env = "RLS_IGNORE_DOT_FILES")]
    pub ignore_dot_files: bool,
    /// Merge the same domain found in several files into one
    ///
    /// Its top-level descriptors must differ. Also read from upstream's `MERGE_DOMAIN_CONFIG`.
    #[arg(long, env = "RLS_MERGE_DOMAIN_CONFIG")]
    pub merge_domain_config: bool,
}

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::LIMITS)]
pub struct LimitsArgs {
    /// Limits config: a YAML file, or a directory of them (required unless --config-xds-server)
    ///
    /// envoyproxy/ratelimit's format. In a directory every file is read, subdirectories too,
    /// whatever the extension; changes are picked up while serving. With no arguments, set
    /// from upstream's `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY` and `RUNTIME_APPDIRECTORY`.
    #[arg(
        long,
        env = "RLS_CONFIG",
        required_unless_present = "config_xds_server"
    )]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub read: ConfigReadArgs,
    /// /healthcheck fails (500) while the loaded limits have no domain
    ///
    /// Also read from upstream's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    #[arg(long, env = "RLS_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// Answer OK to everything, still counting and reporting over-limit decisions
    ///
    /// Descriptor statuses keep OVER_LIMIT; only the overall code is OK. Also read from
    /// upstream's `SHADOW_MODE`.
    #[arg(long, env = "RLS_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Every descriptor is a quota: OVER_LIMIT only when all counted descriptors are over
    ///
    /// As a rule's `quota_mode`, for every rule. Also read from upstream's `QUOTA_MODE`.
    #[arg(long, env = "RLS_QUOTA_MODE")]
    pub quota_mode: bool,
    /// How a limit's window is counted: `sliding` (default) or `fixed` (upstream's)
    ///
    /// `fixed`: the count of the current window alone, which starts over on the unit's
    /// boundary (`now / unit × unit`, UTC), as envoyproxy/ratelimit answers; a client may then
    /// pass twice the limit across a boundary. `sliding`: the previous window's count still
    /// weighs, in proportion to what is left of the window. The stored counts are the same
    /// either way: switching needs no migration. With no arguments: `fixed`.
    #[arg(long, env = "RLS_WINDOWS", value_enum, default_value = "sliding")]
    pub windows: super::WindowsArg,
    /// Denied hits count too: a client calling over its limit keeps its counter growing
    ///
    /// As envoyproxy/ratelimit increments its counter on every request. Off: a denial
    /// consumes nothing. With no arguments: on (with --all-or-nothing from
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, only the refusing descriptors count, as
    /// upstream then increments only those).
    #[arg(long, env = "RLS_COUNT_DENIED")]
    pub count_denied: bool,
    /// All or nothing: an OVER_LIMIT request gives back what its passed descriptors consumed
    ///
    /// Also read from upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    #[arg(long, env = "RLS_ALL_OR_NOTHING")]
    pub all_or_nothing: bool,
    /// How far any process's clock may be from true time, for `never_above` limits [range: 0s to 10s]
    ///
    /// With Redis or the global counters, a `never_above` admission spends a right of the
    /// window cell by this process's clock; within this much of a cell's start or end such
    /// requests are refused, so that on clocks this far apart no admission lands in a
    /// neighbouring cell. It costs about twice this ÷ the window of a sliding limit's budget
    /// under steady demand. 0: the clocks agree (NTP keeps them within a few ms). A
    /// `never_above` limit whose window is not longer than twice this would admit nothing:
    /// such a config is refused (at start; a reload keeps the running one).
    #[arg(long, env = "RLS_CLOCK_SKEW", default_value = "0s", value_parser = DurationRange::new(Duration::ZERO, millis(10_000)).parser())]
    pub clock_skew: Duration,
    /// Answers carry `dynamic_metadata`: the domain, the descriptors, the passed rules' metadata
    ///
    /// Upstream's shape. Also read from upstream's `RESPONSE_DYNAMIC_METADATA`.
    #[arg(long, env = "RLS_RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,
    /// Add rate-limit headers (and Retry-After when over) to responses
    ///
    /// Their form is --response-header-style. With no arguments, set from upstream's
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`.
    #[arg(long, env = "RLS_RESPONSE_HEADERS")]
    pub response_headers: bool,
    /// The form of the --response-headers
    ///
    /// `draft03`: RateLimit-Limit, -Remaining and -Reset, named by the three flags below, as
    /// upstream. `structured`: the IETF draft's latest RateLimit-Policy and RateLimit (an
    /// extension; the three names must then keep their defaults).
    #[arg(
        long,
        env = "RLS_RESPONSE_HEADER_STYLE",
        value_enum,
        default_value = "draft03"
    )]
    pub response_header_style: super::HeaderStyleArg,
    /// Name of the draft03 header with the limit
    ///
    /// With no arguments, set from upstream's `LIMIT_LIMIT_HEADER`.
    #[arg(long, env = "RLS_LIMIT_HEADER", default_value = "RateLimit-Limit")]
    pub limit_header: String,
    /// Name of the draft03 header with the hits remaining
    ///
    /// With no arguments, set from upstream's `LIMIT_REMAINING_HEADER`.
    #[arg(
        long,
        env = "RLS_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub remaining_header: String,
    /// Name of the draft03 header with the seconds until the window resets
    ///
    /// With no arguments, set from upstream's `LIMIT_RESET_HEADER`.
    #[arg(long, env = "RLS_RESET_HEADER", default_value = "RateLimit-Reset")]
    pub reset_header: String,
    /// On an OVER_LIMIT answer, add this response header naming the rule that refused
    ///
    /// The rule's `name`, or its path when it has none; Envoy adds the header to its 429.
    /// Every OVER_LIMIT answer also names the rule in its dynamic metadata (`limitedBy`).
    #[arg(long, env = "RLS_RULE_HEADER", value_name = "NAME", value_parser = header_name)]
    pub rule_header: Option<String>,
}

/// `--rule-header`: a valid HTTP header name.
fn header_name(text: &str) -> Result<String, String> {
    http::HeaderName::from_bytes(text.as_bytes())
        .map(|_| text.to_owned())
        .map_err(|_| format!("`{text}` is not an HTTP header name"))
}
