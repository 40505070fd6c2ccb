//! The ADS client: one state-of-the-world subscription to `RateLimitConfig`, kept alive for
//! the life of `serve`.
//!
//! Each response is the whole config (state of the world): it is compiled like a file; an
//! accepted one is swapped in through the same `ArcSwap` the file watcher uses and ACKed
//! (its version and nonce); a refused one is NACKed (the last accepted version, the nonce,
//! and the problems in `error_detail`) and the running config stays. A resource the server
//! no longer sends is gone from the next config, and so is its domain. When the stream ends
//! the running config keeps serving and the client reconnects (connect attempts every
//! `connect_retry_interval`, jittered; after an established stream, upstream's back-off),
//! then subscribes again from scratch.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status;
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, watch};
use tonic::transport::{Channel, Endpoint};

use super::resource::{self, TYPE_URL};
use super::settings::XdsSettings;
use super::tls::{TlsClient, XdsTlsError};
use crate::config::{LimitsConfig, LoadOptions};
use crate::telemetry::Metrics;

/// HTTP/2 pings find a server that vanished without closing the connection.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the problems sent back in a NACK.
const MAX_ERROR_DETAIL_BYTES: usize = 8 * 1024;

/// Why a session with the xDS server ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("{0}")]
    Tls(#[from] XdsTlsError),
    #[error("no connection within {0:?}")]
    Timeout(Duration),
    #[error("stream failed: {0}")]
    Stream(#[from] tonic::Status),
    #[error("the server closed the stream")]
    Closed,
}

/// What the client updates.
pub struct Sink {
    pub limits: Arc<ArcSwap<LimitsConfig>>,
    pub metrics: Arc<Metrics>,
    /// Counts the configs accepted (`serve` waits for the first).
    pub accepted: watch::Sender<u64>,
    /// How each pushed config is compiled: the bounds and switches of a file's load.
    pub load: LoadOptions,
}

/// Runs until dropped: subscribe, apply pushes, reconnect.
pub async fn run(settings: XdsSettings, sink: Sink) {
    let mut attempt = 0_u32;
    loop {
        let mut established = false;
        match session(&settings, &sink, &mut established).await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(server = %settings.server, error = %e, "xDS config stream ended; the running limits stay")
            }
        }
        let delay = if established {
            let delay = settings.backoff.delay(attempt, fastrand::f64());
            attempt = attempt.saturating_add(1);
            delay
        } else {
            // Linear, ±50 % jitter, as upstream's gRPC retry on connect.
            settings
                .connect_retry_interval
                .mul_f64(0.5 + fastrand::f64())
        };
        tracing::info!(?delay, "reconnecting to the xDS server");
        tokio::time::sleep(delay).await;
    }
}

/// One connection and its stream. `established` turns true once a response was received.
async fn session(
    settings: &XdsSettings,
    sink: &Sink,
    established: &mut bool,
) -> Result<(), SessionError> {
    let timeout = settings.connect_retry_interval;
    let channel = tokio::time::timeout(timeout, connect(settings))
        .await
        .map_err(|_| SessionError::Timeout(timeout))??;
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(settings.max_message_bytes);
    let (requests, outgoing) = mpsc::channel::<DiscoveryRequest>(4);
    let node = node(settings);
    // A fresh subscription: the server sends everything it has for this node.
    let _ = requests
        .send(DiscoveryRequest {
            node: Some(node.clone()),
            type_url: TYPE_URL.into(),
            ..DiscoveryRequest::default()
        })
        .await;
    let stream = futures_util::stream::unfold(outgoing, |mut rx| async move {
        rx.recv().await.map(|request| (request, rx))
    });
    let mut request = tonic::Request::new(stream);
    for (name, value) in &settings.headers {
        if let Ok(name) = tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes())
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            request.metadata_mut().insert(name, value);
        }
    }
    let mut responses = tokio::time::timeout(timeout, client.stream_aggregated_resources(request))
        .await
        .map_err(|_| SessionError::Timeout(timeout))??
        .into_inner();
    tracing::info!(server = %settings.server, node = %settings.node_id, "subscribed to rate-limit configs over xDS");
    let mut accepted_version = String::new();
    loop {
        let Some(response) = responses.message().await? else {
            return Err(SessionError::Closed);
        };
        *established = true;
        let reply = apply(response, sink, &mut accepted_version).await;
        if requests.send(reply).await.is_err() {
            return Err(SessionError::Closed);
        }
    }
}

async fn connect(settings: &XdsSettings) -> Result<Channel, SessionError> {
    let endpoint = Endpoint::from(settings.server.clone())
        .connect_timeout(settings.connect_retry_interval)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let Some(tls) = &settings.tls else {
        return Ok(endpoint.connect().await?);
    };
    let client = TlsClient::load(tls)?;
    let address = (settings.host.clone(), settings.port);
    let connector = tower::service_fn(move |_: http::Uri| {
        let client = client.clone();
        let address = address.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            let tls = tokio_rustls::TlsConnector::from(client.config)
                .connect(client.server_name, tcp)
                .await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    Ok(endpoint.connect_with_connector(connector).await?)
}

/// Compiles one response, swaps it in if valid, and says what to answer (ACK or NACK).
async fn apply(
    response: DiscoveryResponse,
    sink: &Sink,
    accepted_version: &mut String,
) -> DiscoveryRequest {
    let DiscoveryResponse {
        version_info,
        resources,
        type_url,
        nonce,
        ..
    } = response;
    let compiled = if type_url == TYPE_URL {
        let load = sink.load;
        tokio::task::spawn_blocking(move || resource::compile(&resources, &load))
            .await
            .unwrap_or_else(|e| Err(resource::Rejected(format!("compiling failed: {e}"))))
    } else {
        Err(resource::Rejected(format!(
            "type {type_url:?} was not subscribed to; expected {TYPE_URL}"
        )))
    };
    match compiled {
        Ok(config) => {
            let rules = config.rule_count();
            let domains = config.domains().count();
            sink.limits.store(Arc::new(config));
            sink.metrics.config_loaded(rules);
            sink.accepted.send_modify(|n| *n = n.saturating_add(1));
            tracing::info!(version = %version_info, domains, rules, "limits config from xDS accepted");
            accepted_version.clone_from(&version_info);
            DiscoveryRequest {
                version_info,
                type_url: TYPE_URL.into(),
                response_nonce: nonce,
                ..DiscoveryRequest::default()
            }
        }
        Err(resource::Rejected(problem)) => {
            sink.metrics.config_rejected();
            tracing::error!(version = %version_info, %problem, "limits config from xDS rejected (NACK); keeping the running config");
            DiscoveryRequest {
                version_info: accepted_version.clone(),
                type_url: TYPE_URL.into(),
                response_nonce: nonce,
                error_detail: Some(Status {
                    code: tonic::Code::InvalidArgument as i32,
                    message: truncate(problem, MAX_ERROR_DETAIL_BYTES),
                    details: Vec::new(),
                }),
                ..DiscoveryRequest::default()
            }
        }
    }
}

fn node(settings: &XdsSettings) -> Node {
    let fields = settings
        .node_metadata
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Value {
                    kind: Some(Kind::StringValue(v.clone())),
                },
            )
        })
        .collect();
    Node {
        id: settings.node_id.clone(),
        metadata: Some(Struct { fields }),
        ..Node::default()
    }
}

/// At most `max` bytes, cut at a character boundary, saying so.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n… (truncated)");
    }
    text
}
