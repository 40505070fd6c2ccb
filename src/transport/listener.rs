//! The accept loop: a connection cap, per-connection socket options, and a back-off on
//! accept errors.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::connection::BoundedConn;
use crate::telemetry::ConnectionMetrics;

/// First pause after an accept error; doubled up to `max_accept_backoff`.
const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
/// At most one accept-error warning per this long; the others are counted into the next.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// How one listener bounds its connections.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// `grpc` or `admin`, for logs.
    pub name: &'static str,
    pub max_connections: usize,
    /// Bytes a connection must send before `preface_timeout` (24, the HTTP/2 client preface,
    /// on gRPC; 0 turns the deadline off).
    pub preface_bytes: usize,
    pub preface_timeout: Duration,
    pub max_accept_backoff: Duration,
    pub tcp_keepalive: Option<Duration>,
}

/// A TCP listener that never holds more than `max_connections` connections and never spins.
///
/// At the cap it stops calling `accept` (Go's `netutil.LimitListener` does the same): the
/// kernel's backlog holds newcomers until a connection closes, and no file descriptor is
/// spent on them. An accept error that is about the listener or the process (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM) pauses the loop, 5 ms doubling up to `max_accept_backoff`, and
/// is logged at most every 5 s; tonic's own loop retried at once and logged at trace level,
/// which turned fd exhaustion (a flood of idle connections) into a silent 100 % CPU spin.
pub struct BoundedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    settings: ListenerSettings,
    backoff: Duration,
    errors: AcceptErrorLog,
    metrics: ConnectionMetrics,
}

impl BoundedListener {
    pub fn new(
        listener: TcpListener,
        settings: ListenerSettings,
        metrics: ConnectionMetrics,
    ) -> Self {
        Self {
            listener,
            permits: Arc::new(Semaphore::new(settings.max_connections)),
            settings,
            backoff: MIN_ACCEPT_BACKOFF,
            errors: AcceptErrorLog::default(),
            metrics,
        }
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection, once one is free under the cap.
    pub async fn accept(&mut self) -> BoundedConn {
        // The semaphore is never closed, so `ok()` only drops an impossible error; without a
        // permit the connection would merely not count.
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok();
        loop {
            match self.listener.accept().await {
                Ok((stream, _peer)) => {
                    self.backoff = MIN_ACCEPT_BACKOFF;
                    self.configure(&stream);
                    return BoundedConn::new(
                        stream,
                        permit,
                        self.settings.preface_bytes,
                        self.settings.preface_timeout,
                        self.metrics.clone(),
                    );
                }
                // The peer gave up between SYN and accept: nothing wrong with us.
                Err(error) if is_per_connection(&error) => continue,
                Err(error) => {
                    self.metrics.accept_errors.inc();
                    self.errors.record(self.settings.name, &error, self.backoff);
                    tokio::time::sleep(self.backoff).await;
                    self.backoff = (self.backoff * 2).min(self.settings.max_accept_backoff);
                }
            }
        }
    }

    /// The connections as the stream [`super::GrpcServer::serve`] takes; it never ends
    /// and never yields an error (errors are handled here, not by tonic's spinning loop).
    pub fn into_incoming(self) -> impl Stream<Item = Result<BoundedConn, Infallible>> {
        futures_util::stream::unfold(self, |mut listener| async move {
            let conn = listener.accept().await;
            Some((Ok(conn), listener))
        })
    }

    fn configure(&self, stream: &TcpStream) {
        // Decisions are small request/response pairs: never wait to coalesce them.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        if let Some(time) = self.settings.tcp_keepalive {
            let keepalive = socket2::TcpKeepalive::new().with_time(time);
            if let Err(error) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
                tracing::debug!(%error, "cannot set TCP keepalive");
            }
        }
    }
}

/// Errors about one connection that vanished before it was accepted; the next accept may
/// well succeed at once.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Rate-limited warnings for accept errors: the first at once, then one every
/// `ACCEPT_LOG_EVERY` with how many were not logged in between.
#[derive(Default)]
struct AcceptErrorLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl AcceptErrorLog {
    fn record(&mut self, listener: &str, error: &io::Error, pause: Duration) {
        let now = Instant::now();
        match self.last {
            Some(last) if now.duration_since(last) < ACCEPT_LOG_EVERY => self.suppressed += 1,
            _ => {
                tracing::warn!(
                    listener,
                    %error,
                    ?pause,
                    suppressed = self.suppressed,
                    "accept failed; pausing the accept loop (too many open files? see --max-connections)"
                );
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests;
