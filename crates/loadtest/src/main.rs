//! The `gcounter-loadtest` command line: closed- or open-loop gRPC load against any
//! RateLimitService v3 server; prints one JSON line (requests/s, latency percentiles,
//! OK / OVER_LIMIT / error counts) and exits non-zero if any request failed.
//!
//! ```sh
//! gcounter-loadtest --target 127.0.0.1:8081 --domain example --descriptor 'remote_address=10.0.0.1'
//! ```

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use gcounter_loadtest::LoadtestArgs;
use gcounter_runtime as runtime;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Closed- or open-loop gRPC load against any RateLimitService v3 server; prints one \
             JSON line (requests/s, latency percentiles, OK / OVER_LIMIT / error counts)"
)]
struct Cli {
    #[arg(long, env = "RLS_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// A tracing filter: `info`, `debug`, `gcounter_loadtest=debug,tonic=info`, ...
    #[arg(long, env = "RLS_LOG_LEVEL", default_value = "info")]
    log_level: String,
    #[command(flatten)]
    load: LoadtestArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(message) = init_logging(cli.log_format, &cli.log_level) {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    // As many workers as cores, picked as the service picks them (its client is what limits
    // the tool, so it gets the same runtime the service would).
    let workers = runtime::available_cores();
    runtime::run_main(runtime::flavor_for(workers), workers, load(cli.load))
}

async fn load(args: LoadtestArgs) -> anyhow::Result<()> {
    let Some(report) = gcounter_loadtest::run(args).await? else {
        return Ok(());
    };
    println!("{}", serde_json::to_string(&report)?);
    anyhow::ensure!(report.errors == 0, "{} request(s) failed", report.errors);
    Ok(())
}

/// Logs on stderr (stdout carries the one JSON line).
fn init_logging(format: LogFormat, level: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(level).map_err(|e| format!("bad --log-level '{level}': {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| format!("cannot install the log subscriber: {e}"))
}
