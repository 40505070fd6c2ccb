//! The export of finished spans: a bounded queue the request path only ever tries to push
//! into, and one thread of its own that batches and sends them. A collector that is down or
//! slow fills the queue; further spans are dropped and counted
//! (`rls_tracing_spans_dropped_total`), and no request ever waits for the collector.
//!
//! The thread runs its own single-threaded Tokio runtime: the OTLP exporters (tonic, hyper)
//! need one, and their connections and timers then never run on the serving runtime.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

use super::counters::{SpanCounters, counters};
use super::settings::{Protocol, TracingSettings};

/// Spans sent in one export call, at most (fewer with a smaller queue: the spans held
/// for export, queued or batched, stay within twice the queue's size).
const MAX_BATCH: usize = 512;
/// A span waits at most this long in the queue when traffic is light.
const EXPORT_DELAY: Duration = Duration::from_secs(1);
/// An export that takes longer is abandoned (its spans are lost, counted as failed); the
/// exporter's own timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s) normally ends it first.
const EXPORT_BACKSTOP: Duration = Duration::from_secs(30);
/// A failing collector is said at WARN (upstream's default level shows it) at most this often,
/// with the count of failures meanwhile (`rls_tracing_spans_export_failed_total` counts the spans).
const FAILURE_WARNING_INTERVAL: Duration = Duration::from_secs(30);

#[allow(
    clippy::large_enum_variant,
    reason = "nearly every message is a span: boxing it would allocate per span"
)]
enum Message {
    Span(SpanData),
    Resource(Resource),
    /// Export what is queued, then answer.
    Flush(SyncSender<()>),
    /// Export what is queued, shut the exporter down, answer and stop.
    Shutdown(SyncSender<()>),
}

/// The span processor: `on_end` tries to queue, never blocks.
#[derive(Debug)]
pub struct QueueProcessor {
    sender: SyncSender<Message>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Message")
    }
}

impl QueueProcessor {
    /// Starts the export thread and builds the exporter on it; an exporter that cannot be
    /// built (an `OTEL_*` variable the SDK refuses) is an error here, before serving.
    pub fn start(settings: &TracingSettings) -> anyhow::Result<Self> {
        let (sender, receiver) = sync_channel(settings.queue_size);
        let (built_tx, built_rx) = sync_channel::<Result<(), String>>(1);
        let batch_size = MAX_BATCH.min(settings.queue_size);
        let protocol = settings.protocol;
        let endpoint = settings.endpoint.clone();
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = built_tx.send(Err(format!("cannot start its runtime: {e}")));
                        return;
                    }
                };
                // tonic's channel starts its worker on the runtime it is built in.
                let exporter = runtime.block_on(async { build_exporter(protocol, &endpoint) });
                match exporter {
                    Ok(exporter) => {
                        let _ = built_tx.send(Ok(()));
                        run(&runtime, exporter, &receiver, batch_size, counters());
                    }
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("cannot start the span export thread: {e}"))?;
        match built_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                sender,
                worker: Mutex::new(Some(worker)),
            }),
            Ok(Err(problem)) => Err(anyhow::anyhow!("the OTLP span exporter: {problem}")),
            Err(_) => Err(anyhow::anyhow!("the span export thread stopped at start")),
        }
    }

    /// Sends a control message and waits for its answer, at most `timeout`.
    fn control(&self, make: fn(SyncSender<()>) -> Message, timeout: Duration) -> OTelSdkResult {
        let (done_tx, done_rx) = sync_channel(1);
        // The queue may be full: wait for room only as long as the caller allows.
        let deadline = Instant::now() + timeout;
        let mut message = make(done_tx);
        loop {
            match self.sender.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return Err(OTelSdkError::Timeout(timeout)),
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        done_rx
            .recv_timeout(left)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if let Err(TrySendError::Full(_)) = self.sender.try_send(Message::Span(span)) {
            counters().dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.control(Message::Flush, EXPORT_BACKSTOP)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.control(Message::Shutdown, timeout);
        if result.is_ok() {
            let worker = self
                .worker
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(worker) = worker {
                let _ = worker.join();
            }
        }
        result
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Sent before any span: the queue is empty.
        let _ = self.sender.try_send(Message::Resource(resource.clone()));
    }
}

fn build_exporter(
    protocol: Protocol,
    endpoint: &str,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let built = match protocol {
        Protocol::Grpc => builder.with_tonic().with_endpoint(endpoint).build(),
        Protocol::HttpProtobuf => builder
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build(),
    };
    built.map_err(|e| e.to_string())
}

/// The export thread: batches of up to `batch_size`, sent when full or [`EXPORT_DELAY`]
/// after the last send, until shut down (or every sender is gone).
fn run(
    runtime: &tokio::runtime::Runtime,
    mut exporter: opentelemetry_otlp::SpanExporter,
    receiver: &Receiver<Message>,
    batch_size: usize,
    counters: &SpanCounters,
) {
    let mut batch = Vec::with_capacity(batch_size);
    let mut next_send = Instant::now() + EXPORT_DELAY;
    let throttle = gcounter_engine::Throttle::new(FAILURE_WARNING_INTERVAL);
    let export = |exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::replace(batch, Vec::with_capacity(batch_size));
        let count = spans.len() as u64;
        let sent = runtime.block_on(async {
            tokio::time::timeout(EXPORT_BACKSTOP, exporter.export(spans)).await
        });
        match sent {
            Ok(Ok(())) => {
                counters.exported.inc_by(count);
            }
            Ok(Err(error)) => {
                counters.failed.inc_by(count);
                if let Some(suppressed) = throttle.allow() {
                    tracing::warn!(%error, spans = count, failures_not_logged = suppressed, "span export to the tracing collector failed");
                }
            }
            Err(_) => {
                counters.failed.inc_by(count);
                if let Some(suppressed) = throttle.allow() {
                    tracing::warn!(
                        spans = count,
                        failures_not_logged = suppressed,
                        "span export to the tracing collector timed out"
                    );
                }
            }
        }
    };
    loop {
        let wait = next_send.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                batch.push(span);
                if batch.len() >= batch_size {
                    export(&exporter, &mut batch);
                    next_send = Instant::now() + EXPORT_DELAY;
                }
            }
            Ok(Message::Resource(resource)) => exporter.set_resource(&resource),
            Ok(Message::Flush(done)) => {
                drain(receiver, &mut batch, batch_size, |batch| {
                    export(&exporter, batch);
                });
                export(&exporter, &mut batch);
                let _ = done.send(());
            }
            Ok(Message::Shutdown(done)) => {
                drain(receiver, &mut batch, batch_size, |batch| {
                    export(&exporter, batch);
                });
                export(&exporter, &mut batch);
                let _ = exporter.shutdown();
                let _ = done.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                export(&exporter, &mut batch);
                next_send = Instant::now() + EXPORT_DELAY;
            }
            Err(RecvTimeoutError::Disconnected) => {
                export(&exporter, &mut batch);
                return;
            }
        }
    }
}

/// Takes the spans already queued (not those queued after), exporting full batches.
fn drain(
    receiver: &Receiver<Message>,
    batch: &mut Vec<SpanData>,
    batch_size: usize,
    mut export: impl FnMut(&mut Vec<SpanData>),
) {
    while let Ok(message) = receiver.try_recv() {
        if let Message::Span(span) = message {
            batch.push(span);
            if batch.len() >= batch_size {
                export(batch);
            }
        }
    }
}
