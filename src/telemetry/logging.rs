//! tracing-subscriber set-up: text for people, JSON for log pipelines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `level` is an `EnvFilter` directive (`info`, `gcounter_rls=debug,tonic=info`, ...).
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(level).map_err(|e| format!("bad --log-level '{level}': {e}"))?;
    // Colour codes only for a person at a terminal, never into log files or collectors.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| format!("cannot install the log subscriber: {e}"))
}
