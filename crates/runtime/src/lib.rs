//! How gcounter-rls uses its cores: the tokio runtime flavour and its worker count.
//!
//! A crate of its own so that the service and the load tools (`gcounter-loadtest`, `rls-noop`,
//! `rls-abuse`) run on the same runtime without the tools depending on the server.
//!
//! Measured on this project's machines (BENCHMARKS.md): on one core a current-thread runtime
//! answers gRPC ~1.5× faster than a multi-thread runtime with one worker (no cross-thread
//! wake-ups, no work-stealing bookkeeping). So one worker means a current-thread runtime, and
//! more workers a multi-thread runtime, whose work stealing keeps every core busy even when
//! Envoy opens fewer connections than there are cores.

use std::io;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use tokio::runtime::{Builder, Runtime};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    /// Everything on the calling thread.
    CurrentThread,
    /// A work-stealing pool of worker threads.
    MultiThread,
}

/// The cores this process may run on (its CPU affinity, e.g. under `taskset`), at least 1.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// The flavour the service picks for `workers` threads.
pub fn flavor_for(workers: usize) -> Flavor {
    if workers <= 1 {
        Flavor::CurrentThread
    } else {
        Flavor::MultiThread
    }
}

/// A runtime of `flavor` with `workers` threads (ignored for the current-thread flavour).
pub fn build(flavor: Flavor, workers: usize) -> io::Result<Runtime> {
    let mut builder = match flavor {
        Flavor::CurrentThread => Builder::new_current_thread(),
        Flavor::MultiThread => {
            let mut builder = Builder::new_multi_thread();
            builder.worker_threads(workers.max(1));
            builder
        }
    };
    builder.enable_all().thread_name("rls-worker").build()
}

/// A binary's `main` (the service's, the load tools'): runs `command` to its end on a runtime
/// of `flavor` with `workers` threads, and turns the outcome into the exit code; an error, or
/// a runtime that cannot start, is printed once on stderr as one `error:` line.
pub fn run_main(
    flavor: Flavor,
    workers: usize,
    command: impl Future<Output = anyhow::Result<()>>,
) -> ExitCode {
    let runtime = match build(flavor, workers) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes on one line, `: `-separated, a cause left out when the text before
/// it already quotes it (many errors write their source into their own message, so `{:#}`
/// would print the same OS error twice).
pub fn one_line(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

#[cfg(test)]
mod tests;
