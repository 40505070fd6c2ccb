//! Building the backends from their settings: the regional origin (in-process, or Redis
//! behind timeouts and a circuit breaker) and the global counters (a SQL store).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::telemetry::Metrics;
use gcounter_engine::Engine;
use gcounter_engine::global::{GlobalCounters, GlobalStore};
use gcounter_engine::recorder::Recorder;
use gcounter_engine::regional::{GuardedOrigin, InProcessOrigin, RegionalOrigin};
use gcounter_redis::{RedisOrigin, install_tls_provider};
use gcounter_sql::{SqlSettings, SqlStore};

use super::settings::{GlobalGroup, Region, Regional};

/// The in-process origin, or Redis behind timeouts and a circuit breaker. Returns the
/// freshness the engine must apply: none when this process is the whole region.
pub(super) fn regional_origin(
    regional: &Regional,
    max_cells: usize,
) -> anyhow::Result<(Arc<dyn RegionalOrigin>, Option<Duration>)> {
    let redis = match regional {
        Regional::InProcess => {
            let origin: Arc<dyn RegionalOrigin> = Arc::new(InProcessOrigin::new(max_cells));
            return Ok((origin, None));
        }
        Regional::Redis(redis) => redis,
    };
    install_tls_provider();
    let origin = RedisOrigin::connect(redis.redis.clone())
        .context("invalid --redis-url / --redis-prefix")?;
    tracing::info!(
        cluster = origin.is_cluster(),
        nodes = redis.redis.urls.len(),
        "regional origin: Redis (connecting in the background)"
    );
    let guarded = Arc::new(GuardedOrigin::new(Arc::new(origin), redis.guard()));
    // One read at start, so the log says whether Redis answers before traffic needs it
    // ("reached", or "not reached yet" once the circuit opens); it writes nothing.
    let probe = Arc::clone(&guarded);
    tokio::spawn(async move {
        let counter = gcounter_engine::cell_key::CounterKey {
            scope: gcounter_engine::cell_key::Scope::new("", "!probe"),
            identifier: compact_str::CompactString::default(),
            duration_ms: 1_000,
        };
        let _ = probe.penalty_until(&counter).await;
    });
    Ok((guarded, Some(redis.freshness.get())))
}

/// The global layer, when a database is configured: the store (the database may be down: the
/// loops connect, and migrate if asked, when it answers) and the flush/sync driver.
pub(super) async fn global_counters(
    global: Option<&GlobalGroup>,
    region: &Region,
    engine: &Arc<Engine>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<Arc<GlobalCounters>>> {
    let Some(global) = global else {
        return Ok(None);
    };
    // Only a URL that cannot be used fails here: the pool connects lazily, and the loops
    // (and the migration, with --migrate) retry until the database answers.
    let sql = SqlSettings {
        sync_overlap: global.sync_overlap,
        ..SqlSettings::default()
    };
    let store = SqlStore::connect_with(&global.database_url, sql)
        .await
        .context("invalid --database-url")?;
    tracing::info!(
        store = store.name(),
        region = region.as_str(),
        "global counters on"
    );
    Ok(Some(Arc::new(GlobalCounters::new(
        Arc::new(store),
        Arc::clone(engine),
        region.as_str().to_owned(),
        global.settings.clone(),
        Arc::clone(metrics) as Arc<dyn Recorder>,
    ))))
}
