//! tracing-subscriber set-up: text for people, JSON for log pipelines, and, when tracing is
//! on, the layer that exports the engine's and the stores' spans.

use std::io::IsTerminal;

use opentelemetry_sdk::trace::SdkTracer;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

use crate::trace::SPAN_TARGET;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Dependencies quieted to WARN unless the filter names them.
const QUIET_DEPENDENCIES: &[(&str, &str)] = &[
    ("notify", "notify=warn"),
    ("notify_debouncer_full", "notify_debouncer_full=warn"),
];

/// `level` is an `EnvFilter` directive (`info`, `gcounter_rls=debug,tonic=info`, ...).
/// `tracer`: the running tracing pipeline's, whose layer then receives the spans of
/// [`SPAN_TARGET`] (and nothing else).
pub fn init_logging(
    format: LogFormat,
    level: &str,
    tracer: Option<SdkTracer>,
) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(level).map_err(|e| format!("bad --log-level '{level}': {e}"))?;
    // The exported spans are not log lines: never formatted, whatever the level.
    let mut filter = match format!("{SPAN_TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    // Routine events some dependencies log at INFO (the file watcher, at every ConfigMap
    // swap: a watch descriptor it could not remove), unless the filter names them itself.
    for (target, directive) in QUIET_DEPENDENCIES {
        if !level.contains(target)
            && let Ok(directive) = directive.parse()
        {
            filter = filter.add_directive(directive);
        }
    }
    // Colour codes only for a person at a terminal, never into log files or collectors.
    let ansi = std::io::stderr().is_terminal();
    let Some(tracer) = tracer else {
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        let result = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        return result.map_err(|e| format!("cannot install the log subscriber: {e}"));
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().flatten_event(true).boxed(),
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_location(false)
        .with_threads(false)
        .with_filter(Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}
