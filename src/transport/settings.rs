//! The transport's bounds, as `serve` flags set them, and their sanity checks.

use std::fmt;
use std::time::Duration;

/// Every bound the transport applies. Defaults are the `serve` flags' defaults.
#[derive(Debug, Clone)]
pub struct TransportSettings {
    /// Open gRPC connections; at the cap the listener stops accepting (the kernel backlog
    /// holds newcomers) until one closes.
    pub max_connections: usize,
    /// Open admin (HTTP) connections; a separate cap, so a gRPC flood never takes `/healthz`.
    pub max_admin_connections: usize,
    /// A connection that has not sent its first bytes (the HTTP/2 preface on gRPC, a first
    /// byte on the admin port) by then is closed.
    pub preface_timeout: Duration,
    /// The admin port's deadline for a complete request head.
    pub admin_header_timeout: Duration,
    /// Longest pause of the accept loop after an accept error (EMFILE, ENFILE, ENOBUFS).
    pub max_accept_backoff: Duration,
    /// Concurrent HTTP/2 streams per gRPC connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest gRPC request message accepted; checked on the length prefix, before buffering.
    pub max_request_bytes: usize,
    /// Request bytes buffered by all streams together; past it a request is refused.
    pub max_buffered_request_bytes: usize,
    /// gRPC requests in flight in the whole process; more wait for a slot.
    pub max_inflight_requests: usize,
    /// Deadline of one gRPC request, body read included.
    pub request_timeout: Duration,
    /// HTTP/2 flow-control windows: what a peer may send before the service reads it.
    pub http2_stream_window: u32,
    pub http2_connection_window: u32,
    /// HTTP/2 PING interval and how long an unanswered PING keeps a connection.
    pub http2_keepalive_interval: Duration,
    pub http2_keepalive_timeout: Duration,
    /// TCP keepalive on accepted connections (dead peers behind a partition).
    pub tcp_keepalive: Duration,
    /// A gRPC connection older than this is sent GOAWAY, so clients reconnect and spread
    /// over new replicas (grpc-go's MaxConnectionAge, upstream's GRPC_MAX_CONNECTION_AGE).
    pub max_connection_age: Option<Duration>,
    /// After GOAWAY, how long in-flight requests may finish before the connection is closed.
    pub max_connection_age_grace: Option<Duration>,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            max_connections: 1_024,
            max_admin_connections: 64,
            preface_timeout: Duration::from_secs(5),
            admin_header_timeout: Duration::from_secs(5),
            max_accept_backoff: Duration::from_secs(1),
            max_concurrent_streams: 100,
            max_request_bytes: 256 << 10,
            max_buffered_request_bytes: 64 << 20,
            max_inflight_requests: 4_096,
            request_timeout: Duration::from_secs(5),
            http2_stream_window: 64 << 10,
            http2_connection_window: 128 << 10,
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(10),
            tcp_keepalive: Duration::from_secs(60),
            max_connection_age: None,
            max_connection_age_grace: None,
        }
    }
}

/// A transport setting that cannot work; the text names the flag.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--{flag} {problem}")]
pub struct InvalidTransportSetting {
    pub flag: &'static str,
    pub problem: String,
}

fn invalid(flag: &'static str, problem: impl Into<String>) -> InvalidTransportSetting {
    InvalidTransportSetting {
        flag,
        problem: problem.into(),
    }
}

/// The HTTP/2 spec's bounds on a flow-control window (RFC 9113 §6.9).
const MIN_WINDOW: u32 = 65_535;
const MAX_WINDOW: u32 = (1 << 31) - 1;

impl TransportSettings {
    /// Refuses zero or absurd values, each with a message naming its flag.
    pub fn validate(&self) -> Result<(), InvalidTransportSetting> {
        let window = (u64::from(MIN_WINDOW), u64::from(MAX_WINDOW));
        // Below 1 KiB not even a small Envoy request fits; above 64 MiB one stream could hold
        // more than a whole default budget.
        #[rustfmt::skip]
        let sizes = [
            ("max-connections", self.max_connections as u64, (1, 1 << 20)),
            ("max-admin-connections", self.max_admin_connections as u64, (1, 1 << 16)),
            ("max-concurrent-streams", u64::from(self.max_concurrent_streams), (1, 10_000)),
            ("max-request-bytes", self.max_request_bytes as u64, (1 << 10, 64 << 20)),
        ];
        all_within(&sizes)?;
        let buffered = self.max_buffered_request_bytes as u64;
        within(
            "max-buffered-request-bytes",
            buffered,
            self.max_request_bytes as u64,
            16 << 30,
        )
        .map_err(|e| {
            invalid(
                e.flag,
                format!("{} (and at least --max-request-bytes)", e.problem),
            )
        })?;
        #[rustfmt::skip]
        let more_sizes = [
            ("max-inflight-requests", self.max_inflight_requests as u64, (1, 1 << 20)),
            ("http2-stream-window", u64::from(self.http2_stream_window), window),
            ("http2-connection-window", u64::from(self.http2_connection_window), window),
        ];
        all_within(&more_sizes)?;
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        #[rustfmt::skip]
        let durations = [
            ("preface-timeout", self.preface_timeout, (ms(10), s(600))),
            ("admin-header-timeout", self.admin_header_timeout, (ms(10), s(600))),
            ("max-accept-backoff", self.max_accept_backoff, (ms(1), s(60))),
            ("request-timeout", self.request_timeout, (ms(1), s(3_600))),
            ("http2-keepalive-interval", self.http2_keepalive_interval, (ms(100), s(86_400))),
            ("http2-keepalive-timeout", self.http2_keepalive_timeout, (ms(100), s(3_600))),
            ("tcp-keepalive", self.tcp_keepalive, (s(1), s(86_400))),
        ];
        all_within(&durations)?;
        // Checked only when set.
        let month = s(30 * 86_400);
        if let Some(age) = self.max_connection_age {
            within("max-connection-age", age, ms(100), month)?;
        }
        if let Some(grace) = self.max_connection_age_grace {
            within("max-connection-age-grace", grace, ms(1), month)?;
        }
        Ok(())
    }
}

/// Each `(flag, value, (min, max))` in turn, as [`within`]; the first out of its range fails.
fn all_within<T: Copy + PartialOrd + fmt::Debug>(
    bounds: &[(&'static str, T, (T, T))],
) -> Result<(), InvalidTransportSetting> {
    bounds
        .iter()
        .try_for_each(|&(flag, value, (min, max))| within(flag, value, min, max))
}

/// `value` of `--flag` within `min..=max` (a count, a size or a duration).
fn within<T: Copy + PartialOrd + fmt::Debug>(
    flag: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), InvalidTransportSetting> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            flag,
            format!("must be between {min:?} and {max:?}, got {value:?}"),
        ))
    }
}

#[cfg(test)]
mod tests;
