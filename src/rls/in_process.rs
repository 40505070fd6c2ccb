//! A limiter that decides alone: its engine counts on the in-process origin, by a clock the
//! caller holds, with no backend. What the in-process request tests and the fuzz targets
//! decide with (on a manual clock), so the wiring of an engine under a limiter is written
//! once outside `serve`, which wires the real one from its settings.

use std::sync::Arc;

use arc_swap::ArcSwap;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Clock, Engine, EngineSettings};

use super::{RateLimiter, RlsSettings};
use crate::config::LimitsConfig;
use crate::telemetry::Metrics;

impl RateLimiter {
    /// A limiter on `limits` whose engine holds at most `max_cells` cells (the in-process
    /// origin as many) and reads the time from `clock`; the metrics it records to beside it.
    pub fn in_process(
        limits: LimitsConfig,
        clock: Arc<dyn Clock>,
        max_cells: usize,
        settings: RlsSettings,
    ) -> (Self, Arc<Metrics>) {
        let engine = EngineSettings {
            max_cells,
            ..EngineSettings::default()
        };
        Self::in_process_with(limits, clock, engine, settings)
    }

    /// [`in_process`](Self::in_process) with the engine's settings (its window semantics).
    pub fn in_process_with(
        limits: LimitsConfig,
        clock: Arc<dyn Clock>,
        engine: EngineSettings,
        settings: RlsSettings,
    ) -> (Self, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let max_cells = engine.max_cells;
        let engine = Arc::new(Engine::new(
            engine,
            Arc::new(InProcessOrigin::new(max_cells)),
            clock,
            Arc::clone(&metrics) as _,
        ));
        let limiter = Self::new(
            Arc::new(ArcSwap::from_pointee(limits)),
            engine,
            Arc::clone(&metrics),
            settings,
        );
        (limiter, metrics)
    }
}
