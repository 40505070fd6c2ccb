//! The `gcounter-rls` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gcounter_rls::serve::{self, ServeArgs};
use gcounter_rls::telemetry::{LogFormat, init_logging};

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
        /// A YAML file or a directory of *.yaml files.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { path } => check_config(&path),
        Command::Serve(args) => {
            if let Err(message) = init_logging(cli.log_format, &cli.log_level) {
                eprintln!("error: {message}");
                return ExitCode::FAILURE;
            }
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: cannot start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve::run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn check_config(path: &std::path::Path) -> ExitCode {
    match gcounter_rls::config::load_path(path) {
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
