//! The transport's bounds: connections, streams, request sizes and deadlines.

use std::time::Duration;

use crate::byte_size_arg::{ByteSizeRange, gib, kib, mib};
use crate::duration_arg::{DurationRange, hours, millis};

/// The HTTP/2 spec's bounds on a flow-control window (RFC 9113 §6.9).
const WINDOW: ByteSizeRange = ByteSizeRange::new(65_535, (1 << 31) - 1);

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::TRANSPORT)]
pub struct TransportArgs {
    /// Open gRPC connections; at the cap new ones wait in the kernel's backlog [range: 1 to 1048576]
    ///
    /// Default: 1024, or as many as 3/16 of what --max-memory leaves holds (each one its
    /// --http2-connection-window + 32KiB), at most 1024.
    #[arg(long, env = "RLS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Open admin (HTTP) connections [range: 1 to 65536]
    ///
    /// A cap of their own, so a gRPC flood cannot take /healthz.
    #[arg(long, env = "RLS_MAX_ADMIN_CONNECTIONS", default_value_t = 64)]
    pub max_admin_connections: usize,
    /// Concurrent HTTP/2 streams per gRPC connection [range: 1 to 10000]
    #[arg(long, env = "RLS_MAX_CONCURRENT_STREAMS", default_value_t = 100)]
    pub max_concurrent_streams: u32,
    /// gRPC requests in flight in the whole process; more wait [range: 1 to 1048576]
    ///
    /// A waiting request keeps its deadline. Default: 4096, or as many as 1/16 of what
    /// --max-memory leaves holds (12KiB each), at most 4096.
    #[arg(long, env = "RLS_MAX_INFLIGHT_REQUESTS")]
    pub max_inflight_requests: Option<usize>,
    /// Largest gRPC request message, checked before it is buffered [range: 1KiB to 64MiB]
    #[arg(long, env = "RLS_MAX_REQUEST_BYTES", default_value = "256KiB", value_parser = ByteSizeRange::new(kib(1), mib(64)).parser::<usize>())]
    pub max_request_bytes: usize,
    /// Request bytes buffered by all connections together; past it requests are refused [range: 1KiB to 16GiB]
    ///
    /// At least --max-request-bytes. Default: 64MiB, or 2/16 of what --max-memory leaves, at
    /// most 64MiB.
    #[arg(long, env = "RLS_MAX_BUFFERED_REQUEST_BYTES", value_parser = ByteSizeRange::new(kib(1), gib(16)).parser::<usize>())]
    pub max_buffered_request_bytes: Option<usize>,
    /// Bytes of one request descriptor, keys and values together [range: 1B to 64MiB]
    ///
    /// A larger one is refused with InvalidArgument.
    #[arg(long, env = "RLS_MAX_DESCRIPTOR_BYTES", default_value = "16KiB", value_parser = ByteSizeRange::new(1, mib(64)).parser::<u64>())]
    pub max_descriptor_bytes: u64,
    /// HTTP/2 flow-control window per stream [range: 65535 to 2147483647]
    #[arg(long, env = "RLS_HTTP2_STREAM_WINDOW", default_value = "64KiB", value_parser = WINDOW.parser::<u32>())]
    pub http2_stream_window: u32,
    /// HTTP/2 flow-control window per connection [range: 65535 to 2147483647]
    #[arg(long, env = "RLS_HTTP2_CONNECTION_WINDOW", default_value = "128KiB", value_parser = WINDOW.parser::<u32>())]
    pub http2_connection_window: u32,
    /// Deadline of one gRPC request, from its headers to its answer [range: 1ms to 1h]
    ///
    /// Reading the body included.
    #[arg(long, env = "RLS_REQUEST_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub request_timeout: Duration,
    /// A connection that has not sent its first bytes by then is closed [range: 10ms to 10m]
    ///
    /// The HTTP/2 preface on the gRPC port, a first byte on the admin port.
    #[arg(long, env = "RLS_PREFACE_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(10), millis(600_000)).parser())]
    pub preface_timeout: Duration,
    /// Admin port: the deadline for a complete request head [range: 10ms to 10m]
    #[arg(long, env = "RLS_ADMIN_HEADER_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(10), millis(600_000)).parser())]
    pub admin_header_timeout: Duration,
    /// Longest pause of an accept loop after an accept error such as EMFILE [range: 1ms to 1m]
    ///
    /// The pause starts at 5 ms and doubles.
    #[arg(long, env = "RLS_MAX_ACCEPT_BACKOFF", default_value = "1s", value_parser = DurationRange::new(millis(1), millis(60_000)).parser())]
    pub max_accept_backoff: Duration,
    /// HTTP/2 PING interval on gRPC connections [range: 100ms to 24h]
    #[arg(long, env = "RLS_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = DurationRange::new(millis(100), hours(24)).parser())]
    pub http2_keepalive_interval: Duration,
    /// How long an unanswered PING keeps a connection [range: 100ms to 1h]
    #[arg(long, env = "RLS_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(1)).parser())]
    pub http2_keepalive_timeout: Duration,
    /// A gRPC connection older than this gets GOAWAY and its client reconnects [range: 100ms to 720h]
    ///
    /// Off unless set. With no arguments, set from upstream's `GRPC_MAX_CONNECTION_AGE`
    /// (default 24h).
    #[arg(long, env = "RLS_MAX_CONNECTION_AGE", value_parser = DurationRange::new(millis(100), hours(24 * 30)).parser())]
    pub max_connection_age: Option<Duration>,
    /// After that GOAWAY, how long its requests may finish before it is closed [range: 1ms to 720h]
    ///
    /// With no arguments, set from upstream's `GRPC_MAX_CONNECTION_AGE_GRACE` (default 1h).
    #[arg(long, env = "RLS_MAX_CONNECTION_AGE_GRACE", value_parser = DurationRange::new(millis(1), hours(24 * 30)).parser())]
    pub max_connection_age_grace: Option<Duration>,
    /// On shutdown, how long in-flight requests may take before connections are cut [range: 1ms to 1h]
    ///
    /// A half-open client must not keep the process, and its pending replay, hostage.
    #[arg(long, env = "RLS_DRAIN_TIMEOUT", default_value = "10s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub drain_timeout: Duration,
}
