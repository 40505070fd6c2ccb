//! Where `serve`'s limits come from: a file or directory (loaded, then watched) or an xDS
//! server (pushed); either way one `ArcSwap` that `rls`, admin and metrics read, and one task
//! that keeps it current.

use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::settings::{ConfigSource, LimitsSettings};
use crate::config::{self, LimitsConfig};
use crate::telemetry::Metrics;
use crate::xds;

/// The limits and the task that keeps them current.
pub(super) struct Source {
    pub limits: Arc<ArcSwap<LimitsConfig>>,
    /// Runs until dropped; returning means updates stopped.
    pub task: Pin<Box<dyn Future<Output = ()> + Send>>,
    pub task_name: &'static str,
    /// For xDS without forced start: counts the configs accepted; serving waits for the
    /// first (as upstream, which starts its servers only once a first config arrived).
    pub first_config: Option<watch::Receiver<u64>>,
}

/// Loads the file config (an invalid one fails start-up) or starts from no limits for xDS.
pub(super) fn start(settings: &LimitsSettings, metrics: &Arc<Metrics>) -> anyhow::Result<Source> {
    match &settings.source {
        ConfigSource::File(path) => {
            let loaded = config::load_path(path, &settings.load)
                .map_err(|errors| anyhow::anyhow!("invalid limits config:\n{errors}"))?;
            metrics.config_loaded(loaded.rule_count());
            tracing::info!(path = %path.display(), rules = loaded.rule_count(), "limits config loaded");
            let limits = Arc::new(ArcSwap::from_pointee(loaded));
            let reloads = config::watch(
                path,
                settings.load,
                Arc::clone(&limits),
                Arc::clone(metrics),
            )
            .with_context(|| format!("cannot watch {}", path.display()))?;
            Ok(Source {
                limits,
                task: Box::pin(reloads),
                task_name: "config reload",
                first_config: None,
            })
        }
        ConfigSource::Xds(xds_settings) => {
            let limits = Arc::new(ArcSwap::from_pointee(LimitsConfig::new(Vec::new())));
            let (accepted, first) = watch::channel(0);
            let sink = xds::Sink {
                limits: Arc::clone(&limits),
                metrics: Arc::clone(metrics),
                accepted,
                load: settings.load,
            };
            let force_start = xds_settings.force_start;
            tracing::info!(server = %xds_settings.server, force_start, "limits come from an xDS server");
            Ok(Source {
                limits,
                task: Box::pin(xds::run((**xds_settings).clone(), sink)),
                task_name: "xDS config client",
                first_config: (!force_start).then_some(first),
            })
        }
    }
}
