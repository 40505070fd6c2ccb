//! A test OpenTelemetry collector: OTLP/gRPC (`opentelemetry.proto.collector.trace.v1.
//! TraceService/Export`) and OTLP/HTTP with protobuf bodies (`POST /v1/traces`), each on
//! its own loopback port, on a thread and Tokio runtime of its own (usable from any test).
//! It keeps every span it receives, with its resource's `service.name`.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the resource it came with.
    pub service: String,
    /// The resource's attributes, values as text.
    pub resource: Vec<(String, String)>,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// The W3C trace state it carries (empty: none).
    pub trace_state: String,
    /// OTLP's span kind (2: server).
    pub kind: i32,
    /// OTLP's span flags: the W3C trace flags (bit 0: sampled), and whether the parent is
    /// known to be remote (0x100) and is (0x200).
    pub flags: u32,
    /// The span's attributes, values as text (arrays as their items joined by `|`).
    pub attributes: Vec<(String, String)>,
    /// How it arrived: `grpc` or `http`.
    pub via: &'static str,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn resource_attribute(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

type Spans = Arc<Mutex<Vec<ReceivedSpan>>>;

/// A running collector; stops when dropped.
pub struct Collector {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    spans: Spans,
    _stop: Stop,
}

/// Stops a background runtime's thread when dropped (the runtime is dropped there, so a
/// test on a Tokio runtime may drop it too).
struct Stop(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// Runs `serve` on a thread with its own runtime until the returned [`Stop`] is dropped;
/// `bind` gives the listeners, whose addresses are returned.
fn background<T: Send + 'static>(
    ports: usize,
    serve: impl FnOnce(Vec<TcpListener>) -> T + Send + 'static,
    run: impl FnOnce(T) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + 'static,
) -> (Vec<SocketAddr>, Stop) {
    let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a collector's runtime");
        runtime.block_on(async move {
            let mut listeners = Vec::new();
            for _ in 0..ports {
                listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
            }
            let addrs: Vec<SocketAddr> = listeners
                .iter()
                .map(|l| l.local_addr().expect("local addr"))
                .collect();
            let state = serve(listeners);
            let _ = addrs_tx.send(addrs);
            tokio::select! {
                () = run(state) => {}
                _ = stop_rx => {}
            }
        });
    });
    let addrs = addrs_rx.recv().expect("the collector's thread started");
    (addrs, Stop(Some(stop_tx)))
}

impl Collector {
    /// Listens on two free loopback ports, gRPC and HTTP.
    pub fn start() -> Collector {
        let spans: Spans = Arc::default();
        let kept = Arc::clone(&spans);
        let (addrs, stop) = background(
            2,
            move |listeners| (listeners, kept),
            |(mut listeners, spans): (Vec<TcpListener>, Spans)| {
                Box::pin(async move {
                    let http = listeners.pop().expect("http listener");
                    let grpc = listeners.pop().expect("grpc listener");
                    let service = TraceServiceServer::new(Receiver(Arc::clone(&spans)));
                    let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc);
                    let grpc = tonic::transport::Server::builder()
                        .add_service(service)
                        .serve_with_incoming(incoming);
                    let http = async move {
                        while let Ok((stream, _)) = http.accept().await {
                            tokio::spawn(serve_http(stream, Arc::clone(&spans)));
                        }
                    };
                    tokio::select! {
                        _ = grpc => {}
                        () = http => {}
                    }
                })
            },
        );
        Collector {
            grpc_addr: addrs[0],
            http_addr: addrs[1],
            spans,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT` of the gRPC receiver.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// `http://127.0.0.1:PORT` of the HTTP receiver (spans go to its `/v1/traces`).
    pub fn http_endpoint(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits until `done` holds of the spans received (checked every 50 ms), then returns
    /// them; panics after `timeout` with what was received.
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {timeout:?}; received: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

struct Receiver(Spans);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn keep(spans: &Spans, request: ExportTraceServiceRequest, via: &'static str) {
    let mut kept = spans
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource
            .iter()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                kept.push(ReceivedSpan {
                    service: service.clone(),
                    resource: resource.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    trace_state: span.trace_state,
                    kind: span.kind,
                    flags: span.flags,
                    attributes: attributes(&span.attributes),
                    via,
                });
            }
        }
    }
}

fn attributes(list: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
    list.iter()
        .map(|kv| {
            let value = kv
                .value
                .as_ref()
                .and_then(|v| v.value.as_ref())
                .map(text)
                .unwrap_or_default();
            (kv.key.clone(), value)
        })
        .collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        Value::IntValue(i) => i.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        Value::ArrayValue(array) => array
            .values
            .iter()
            .filter_map(|v| v.value.as_ref())
            .map(text)
            .collect::<Vec<_>>()
            .join("|"),
        other => format!("{other:?}"),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// HTTP/1.1 with keep-alive: each `POST /v1/traces` body is an `ExportTraceServiceRequest`.
async fn serve_http(mut stream: TcpStream, spans: Spans) -> io::Result<()> {
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(end) = find(&buffer, b"\r\n\r\n") {
                break end;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        let length = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buffer.len() < body_start + length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
        let body = buffer[body_start..body_start + length].to_vec();
        buffer.drain(..body_start + length);
        let status = if head.starts_with("POST /v1/traces ") {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    keep(&spans, request, "http");
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        } else {
            "404 Not Found"
        };
        let answer = ExportTraceServiceResponse::default().encode_to_vec();
        let mut response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        response.extend_from_slice(&answer);
        stream.write_all(&response).await?;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A collector that accepts connections and never answers (nor reads): an export to it
/// hangs until the exporter gives up. Stops when dropped.
pub struct Silent {
    pub addr: SocketAddr,
    _stop: Stop,
}

impl Silent {
    pub fn start() -> Silent {
        let (addrs, stop) = background(
            1,
            |listeners| listeners,
            |mut listeners: Vec<TcpListener>| {
                Box::pin(async move {
                    let listener = listeners.pop().expect("listener");
                    let mut held = Vec::new();
                    while let Ok((stream, _)) = listener.accept().await {
                        held.push(stream);
                    }
                })
            },
        );
        Silent {
            addr: addrs[0],
            _stop: stop,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}
