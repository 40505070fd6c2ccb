//! A hostile client, for the tests and the soak script (`scripts/abuse.py`): what one
//! unauthenticated peer can do to a gRPC server's memory and file descriptors.
//!
//! - [`slow_loris`]: HTTP/2 connections, each with many streams that announce a large gRPC
//!   message, send most of it, then trickle one byte at a time so the message never
//!   completes. A stream the server ends is opened again at once, as an
//!   attacker would.
//! - [`idle_flood`]: raw TCP connections that never send a byte, re-opened as soon as the
//!   server closes them, to exhaust connections and file descriptors.
//!
//! Both report what the server did to them; neither decides anything about the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// `POST` path of every slow-loris stream, unless told another.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const CHUNK: usize = 16 << 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A slow-loris run; also `rls-abuse slow-loris`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SlowLoris {
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub target: SocketAddr,
    /// The gRPC method every stream calls (RLQS's `StreamRateLimitQuotas` makes long-lived
    /// streams).
    #[arg(long, default_value = SHOULD_RATE_LIMIT)]
    pub path: String,
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    #[arg(long = "streams", default_value_t = 250)]
    pub streams_per_connection: usize,
    /// The gRPC message length each stream announces in its 5-byte prefix.
    #[arg(long, default_value_t = 4_000_000)]
    pub announce_bytes: u32,
    /// How much of it is sent at once (the rest trickles; 0: the prefix alone).
    #[arg(long, default_value_t = 3_900_000)]
    pub send_bytes: usize,
    /// One byte per this long after the first `send_bytes`.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub trickle_every: Duration,
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// What the slow-loris managed; counts over the whole run.
#[derive(Debug, Default, Serialize)]
pub struct SlowLorisReport {
    pub connections_opened: u64,
    pub connection_failures: u64,
    pub streams_opened: u64,
    /// Streams the server answered or reset before the run ended (the bounds at work).
    pub streams_ended_by_server: u64,
    pub bytes_sent: u64,
}

impl SlowLorisReport {
    /// Adds another run's counts: an attack run in rounds reports its total.
    pub fn add(&mut self, round: &SlowLorisReport) {
        self.connections_opened += round.connections_opened;
        self.connection_failures += round.connection_failures;
        self.streams_opened += round.streams_opened;
        self.streams_ended_by_server += round.streams_ended_by_server;
        self.bytes_sent += round.bytes_sent;
    }
}

#[derive(Default)]
struct LorisCounters {
    connections_opened: AtomicU64,
    connection_failures: AtomicU64,
    streams_opened: AtomicU64,
    streams_ended_by_server: AtomicU64,
    bytes_sent: AtomicU64,
}

/// Runs the slow-loris until `duration` has passed.
pub async fn slow_loris(config: SlowLoris) -> SlowLorisReport {
    let counters = Arc::new(LorisCounters::default());
    let deadline = Instant::now() + config.duration;
    let config = Arc::new(config);
    let mut connections = JoinSet::new();
    for _ in 0..config.connections {
        connections.spawn(loris_connection(
            Arc::clone(&config),
            Arc::clone(&counters),
            deadline,
        ));
    }
    while connections.join_next().await.is_some() {}
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    SlowLorisReport {
        connections_opened: load(&counters.connections_opened),
        connection_failures: load(&counters.connection_failures),
        streams_opened: load(&counters.streams_opened),
        streams_ended_by_server: load(&counters.streams_ended_by_server),
        bytes_sent: load(&counters.bytes_sent),
    }
}

/// One connection slot: connect, run the streams, connect again if the server closed it.
async fn loris_connection(config: Arc<SlowLoris>, counters: Arc<LorisCounters>, deadline: Instant) {
    while Instant::now() < deadline {
        let client = match connect_h2(config.target).await {
            Ok(client) => client,
            Err(()) => {
                counters.connection_failures.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        counters.connections_opened.fetch_add(1, Ordering::Relaxed);
        let mut streams = JoinSet::new();
        for _ in 0..config.streams_per_connection {
            streams.spawn(loris_stream(
                client.clone(),
                Arc::clone(&config),
                Arc::clone(&counters),
                deadline,
            ));
        }
        // Stop at the deadline even if a stream is stuck waiting for flow control.
        let _ = tokio::time::timeout_at(deadline.into(), async {
            while streams.join_next().await.is_some() {}
        })
        .await;
    }
}

pub(crate) async fn connect_h2(target: SocketAddr) -> Result<h2::client::SendRequest<Bytes>, ()> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(drop)?
        .map_err(drop)?;
    let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, h2::client::handshake(tcp))
        .await
        .map_err(drop)?
        .map_err(drop)?;
    tokio::spawn(async move {
        // Ends when the server closes the connection; the streams see it as errors.
        let _ = connection.await;
    });
    Ok(client)
}

/// One stream slot: open a stream, push most of a large message, trickle the rest; open
/// another when the server ends it. Returns when the connection is gone or time is up.
async fn loris_stream(
    mut client: h2::client::SendRequest<Bytes>,
    config: Arc<SlowLoris>,
    counters: Arc<LorisCounters>,
    deadline: Instant,
) {
    while Instant::now() < deadline {
        let Ok(ready) = client.clone().ready().await else {
            return;
        };
        client = ready;
        let request = http::Request::post(format!("http://{}{}", config.target, config.path))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(());
        let Ok(request) = request else { return };
        let Ok((response, mut send)) = client.send_request(request, false) else {
            return;
        };
        counters.streams_opened.fetch_add(1, Ordering::Relaxed);
        let push = async {
            let mut prefix = vec![0u8];
            prefix.extend_from_slice(&config.announce_bytes.to_be_bytes());
            send_all(&mut send, Bytes::from(prefix), &counters.bytes_sent).await?;
            let mut left = config.send_bytes;
            while left > 0 {
                let n = left.min(CHUNK);
                send_all(&mut send, Bytes::from(vec![b'x'; n]), &counters.bytes_sent).await?;
                left -= n;
            }
            loop {
                tokio::time::sleep(config.trickle_every).await;
                send_all(&mut send, Bytes::from_static(b"x"), &counters.bytes_sent).await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), ()>(())
        };
        // The server ends the stream: a trailers-only answer, or the end of a streaming
        // answer's body (its head comes at once), or a reset.
        let ended = async {
            let Ok(response) = response.await else { return };
            if response.headers().contains_key("grpc-status") {
                return;
            }
            let mut body = response.into_body();
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
        };
        tokio::select! {
            () = ended => {
                counters.streams_ended_by_server.fetch_add(1, Ordering::Relaxed);
            }
            Err(()) = push => {
                counters.streams_ended_by_server.fetch_add(1, Ordering::Relaxed);
            }
            () = tokio::time::sleep_until(deadline.into()) => return,
        }
    }
}

/// Sends `data` as flow control allows.
pub(crate) async fn send_all(
    send: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    sent: &AtomicU64,
) -> Result<(), ()> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = std::future::poll_fn(|cx| send.poll_capacity(cx))
            .await
            .ok_or(())?
            .map_err(drop)?;
        let chunk = data.split_to(granted.min(data.len()));
        let n = chunk.len() as u64;
        send.send_data(chunk, false).map_err(drop)?;
        sent.fetch_add(n, Ordering::Relaxed);
    }
    Ok(())
}

/// An idle-connection flood; also `rls-abuse idle`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct IdleFlood {
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub target: SocketAddr,
    /// Connections held open at once (from the client's side: the kernel's backlog counts).
    #[arg(long, default_value_t = 1_000)]
    pub connections: usize,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

#[derive(Debug, Default, Serialize)]
pub struct IdleFloodReport {
    pub connects: u64,
    pub connect_failures: u64,
    /// Connections the server closed (the preface deadline at work).
    pub closed_by_server: u64,
    /// Seconds from the first connect to the first close by the server, if any.
    pub first_close_after_s: Option<f64>,
}

/// Holds `connections` silent TCP connections for `duration`, replacing each one the server
/// closes.
pub async fn idle_flood(config: IdleFlood) -> IdleFloodReport {
    let start = Instant::now();
    let deadline = start + config.duration;
    let mut report = IdleFloodReport::default();
    let mut held: Vec<Option<TcpStream>> = (0..config.connections).map(|_| None).collect();
    while Instant::now() < deadline {
        for slot in held.iter_mut() {
            if let Some(stream) = slot
                && closed_by_peer(stream)
            {
                report.closed_by_server += 1;
                report
                    .first_close_after_s
                    .get_or_insert(start.elapsed().as_secs_f64());
                *slot = None;
            }
            if slot.is_none() && Instant::now() < deadline {
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(config.target)).await
                {
                    Ok(Ok(stream)) => {
                        report.connects += 1;
                        *slot = Some(stream);
                    }
                    _ => report.connect_failures += 1,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report
}

/// True once the peer closed or reset the connection (a read would not block).
fn closed_by_peer(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.try_read(&mut buf) {
        Ok(0) => true,
        // The server wrote something (HTTP/2 SETTINGS) and still holds the connection.
        Ok(_) => false,
        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
    }
}
