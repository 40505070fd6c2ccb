//! Hot reload: watch the config path, validate a change, swap it in atomically.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, DebouncedEvent, new_debouncer};
use tokio::sync::mpsc;

use super::{LimitsConfig, LoadOptions, load_path};
use crate::telemetry::Metrics;

/// One editor save is a burst of raw events; they are merged into one reload.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Whether a debounced batch changes the config. Reading a file (our own reload included)
/// raises access events: reloading on them would loop forever. Only a change of the
/// directory's content counts.
fn is_change(events: &[DebouncedEvent]) -> bool {
    events.iter().any(|e| !e.kind.is_access())
}

/// Watch `path` (a file or a directory). A file is watched through its directory, since
/// editors and Kubernetes ConfigMaps replace files rather than write them in place.
/// A bad change is logged and counted, and the running config stays.
///
/// Returns the reload loop: it owns the watcher and runs until dropped, so the caller runs it
/// as a supervised task (a loop that ended would silently stop reloads).
pub fn watch(
    path: &Path,
    options: LoadOptions,
    limits: Arc<ArcSwap<LimitsConfig>>,
    metrics: Arc<Metrics>,
) -> notify::Result<impl Future<Output = ()> + Send + 'static> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        match result {
            // A full channel already holds a pending reload: nothing is lost by dropping this.
            Ok(events) if is_change(&events) => {
                let _ = tx.try_send(());
            }
            // Logged so that a refused batch can be seen (and awaited by a test).
            Ok(events) => tracing::debug!(events = events.len(), "config read, not reloading"),
            Err(errors) => tracing::warn!(?errors, "config watcher error"),
        }
    })?;
    let watched = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    };
    // A directory is loaded with its subdirectories, so it is watched with them.
    let mode = if path.is_dir() {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    debouncer.watch(&watched, mode)?;

    let path = path.to_path_buf();
    Ok(async move {
        // Owned by the loop: dropping the loop stops the watcher.
        let _debouncer = debouncer;
        while rx.recv().await.is_some() {
            let to_load = path.clone();
            let loaded = tokio::task::spawn_blocking(move || load_path(&to_load, &options)).await;
            match loaded {
                Ok(Ok(config)) => {
                    let rules = config.rule_count();
                    limits.store(Arc::new(config));
                    metrics.config_loaded(rules);
                    tracing::info!(path = %path.display(), rules, "limits config reloaded");
                }
                Ok(Err(errors)) => {
                    metrics.config_rejected();
                    tracing::error!(path = %path.display(), %errors, "limits config change rejected; keeping the running config");
                }
                Err(join_error) => {
                    metrics.config_rejected();
                    tracing::error!(%join_error, "limits config reload task failed");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests;
