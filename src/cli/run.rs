//! Running a parsed command line: settings checked first (exit 2), then the work (exit 1 if
//! it fails).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use gcounter_engine::global::GlobalStore;
use gcounter_engine::{Clock, SystemClock};
use gcounter_sql::SqlStore;

use super::{CheckConfigArgs, Command, EXIT_RUNTIME_FAILURE, Parsed, invalid_setting};
use crate::config::{LoadOptions, ReadLimits};
use crate::environment::{Environment, Origins, resolve_switch};
use crate::serve::{self, ServeSettings};
use crate::telemetry::init_logging;
use crate::trace;
use gcounter_runtime as runtime;

pub(super) fn run(parsed: Parsed, env: &Environment) -> ExitCode {
    let Parsed {
        cli,
        origins,
        warnings: upstream_warnings,
    } = parsed;
    if let Command::CheckConfig(args) = &cli.command {
        return check_config(args, &origins, env);
    }
    if let Command::Explain(args) = &cli.command {
        return explain(args, &origins, env);
    }
    let workers = match &cli.command {
        Command::Serve(args) => args
            .engine
            .workers
            .map_or_else(runtime::available_cores, usize::from),
        _ => runtime::available_cores(),
    };
    // Every setting is checked before the runtime starts: a refused one is an invalid
    // setting (exit 2), whatever fails afterwards is not (exit 1).
    let command = match cli.command {
        Command::Serve(args) => match ServeSettings::from_args(*args, origins, env) {
            Ok(settings) => Work::Serve(Box::new(settings)),
            Err(error) => return invalid_setting(&runtime::one_line(&error)),
        },
        Command::Migrate(args) => match checked_url(&args.database_url) {
            Ok(()) => Work::Migrate(args.database_url),
            Err(code) => return code,
        },
        Command::Cleanup(args) => match checked_url(&args.database.database_url) {
            Ok(()) => Work::Cleanup(args.database.database_url, args.batch),
            Err(code) => return code,
        },
        Command::CheckConfig(_) | Command::Explain(_) => return ExitCode::SUCCESS,
    };
    // The exporter is built from the settings (and the SDK's `OTEL_*` variables): one it
    // refuses is an invalid setting too.
    let pipeline = match &command {
        Work::Serve(settings) => match settings.tracing.as_ref().map(trace::start).transpose() {
            Ok(pipeline) => pipeline,
            Err(error) => return invalid_setting(&runtime::one_line(&error)),
        },
        Work::Migrate(_) | Work::Cleanup(..) => None,
    };
    let tracer = pipeline.as_ref().map(trace::Pipeline::tracer);
    if let Err(message) = init_logging(cli.log_format, &cli.log_level, tracer) {
        eprintln!("error: {message}");
        return ExitCode::from(EXIT_RUNTIME_FAILURE);
    }
    for warning in upstream_warnings {
        tracing::warn!("{warning}");
    }
    // Logged once logging is up: the settings chose the tracer it exports through.
    if let Work::Serve(settings) = &command {
        settings.report.log();
    }
    if let (Some(_), Work::Serve(settings)) = (&pipeline, &command)
        && let Some(tracing) = &settings.tracing
    {
        tracing::info!(protocol = %tracing.protocol, endpoint = %tracing.endpoint, sampling_rate = tracing.sampling_rate, service_name = %tracing.service_name, "tracing on: exporting spans");
    }
    // As many workers as cores; runtime.rs says why one worker means a current-thread runtime.
    let code = runtime::run_main(runtime::flavor_for(workers), workers, async move {
        match command {
            Work::Serve(settings) => serve_command(*settings).await,
            Work::Migrate(url) => migrate(&url).await,
            Work::Cleanup(url, batch) => cleanup(&url, batch).await,
        }
    });
    if let Some(pipeline) = pipeline {
        pipeline.shutdown();
    }
    code
}

/// A subcommand whose settings are valid.
enum Work {
    Serve(Box<ServeSettings>),
    Migrate(String),
    Cleanup(String, u64),
}

/// `--database-url` of `migrate` and `cleanup`: a scheme the store supports.
fn checked_url(url: &str) -> Result<(), ExitCode> {
    gcounter_sql::check_url(url)
        .map_err(|e| invalid_setting(&format!("invalid --database-url: {e}")))
}

/// `serve`: the listeners bound, then [`serve::run`] until SIGTERM or SIGINT (handled here
/// only: `run` takes any shutdown future).
async fn serve_command(settings: ServeSettings) -> anyhow::Result<()> {
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

/// `check-config`: 0 when the config is valid, 1 listing its errors, 2 for an invalid setting
/// (upstream's `RUNTIME_IGNOREDOTFILES` or `MERGE_DOMAIN_CONFIG` not a boolean).
fn check_config(args: &CheckConfigArgs, origins: &Origins, env: &Environment) -> ExitCode {
    match load_options(&args.read, origins, env) {
        Ok(options) => check_path(&args.path, args.envoy.as_deref(), &options),
        Err(code) => code,
    }
}

/// `explain`: 0 with the explanation on stdout, 1 when something cannot be read or reached,
/// 2 for an invalid setting.
fn explain(args: &crate::explain::ExplainArgs, origins: &Origins, env: &Environment) -> ExitCode {
    let options = match load_options(&args.read, origins, env) {
        Ok(options) => options,
        Err(code) => return code,
    };
    match crate::explain::run(args, &options) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(crate::explain::ExplainError::Usage(message)) => invalid_setting(&message),
        Err(crate::explain::ExplainError::Failed(message)) => {
            eprintln!("{message}");
            ExitCode::from(EXIT_RUNTIME_FAILURE)
        }
    }
}

/// How the limits config is read, as `serve` reads it: its switches follow `serve`'s
/// precedence (ours, else upstream's, else off); an invalid upstream variable is exit 2.
fn load_options(
    read: &crate::serve::args::ConfigReadArgs,
    origins: &Origins,
    env: &Environment,
) -> Result<LoadOptions, ExitCode> {
    let switch = |id: &str, ours: bool| {
        let Some(switch) = serve::SWITCHES.iter().find(|s| s.id == id) else {
            return Ok(ours);
        };
        let resolved = resolve_switch(switch, ours, origins.of(id), env)?;
        if let Some(warning) = resolved.warning {
            eprintln!("warning: {warning}");
        }
        Ok::<_, crate::upstream_env::UpstreamEnvError>(resolved.value)
    };
    let switches = switch("ignore_dot_files", read.ignore_dot_files).and_then(|dots| {
        Ok((
            dots,
            switch("merge_domain_config", read.merge_domain_config)?,
        ))
    });
    let (ignore_dot_files, merge_domains) = switches.map_err(|error| invalid_setting(&error))?;
    Ok(LoadOptions {
        limits: ReadLimits {
            max_bytes: read.max_config_bytes,
            ..ReadLimits::default()
        },
        ignore_dot_files,
        merge_domains,
        // The check knows no backend: `never_above` is checked as one process runs it.
        never_above_clock_skew: std::time::Duration::ZERO,
    })
}

fn check_path(path: &Path, envoy: Option<&Path>, options: &LoadOptions) -> ExitCode {
    let config = match crate::config::load_path(path, options) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(EXIT_RUNTIME_FAILURE);
        }
    };
    let domains = config.domains().count();
    println!(
        "{}: OK ({domains} domain(s), {} rule(s))",
        path.display(),
        config.rule_count()
    );
    let Some(envoy) = envoy else {
        return ExitCode::SUCCESS;
    };
    let envoy_config = match crate::envoy_config::load(envoy) {
        Ok(envoy_config) => envoy_config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(EXIT_RUNTIME_FAILURE);
        }
    };
    let findings = crate::explain::lint::lint(&envoy_config, &config);
    let errors = findings
        .iter()
        .filter(|f| f.severity == crate::explain::lint::Severity::Error)
        .count();
    for finding in &findings {
        println!("{finding}");
    }
    println!(
        "{}: {errors} error(s), {} warning(s) against {}",
        envoy.display(),
        findings.len() - errors,
        path.display()
    );
    if errors > 0 {
        ExitCode::from(EXIT_RUNTIME_FAILURE)
    } else {
        ExitCode::SUCCESS
    }
}
