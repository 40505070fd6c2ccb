//! The `gcounter-rls` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gcounter_engine::engine::{Clock, SystemClock};
use gcounter_engine::global::GlobalStore;
use gcounter_rls::config::{LoadOptions, ReadLimits};
use gcounter_rls::runtime;
use gcounter_rls::serve::{self, ServeArgs, ServeSettings};
use gcounter_rls::telemetry::{LogFormat, init_logging};
use gcounter_rls::upstream_env;
use gcounter_sql::SqlStore;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Envoy external rate-limit service: sliding windows, multi-region G-Counters"
)]
struct Cli {
    #[arg(
        long,
        env = "RLS_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
    /// A tracing filter: `info`, `debug`, `gcounter_rls=debug,tonic=info`, ...
    #[arg(long, env = "RLS_LOG_LEVEL", default_value = "info", global = true)]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve RateLimitService on --grpc-addr and the admin endpoints on --http-addr.
    Serve(Box<ServeArgs>),
    /// Validate a limits config (file or directory); exit non-zero listing every error.
    CheckConfig {
        /// A YAML file, or a directory whose every file (subdirectories too) is one.
        path: PathBuf,
        /// Bytes read from the config, all files together (as `serve --max-config-bytes`).
        #[arg(long, env = "RLS_MAX_CONFIG_BYTES", default_value_t = ReadLimits::DEFAULT_MAX_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
        max_config_bytes: u64,
        /// Skip dot-files in a directory (as `serve --ignore-dot-files`).
        #[arg(long, env = "RLS_IGNORE_DOT_FILES")]
        ignore_dot_files: bool,
        /// Merge the same domain across files (as `serve --merge-domain-config`).
        #[arg(long, env = "RLS_MERGE_DOMAIN_CONFIG")]
        merge_domain_config: bool,
    },
    /// Create or upgrade the global counters table (`ratelimit_window_counts`).
    Migrate {
        #[arg(long, env = "RLS_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// Delete expired global counter rows, in bounded batches.
    Cleanup {
        #[arg(long, env = "RLS_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// Rows per DELETE statement.
        #[arg(long, default_value_t = 1_000)]
        batch: u64,
    },
}

fn main() -> ExitCode {
    gcounter_rls::allocator::avoid_consolidation_stalls();
    // No arguments at all (as upstream's image runs `/bin/ratelimit`): `serve` configured from
    // envoyproxy/ratelimit's environment variables, with its defaults.
    let (cli, upstream_warnings) = if std::env::args_os().len() <= 1 {
        match upstream_env::serve_argv(&upstream_env::process_env) {
            Ok(upstream) => {
                let program = std::iter::once("gcounter-rls".to_owned());
                (
                    Cli::parse_from(program.chain(upstream.args)),
                    upstream.warnings,
                )
            }
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        (Cli::parse(), Vec::new())
    };
    if let Command::CheckConfig {
        path,
        max_config_bytes,
        ignore_dot_files,
        merge_domain_config,
    } = &cli.command
    {
        let upstream = upstream_env::flag("RUNTIME_IGNOREDOTFILES")
            .and_then(|dots| Ok((dots, upstream_env::flag("MERGE_DOMAIN_CONFIG")?)));
        let (upstream_dots, upstream_merge) = match upstream {
            Ok(flags) => flags,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let options = LoadOptions {
            limits: ReadLimits {
                max_bytes: *max_config_bytes,
                ..ReadLimits::default()
            },
            ignore_dot_files: *ignore_dot_files || upstream_dots,
            merge_domains: *merge_domain_config || upstream_merge,
        };
        return check_config(path, &options);
    }
    if let Err(message) = init_logging(cli.log_format, &cli.log_level) {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    for warning in &upstream_warnings {
        tracing::warn!("{warning}");
    }
    // As many workers as cores; runtime.rs says why one worker means a current-thread runtime.
    let workers = match &cli.command {
        Command::Serve(args) => args
            .workers
            .map_or_else(runtime::available_cores, usize::from),
        _ => runtime::available_cores(),
    };
    let command = async {
        match cli.command {
            Command::Serve(args) => serve_command(*args).await,
            Command::Migrate { database_url } => migrate(&database_url).await,
            Command::Cleanup {
                database_url,
                batch,
            } => cleanup(&database_url, batch).await,
            Command::CheckConfig { .. } => Ok(()),
        }
    };
    runtime::run_main(runtime::flavor_for(workers), workers, command)
}

/// `serve`: the flags validated once, the listeners bound, then [`serve::run`] until SIGTERM or
/// SIGINT (handled here only: `run` takes any shutdown future).
async fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    let settings = ServeSettings::from_args(args, &upstream_env::process_env)?;
    let listeners = serve::bind(&settings).await?;
    let shutdown = shutdown_signal()?;
    serve::run(settings, listeners, shutdown).await
}

/// Resolves at the first SIGTERM or SIGINT; the handlers are installed before it returns.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let store = SqlStore::connect(database_url)
        .await
        .context("cannot connect to --database-url")?;
    store.migrate().await.context("migration failed")?;
    println!("migrations applied ({})", store.name());
    Ok(())
}

async fn cleanup(database_url: &str, batch: u64) -> anyhow::Result<()> {
    let store = SqlStore::connect(database_url)
        .await
        .context("cannot connect to --database-url")?;
    let now_ms = SystemClock.now_ms();
    let deleted = store
        .cleanup(now_ms, batch.max(1))
        .await
        .context("cleanup failed")?;
    println!("{deleted} expired row(s) deleted");
    Ok(())
}

fn check_config(path: &std::path::Path, options: &LoadOptions) -> ExitCode {
    match gcounter_rls::config::load_path(path, options) {
        Ok(config) => {
            let domains = config.domains().count();
            println!(
                "{}: OK ({domains} domain(s), {} rule(s))",
                path.display(),
                config.rule_count()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}
