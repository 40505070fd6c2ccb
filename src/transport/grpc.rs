//! The gRPC server with its HTTP/2 limits.

use tonic::transport::Server;
use tower::layer::util::{Identity, Stack};

use super::budget::BodyBudgetLayer;
use super::deadline::RequestDeadlineLayer;
use super::inflight::InflightLimitLayer;
use super::settings::TransportSettings;

/// The layers [`grpc_server`] puts around every request.
pub type GrpcLayers =
    Stack<BodyBudgetLayer, Stack<InflightLimitLayer, Stack<RequestDeadlineLayer, Identity>>>;

/// A tonic server builder with every transport bound applied; add the services and serve it
/// on a [`super::BoundedListener`]'s `into_incoming()`.
///
/// - `max_concurrent_streams`: a peer cannot open more streams than this on one connection
///   (hyper's default was 200; tonic set none).
/// - Flow-control windows: what a peer may push before the service reads (hyper's default
///   was 1 MiB per stream and per connection).
/// - [`RequestDeadlineLayer`]: one deadline per request from its headers to its answer, so
///   the body read is covered: a stream that trickles its body is cut (`CANCELLED`) and
///   frees what it held.
/// - The body budget ([`BodyBudgetLayer`]): the global bound on buffered request bytes.
/// - A global cap on requests in flight ([`InflightLimitLayer`]): each holds a task, an
///   HTTP/2 stream and tonic's 8 KiB decode buffer whatever it announces; past the cap,
///   requests wait (within their deadline) without reading their body.
/// - HTTP/2 keepalive: drops peers that vanished without closing.
/// - Optionally a maximum connection age (GOAWAY, then a grace period), so long-lived client
///   connections rebalance over new replicas.
///
/// The per-message size (`--max-request-bytes`) is set on the service itself
/// (`max_decoding_message_size`), where tonic checks the announced length before buffering.
pub fn grpc_server(settings: &TransportSettings) -> Server<GrpcLayers> {
    let mut server = Server::builder();
    if let Some(age) = settings.max_connection_age {
        server = server.max_connection_age(age);
    }
    if let Some(grace) = settings.max_connection_age_grace {
        server = server.max_connection_age_grace(grace);
    }
    server
        .max_concurrent_streams(settings.max_concurrent_streams)
        .initial_stream_window_size(settings.http2_stream_window)
        .initial_connection_window_size(settings.http2_connection_window)
        .http2_keepalive_interval(Some(settings.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(settings.http2_keepalive_timeout))
        .layer(RequestDeadlineLayer::new(settings.request_timeout))
        .layer(InflightLimitLayer::new(settings.max_inflight_requests))
        .layer(BodyBudgetLayer::new(
            settings.max_buffered_request_bytes,
            settings.max_request_bytes,
        ))
}
