//! OpenTelemetry tracing, off by default: the settings (`settings`), the decision's span
//! (`decision`) and the export of finished spans (`export`). While it is off nothing
//! here runs: the limiter holds no tracer and the `tracing` spans of the engine and the
//! stores interest no layer.

mod counters;
mod decision;
mod export;
mod sampling;
mod settings;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use sampling::{DecisionSampler, HeadSampler};

pub use counters::register as register_metrics;
pub use decision::{DecisionSpan, DecisionTracer, Path, Route, Sampled, SpanOptions};
pub use settings::{
    DEFAULT_SERVICE_NAME, Protocol, ProtocolArg, TracingSettings, resolve, upstream_lines,
};

/// The target of the `tracing` spans that are exported (the engine's and the stores'): the
/// tracing layer listens to it alone, and the log filter never to it.
pub use gcounter_engine::SPAN_TARGET;

/// How long shutting down waits for the last spans to be exported.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

static TRACER: OnceLock<(SdkTracer, HeadSampler)> = OnceLock::new();

/// The tracer of the running pipeline and its head sampling, if any.
fn tracer() -> Option<(SdkTracer, HeadSampler)> {
    TRACER.get().cloned()
}

/// A running tracing pipeline: the provider, its sampler and its export thread.
pub struct Pipeline {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Starts the pipeline (the export thread and its exporter): an exporter that cannot be built
/// is an error, before anything serves.
pub fn start(settings: &TracingSettings) -> anyhow::Result<Pipeline> {
    let processor = export::QueueProcessor::start(settings)?;
    let instance_id = settings
        .service_instance_id
        .clone()
        .unwrap_or_else(random_uuid);
    // `Resource::builder` reads `OTEL_RESOURCE_ATTRIBUTES` (and `OTEL_SERVICE_NAME`); what
    // is set here, resolved with our precedence, replaces those.
    let mut resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.instance.id", instance_id));
    if let Some(namespace) = &settings.service_namespace {
        resource = resource.with_attribute(KeyValue::new("service.namespace", namespace.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(DecisionSampler::new(settings.sampling_rate))
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("gcounter-rls");
    // One pipeline per process: a second start keeps the first tracer.
    let _ = TRACER.set((tracer.clone(), HeadSampler::new(settings.sampling_rate)));
    Ok(Pipeline { provider, tracer })
}

impl Pipeline {
    /// For the `tracing` layer of the log subscriber.
    pub fn tracer(&self) -> SdkTracer {
        self.tracer.clone()
    }

    /// Exports what is queued, within a few seconds whatever the collector does.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::debug!(%error, "tracing shutdown");
        }
    }
}

/// A version 4 UUID, upstream's default `service.instance.id`.
fn random_uuid() -> String {
    let random = fastrand::u128(..);
    let v = (random & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        v >> 96,
        (v >> 80) & 0xffff,
        (v >> 64) & 0xffff,
        (v >> 48) & 0xffff,
        v & 0xffff_ffff_ffff
    )
}
