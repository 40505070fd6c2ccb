//! The `gcounter-rls` command line: its clap definition ([`command`]), how it runs
//! ([`main`]), and its reference ([`reference_markdown`], written to `docs/cli.md`).
//!
//! Exit codes, the same for every subcommand: 0 done, [`EXIT_RUNTIME_FAILURE`] (1) when
//! something failed after the settings were valid (a listener cannot bind, the limits config
//! is refused at start, a database cannot be reached), [`EXIT_INVALID_SETTING`] (2, clap's
//! usage-error code) for a flag or variable that is wrong, out of range or contradicts
//! another. `check-config` exits 1 when the config it checks has errors (with `--envoy`, when
//! the pair has errors).

mod reference;
mod run;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::environment::{Environment, Origins};
use crate::serve::ServeArgs;
use crate::serve::args::{ConfigReadArgs, TELEMETRY};
use crate::telemetry::LogFormat;

pub use reference::{all_env_variables, all_long_flags, reference_markdown};

/// Something failed after the settings were found valid.
pub const EXIT_RUNTIME_FAILURE: u8 = 1;
/// A flag or variable is invalid (clap's own usage-error code, used for every such case).
pub const EXIT_INVALID_SETTING: u8 = 2;

/// `-V`: the version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RLS_BUILD_COMMIT"),
    ")"
);

/// `--version`: the version, then the build (`build.rs`), one `name: value` line each, so a
/// bug report can paste it and a script can read it.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("RLS_BUILD_COMMIT"),
    "\nfeatures: ",
    env!("RLS_BUILD_FEATURES"),
    "\nprofile: ",
    env!("RLS_BUILD_PROFILE"),
    "\ntarget: ",
    env!("RLS_BUILD_TARGET"),
    "\nrustc: ",
    env!("RLS_BUILD_RUSTC"),
);

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "gcounter-rls",
    version = VERSION,
    long_version = LONG_VERSION,
    about = "Envoy external rate-limit service: sliding windows, multi-region G-Counters",
    long_about = "Envoy external rate-limit service: sliding windows, multi-region G-Counters.\n\n\
                  Started with no arguments, runs `serve` configured from envoyproxy/ratelimit's \
                  environment variables (its image's way), with its defaults."
)]
pub struct Cli {
    /// Log format on stderr
    ///
    /// With no arguments, set from upstream's `LOG_FORMAT`.
    #[arg(
        long,
        env = "RLS_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true,
        help_heading = TELEMETRY
    )]
    pub log_format: LogFormat,
    /// A tracing filter: `info`, `debug`, `gcounter_rls=debug,tonic=info`, ...
    ///
    /// With no arguments, set from upstream's `LOG_LEVEL` (default warn).
    #[arg(long, env = "RLS_LOG_LEVEL", default_value = "info", global = true, help_heading = TELEMETRY, value_parser = log_filter)]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve RateLimitService on --grpc-addr and the admin endpoints on --http-addr
    Serve(Box<ServeArgs>),
    /// Validate a limits config (file or directory), with --envoy against an Envoy config
    CheckConfig(CheckConfigArgs),
    /// Explain a request's decision: descriptors, the rule, its counter, the service's answer
    Explain(Box<crate::explain::ExplainArgs>),
    /// Create or upgrade the global counters' tables (`ratelimit_window_counts`, and
    /// `ratelimit_rights` for `never_above` limits)
    Migrate(DatabaseArgs),
    /// Delete expired global counter rows, in bounded batches
    Cleanup(CleanupArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct CheckConfigArgs {
    /// A YAML file, or a directory whose every file (subdirectories too) is one
    pub path: PathBuf,
    /// Also check the limits against this Envoy config: its domains and `rate_limits`
    ///
    /// A bootstrap, a listener, a route configuration or an admin `/config_dump`. Errors
    /// (exit 1): a descriptor Envoy sends that matches no rule, a domain the limits lack.
    /// Warnings: a rule no descriptor reaches, `rate_limits` never used, `failure_mode_deny`,
    /// a missing or short `timeout`, what is not evaluated. Each with both files and lines.
    #[arg(long, value_name = "FILE")]
    pub envoy: Option<PathBuf>,
    #[command(flatten)]
    pub read: ConfigReadArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseArgs {
    /// The global counters' database: `mysql://`, `postgres://` or `sqlite:` URL
    #[arg(long, env = "RLS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Rows per DELETE statement (0 counts as 1)
    #[arg(long, default_value_t = 1_000)]
    pub batch: u64,
}

/// The clap command, with every subcommand and flag: for `--help`, the reference and tests.
/// `serve`'s expert flags are hidden from its `--help` ([`EXPERT_FLAGS`]); `--help-all`
/// shows them.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", |serve| {
        EXPERT_FLAGS
            .iter()
            .fold(serve, |serve, id| serve.mut_arg(*id, |arg| arg.hide(true)))
            // One line per flag: the long descriptions are in `--help-all`.
            .disable_help_flag(true)
            .arg(
                clap::Arg::new("help")
                    .short('h')
                    .long("help")
                    .action(clap::ArgAction::HelpShort)
                    .help("Print help (the common flags, one line each; --help-all: every flag, in full)"),
            )
            .arg(
                clap::Arg::new(HELP_ALL)
                    .long(HELP_ALL)
                    .action(clap::ArgAction::SetTrue)
                    .help("Print help with every flag, the expert tuning ones included"),
            )
            .after_help(
                "Expert tuning (the engine's cadence, multi-region onset and contention, \
                 transport, xDS and RLQS inner bounds) is left out: `gcounter-rls serve \
                 --help-all` lists every flag, docs/cli.md too.",
            )
    })
}

/// `serve --help-all`.
const HELP_ALL: &str = "help-all";

/// `serve`'s tuning flags that `--help` leaves out (by clap id): their defaults suit every
/// deployment the guides describe, and an upstream user's first dozen flags must not be lost
/// among them. Every one is in `serve --help-all` and docs/cli.md.
pub const EXPERT_FLAGS: &[&str] = &[
    "max_config_bytes",
    "max_cells",
    "max_pending_replay",
    "replay_interval",
    "final_replay_timeout",
    "redis_read_timeout",
    "freshness",
    "carry_over_timeout",
    "carry_over_max_reads_per_second",
    "global_contended_speedup",
    "global_contended_overload",
    "global_onset_fraction",
    "global_onset_min_hits",
    "global_onset_interval",
    "global_onset_urgent_divisor",
    "global_sync_overlap",
    "config_xds_connect_retry_interval",
    "config_xds_backoff_initial",
    "config_xds_backoff_max",
    "config_xds_backoff_factor",
    "config_xds_backoff_jitter",
    "config_xds_max_message_bytes",
    "grpc_tls_reload_interval",
    "max_concurrent_streams",
    "http2_stream_window",
    "http2_connection_window",
    "preface_timeout",
    "admin_header_timeout",
    "max_accept_backoff",
    "http2_keepalive_interval",
    "http2_keepalive_timeout",
    "max_descriptor_bytes",
    "rlqs_max_bucket_bytes",
    "rlqs_max_group_members",
    "rlqs_max_buckets_per_stream",
    "rlqs_max_reports_per_second",
    "rlqs_reassign_interval",
    "stall_probe_interval",
    "repeated_warning_interval",
    "tracing_queue_size",
];

/// `serve --help-all`: `serve`'s long help with every flag shown.
fn help_all() -> String {
    let mut cmd = command();
    cmd.build();
    let Some(serve) = cmd.find_subcommand_mut("serve") else {
        return String::new();
    };
    let ids: Vec<clap::Id> = serve.get_arguments().map(|a| a.get_id().clone()).collect();
    let mut shown = std::mem::take(serve);
    for id in ids {
        shown = shown.mut_arg(id, |arg| arg.hide(false));
    }
    shown
        .after_help("")
        .mut_arg("help", |arg| arg.action(clap::ArgAction::HelpLong))
        .render_long_help()
        .to_string()
}

/// `--log-level`: a filter tracing accepts, checked with the other settings. A bare word must
/// be a level (tracing reads any other word as a target, and the process would then log
/// nothing at all); upstream's level names (`warning`, `fatal`, `panic`) mean ours.
fn log_filter(text: &str) -> Result<String, String> {
    let mut directives = Vec::new();
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target), level),
            None => (None, directive),
        };
        let level = match level.to_ascii_lowercase().as_str() {
            "trace" | "debug" | "info" | "warn" | "error" | "off" => level.to_ascii_lowercase(),
            "warning" => "warn".to_owned(),
            "fatal" | "panic" => "error".to_owned(),
            _ if target.is_some() => level.to_owned(),
            _ => {
                return Err(format!(
                    "{directive:?} is not a level (trace, debug, info, warn, error, off); \
                     a target takes one: {directive}=debug"
                ));
            }
        };
        directives.push(match target {
            Some(target) => format!("{target}={level}"),
            None => level,
        });
    }
    if directives.is_empty() {
        return Err("no level given (trace, debug, info, warn, error, off)".into());
    }
    let filter = directives.join(",");
    tracing_subscriber::EnvFilter::try_new(&filter)
        .map(|_| filter)
        .map_err(|e| e.to_string())
}

/// The binary's `main`: takes the environment's snapshot, parses the command line (or
/// upstream's variables when there is none), runs the subcommand, and returns the exit code
/// (see the module's documentation).
pub fn main() -> ExitCode {
    let env = Environment::capture();
    match parse(std::env::args_os().collect(), &env) {
        Ok(parsed) => run::run(parsed, &env),
        Err(code) => code,
    }
}

/// A parsed command line, with where each of the subcommand's settings came from and the
/// warnings about upstream's variables to log once logging is up.
pub(crate) struct Parsed {
    pub cli: Cli,
    pub origins: Origins,
    pub warnings: Vec<String>,
}

/// Parses `argv`; with no arguments at all (as upstream's image runs `/bin/ratelimit`),
/// `serve` configured from envoyproxy/ratelimit's variables in `env`, with its defaults.
/// clap reads our `RLS_*` variables itself when the command is built here, just after `env`
/// was taken (see [`crate::environment`]).
fn parse(argv: Vec<OsString>, env: &Environment) -> Result<Parsed, ExitCode> {
    let with_arguments = argv.len() > 1;
    if argv.iter().any(|a| a == "--help-all") && argv.iter().any(|a| a == "serve") {
        print!("{}", help_all());
        return Err(ExitCode::SUCCESS);
    }
    let (argv, mut warnings, upstream) = if !with_arguments {
        match crate::upstream_env::serve_argv(env) {
            Ok(upstream) => {
                let program = std::iter::once("gcounter-rls".to_owned());
                let argv: Vec<_> = program.chain(upstream.args).map(Into::into).collect();
                (argv, upstream.warnings, upstream.origins)
            }
            Err(error) => return Err(invalid_setting(&error)),
        }
    } else {
        (argv, Vec::new(), Vec::new())
    };
    let mut command = command();
    command.build();
    let parsed = command
        .clone()
        .try_get_matches_from(argv)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    match parsed {
        Ok((cli, matches)) => {
            let origins = match matches.subcommand() {
                Some((name, sub)) => command
                    .find_subcommand(name)
                    .map(|sub_command| Origins::from_matches(sub_command, sub, &upstream))
                    .unwrap_or_default(),
                None => Origins::default(),
            };
            if with_arguments && matches.subcommand_name() == Some("serve") {
                warnings.extend(crate::upstream_env::unread_with_arguments(env));
            }
            Ok(Parsed {
                cli,
                origins,
                warnings,
            })
        }
        Err(error) => {
            // Help and version go to stdout with 0; a usage error to stderr with 2.
            let _ = error.print();
            let code = u8::try_from(error.exit_code()).unwrap_or(EXIT_INVALID_SETTING);
            Err(ExitCode::from(code))
        }
    }
}

/// An invalid setting: one line on stderr, exit code 2.
pub(crate) fn invalid_setting(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(EXIT_INVALID_SETTING)
}
