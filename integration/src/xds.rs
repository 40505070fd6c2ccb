//! A small xDS management server for the tests: ADS, state of the world, serving
//! `RateLimitConfig` snapshots the test pushes, recording every request the client sends
//! (ACKs, NACKs and their error detail), on its own thread and Tokio runtime so sync and
//! async tests can use it. Dropping it stops it and closes every stream (a "dropped server").

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status, Streaming};

use super::tls::{Ca, Identity};

/// The resource type the service subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// What the server sends: a version and its resources (already packed, so a test can send
/// bytes that do not decode).
#[derive(Clone)]
struct Snapshot {
    version: String,
    resources: Vec<Any>,
}

#[derive(Default)]
struct Recorded {
    requests: Vec<DiscoveryRequest>,
    streams: usize,
    /// The ASCII metadata (headers) each stream was opened with.
    headers: Vec<Vec<(String, String)>>,
}

struct Shared {
    /// `None` until the test pushes: nothing is sent before.
    snapshot: watch::Sender<Option<Snapshot>>,
    recorded: Mutex<Recorded>,
    changed: Condvar,
}

/// A running ADS server; stopped (every stream closed) on drop.
pub struct AdsServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// TLS for the server: its identity, and the CA its clients must chain to (mTLS) if any.
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
}

impl ServerTls {
    /// The server presents `identity`; with `client_ca`, clients must present a certificate
    /// from it (mTLS).
    pub fn new(identity: &Identity, client_ca: Option<&Ca>) -> ServerTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).expect("CA PEM"))
                    .expect("add CA");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("server cert PEM");
        let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("server key");
        let mut config = builder
            .with_single_cert(certs, key)
            .expect("server identity");
        config.alpn_protocols = vec![b"h2".to_vec()];
        ServerTls {
            config: Arc::new(config),
        }
    }
}

impl AdsServer {
    /// Starts on 127.0.0.1:`port` (0: any free port), plaintext.
    pub fn start(port: u16) -> AdsServer {
        Self::start_with(port, None)
    }

    /// Starts on 127.0.0.1:`port` with TLS if given.
    pub fn start_with(port: u16, tls: Option<ServerTls>) -> AdsServer {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("ADS server: bind 127.0.0.1:{port}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("ADS server address");
        let (snapshot, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            snapshot,
            recorded: Mutex::new(Recorded::default()),
            changed: Condvar::new(),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let service = Ads(Arc::clone(&shared));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("ADS server runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let router = tonic::transport::Server::builder()
                    .add_service(AggregatedDiscoveryServiceServer::new(service));
                // Stopping drops the server and every stream at once (a graceful shutdown
                // would wait for the client's stream, which never ends by itself).
                let served = async {
                    match tls {
                        None => {
                            router
                                .serve_with_incoming(TcpListenerStream::new(listener))
                                .await
                        }
                        Some(tls) => {
                            router
                                .serve_with_incoming(tls_incoming(listener, tls))
                                .await
                        }
                    }
                };
                tokio::select! {
                    result = served => {
                        if let Err(e) = result {
                            eprintln!("ADS server stopped: {e}");
                        }
                    }
                    _ = stopped => {}
                }
            });
            runtime.shutdown_background();
        });
        AdsServer {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Pushes a new state of the world to every stream (and to streams opened later).
    pub fn push(&self, version: &str, resources: &[RateLimitConfig]) {
        self.push_any(version, resources.iter().map(pack).collect());
    }

    /// Like [`AdsServer::push`] with resources as they go on the wire.
    pub fn push_any(&self, version: &str, resources: Vec<Any>) {
        self.shared.snapshot.send_replace(Some(Snapshot {
            version: version.to_owned(),
            resources,
        }));
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.shared.recorded.lock().expect("lock").requests.clone()
    }

    /// The headers of every stream opened so far.
    pub fn stream_headers(&self) -> Vec<Vec<(String, String)>> {
        self.shared.recorded.lock().expect("lock").headers.clone()
    }

    /// Streams opened so far.
    pub fn streams(&self) -> usize {
        self.shared.recorded.lock().expect("lock").streams
    }

    /// Waits (at most `timeout`) for a request matching `matches`; panics naming `what` and
    /// every request received otherwise.
    pub fn wait_request(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&DiscoveryRequest) -> bool,
    ) -> DiscoveryRequest {
        self.wait_until(
            timeout,
            |recorded| recorded.requests.iter().find(|r| matches(r)).cloned(),
            |recorded| {
                format!(
                    "ADS server: no {what} within {timeout:?}; received: {:#?}",
                    recorded.requests
                )
            },
        )
    }

    /// Waits (at most `timeout`) until `found` finds something in what was recorded; panics
    /// with `missing`'s account of what was recorded otherwise.
    fn wait_until<T>(
        &self,
        timeout: Duration,
        found: impl Fn(&Recorded) -> Option<T>,
        missing: impl Fn(&Recorded) -> String,
    ) -> T {
        let deadline = Instant::now() + timeout;
        let mut recorded = self.shared.recorded.lock().expect("lock");
        loop {
            if let Some(found) = found(&recorded) {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("{}", missing(&recorded));
            }
            recorded = self
                .shared
                .changed
                .wait_timeout(recorded, left)
                .expect("lock")
                .0;
        }
    }

    /// Waits for the ACK of `version` (a request with that version and no error detail).
    pub fn wait_ack(&self, version: &str) -> DiscoveryRequest {
        self.wait_request(
            &format!("ACK of version {version:?}"),
            Duration::from_secs(10),
            |r| {
                r.version_info == version
                    && r.error_detail.is_none()
                    && !r.response_nonce.is_empty()
            },
        )
    }

    /// Waits for the first NACK (a request with an error detail) and returns it.
    pub fn wait_nack(&self) -> DiscoveryRequest {
        self.wait_request("NACK", Duration::from_secs(10), |r| {
            r.error_detail.is_some()
        })
    }

    /// Waits until `n` streams were opened (the client reconnected).
    pub fn wait_streams(&self, n: usize, timeout: Duration) {
        self.wait_until(
            timeout,
            |recorded| (recorded.streams >= n).then_some(()),
            |recorded| {
                format!(
                    "ADS server: {} streams opened, expected {n}",
                    recorded.streams
                )
            },
        );
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `RateLimitConfig` as an `Any`.
pub fn pack(config: &RateLimitConfig) -> Any {
    Any {
        type_url: TYPE_URL.into(),
        value: config.encode_to_vec(),
    }
}

/// A domain with one descriptor per `(key, requests_per_unit)`, each per minute.
pub fn domain(name: &str, domain: &str, limits: &[(&str, u32)]) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors: limits
            .iter()
            .map(|(key, n)| limited(key, "", RateLimitUnit::Minute, *n))
            .collect(),
    }
}

/// One limited descriptor.
pub fn limited(key: &str, value: &str, unit: RateLimitUnit, n: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

struct Ads(Arc<Shared>);

type ResponseStream = ReceiverStream<Result<DiscoveryResponse, Status>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ResponseStream;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let shared = Arc::clone(&self.0);
        {
            let headers = request
                .metadata()
                .iter()
                .filter_map(|entry| match entry {
                    tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                        Some((k.to_string(), v.to_str().ok()?.to_owned()))
                    }
                    tonic::metadata::KeyAndValueRef::Binary(..) => None,
                })
                .collect();
            let mut recorded = shared.recorded.lock().expect("lock");
            recorded.streams += 1;
            recorded.headers.push(headers);
        }
        shared.changed.notify_all();
        let mut incoming = request.into_inner();
        let (responses, stream) = mpsc::channel(4);
        let (subscribed, mut first) = watch::channel(false);
        let recorder = Arc::clone(&shared);
        // Record every request; the first one opens the subscription.
        tokio::spawn(async move {
            while let Ok(Some(request)) = incoming.message().await {
                recorder
                    .recorded
                    .lock()
                    .expect("lock")
                    .requests
                    .push(request);
                recorder.changed.notify_all();
                let _ = subscribed.send(true);
            }
        });
        let mut snapshots = shared.snapshot.subscribe();
        tokio::spawn(async move {
            if first.wait_for(|s| *s).await.is_err() {
                return;
            }
            let mut nonce = 0_u64;
            loop {
                let current = snapshots.borrow_and_update().clone();
                let Some(snapshot) = current else {
                    if snapshots.changed().await.is_err() {
                        return;
                    }
                    continue;
                };
                nonce += 1;
                let response = DiscoveryResponse {
                    version_info: snapshot.version,
                    resources: snapshot.resources,
                    type_url: TYPE_URL.into(),
                    nonce: nonce.to_string(),
                    ..DiscoveryResponse::default()
                };
                if responses.send(Ok(response)).await.is_err() || snapshots.changed().await.is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn delta_aggregated_resources(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

/// TLS connections handshaken from `listener` (a failed handshake is dropped).
fn tls_incoming(
    listener: tokio::net::TcpListener,
    tls: ServerTls,
) -> ReceiverStream<Result<TlsConnection, std::io::Error>> {
    let (tx, rx) = mpsc::channel(16);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(TlsConnection(stream))).await;
                    }
                    Err(e) => eprintln!("ADS server: TLS handshake failed: {e}"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// A handshaken server-side TLS stream, as tonic's server takes connections.
pub struct TlsConnection(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl Connected for TlsConnection {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
