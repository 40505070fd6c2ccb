//! RLQS clients for the tests and `scripts/abuse.py`: a hostile one and a well-behaved one.
//!
//! - [`quota_flood`]: streams that each report many buckets, then reports naming many of them
//!   at once: with `--key`/`--value-prefix` on a `share_threshold` wildcard every bucket counts
//!   on one counter (a report's cost against its group's size); with `--id-bytes` each id is
//!   as large as the server allows (memory per bucket); with `--no-read` the client never
//!   reads a response, so its flow-control window stays shut (a stream that stops reading).
//! - [`quota_probe`]: what a real Envoy does: one long-lived stream reporting a bucket every
//!   second, and a new stream every two seconds; it reports the seconds in which the
//!   long-lived stream held an assignment that had not expired, and how long a new stream's
//!   first assignment took.
//!
//! Both speak raw HTTP/2 (to choose what is read and when) and report what happened to them;
//! neither decides anything about the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as ActionKind;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf;
use prost::Message;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::abuse::{connect_h2, send_all};

/// The RLQS method.
pub const STREAM_RATE_LIMIT_QUOTAS: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
/// One entry of an id is at most this long (the server's bound is 4 KiB a key or value).
const PAD_ENTRY: usize = 4_000;

/// A flood of RLQS buckets; also `rls-abuse rlqs-flood`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaFlood {
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub target: SocketAddr,
    /// Streams, each on its own connection.
    #[arg(long, default_value_t = 2)]
    pub streams: usize,
    /// Buckets each stream reports.
    #[arg(long, default_value_t = 20_000)]
    pub buckets: usize,
    /// Usages in one report (a report is cut sooner at --max-report-bytes).
    #[arg(long, default_value_t = 5_000)]
    pub usages_per_report: usize,
    /// Reports each stream sends after the ones that name its buckets first.
    #[arg(long, default_value_t = 10)]
    pub reports: usize,
    #[arg(long, default_value = "example")]
    pub domain: String,
    /// Each bucket's entry: `key` = `value-prefix` + its number.
    #[arg(long, default_value = "path")]
    pub key: String,
    #[arg(long, default_value = "/api/")]
    pub value_prefix: String,
    /// Pad each id with more entries to about this many bytes (0: no padding).
    #[arg(long, default_value_t = 0)]
    pub id_bytes: usize,
    /// A report is at most this long (the server refuses one over --max-request-bytes).
    #[arg(long, default_value_t = 200_000)]
    pub max_report_bytes: usize,
    /// Never read a response: the stream's flow-control window stays shut.
    #[arg(long)]
    pub no_read: bool,
    /// How long the streams stay open after their reports.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// What a flood managed; counts over the whole run.
#[derive(Debug, Default, Serialize)]
pub struct QuotaFloodReport {
    pub streams_opened: u64,
    pub reports_sent: u64,
    pub bytes_sent: u64,
    pub response_bytes: u64,
    /// Streams the server ended, by the `grpc-status` it ended them with.
    pub ended_by_server: Vec<(i32, u64)>,
    /// Streams that failed on the client's side (refused, reset, connection lost).
    pub failed: u64,
}

#[derive(Default)]
struct FloodCounters {
    streams_opened: AtomicU64,
    reports_sent: AtomicU64,
    bytes_sent: AtomicU64,
    response_bytes: AtomicU64,
    failed: AtomicU64,
}

/// Runs the flood: every stream reports, then holds until `duration` has passed.
pub async fn quota_flood(config: QuotaFlood) -> QuotaFloodReport {
    let counters = Arc::new(FloodCounters::default());
    let deadline = Instant::now() + config.duration;
    let config = Arc::new(config);
    let mut streams = JoinSet::new();
    for stream in 0..config.streams {
        streams.spawn(flood_stream(
            Arc::clone(&config),
            Arc::clone(&counters),
            stream,
            deadline,
        ));
    }
    let mut ended: Vec<(i32, u64)> = Vec::new();
    while let Some(done) = streams.join_next().await {
        if let Ok(Some(code)) = done {
            match ended.iter_mut().find(|(c, _)| *c == code) {
                Some((_, n)) => *n += 1,
                None => ended.push((code, 1)),
            }
        }
    }
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    QuotaFloodReport {
        streams_opened: load(&counters.streams_opened),
        reports_sent: load(&counters.reports_sent),
        bytes_sent: load(&counters.bytes_sent),
        response_bytes: load(&counters.response_bytes),
        ended_by_server: ended,
        failed: load(&counters.failed),
    }
}

/// The id of bucket `n` of stream `stream`.
fn flood_id(config: &QuotaFlood, stream: usize, n: usize) -> BucketId {
    let mut bucket = std::collections::HashMap::new();
    let value = format!("{}{n}", config.value_prefix);
    let mut size = config.key.len() + value.len();
    bucket.insert(config.key.clone(), value);
    let mut pad = 0;
    while size + 8 < config.id_bytes {
        let key = format!("pad{pad}");
        let len = PAD_ENTRY.min(config.id_bytes - size - key.len());
        let value = format!("{stream}-{n}-{}", "x".repeat(len));
        size += key.len() + value.len();
        bucket.insert(key, value);
        pad += 1;
    }
    BucketId { bucket }
}

fn usage(id: BucketId, elapsed_s: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id),
        time_elapsed: Some(protobuf::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    }
}

/// A report, framed as gRPC sends it.
pub fn framed_report(report: &RateLimitQuotaUsageReports) -> Bytes {
    let len = report.encoded_len();
    let mut framed = BytesMut::with_capacity(5 + len);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    let _ = report.encode(&mut framed);
    framed.freeze()
}

/// One stream of the flood; the `grpc-status` the server ended it with, if it did.
async fn flood_stream(
    config: Arc<QuotaFlood>,
    counters: Arc<FloodCounters>,
    stream: usize,
    deadline: Instant,
) -> Option<i32> {
    let Some((response, mut send)) = open(config.target).await else {
        counters.failed.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    counters.streams_opened.fetch_add(1, Ordering::Relaxed);
    let reader_counters = Arc::clone(&counters);
    let read = !config.no_read;
    // Reads (or, with --no-read, only waits for the head and never reads the body).
    let reader =
        tokio::spawn(async move { read_responses(response, read, &reader_counters).await });
    // First every bucket, then `reports` more reports naming `usages_per_report` buckets
    // each, as many reports as the byte cap needs.
    let first: Vec<usize> = (0..config.buckets).collect();
    let mut plan: Vec<(usize, i64)> = first.into_iter().map(|n| (n, 0)).collect();
    for round in 0..config.reports {
        let start = round * config.usages_per_report;
        plan.extend(
            (start..start + config.usages_per_report).map(|n| (n % config.buckets.max(1), 1)),
        );
    }
    let mut report = RateLimitQuotaUsageReports {
        domain: config.domain.clone(),
        bucket_quota_usages: Vec::new(),
    };
    // Sending ends at the deadline too: a server that stops reading a stream (its responses
    // unread, with --no-read) leaves the send window shut.
    let sending = async {
        // The report's length so far: each usage, its tag and its length's varint.
        let mut report_bytes = 0;
        for (n, elapsed) in plan {
            let usage = usage(flood_id(&config, stream, n), elapsed);
            report_bytes += usage.encoded_len() + 4;
            report.bucket_quota_usages.push(usage);
            let full = report.bucket_quota_usages.len() >= config.usages_per_report
                || report_bytes >= config.max_report_bytes;
            if full {
                report_bytes = 0;
                send_report(&mut send, &mut report, &counters).await?;
            }
        }
        if !report.bucket_quota_usages.is_empty() {
            send_report(&mut send, &mut report, &counters).await?;
        }
        Ok::<(), ()>(())
    };
    let _ = tokio::time::timeout_at(deadline.into(), sending).await;
    let mut reader = reader;
    let code = match tokio::time::timeout_at(deadline.into(), &mut reader).await {
        Ok(Ok(code)) => code,
        _ => None,
    };
    // The stream (and its connection) closes with its reader.
    reader.abort();
    code
}

async fn send_report(
    send: &mut h2::SendStream<Bytes>,
    report: &mut RateLimitQuotaUsageReports,
    counters: &FloodCounters,
) -> Result<(), ()> {
    let framed = framed_report(report);
    report.bucket_quota_usages.clear();
    send_all(send, framed, &counters.bytes_sent).await?;
    counters.reports_sent.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Opens an RLQS stream on a connection of its own.
async fn open(target: SocketAddr) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let client = connect_h2(target).await.ok()?;
    let mut client = client.ready().await.ok()?;
    let request = http::Request::post(format!("http://{target}{STREAM_RATE_LIMIT_QUOTAS}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .ok()?;
    client.send_request(request, false).ok()
}

/// Reads the responses (counting their bytes) until the stream ends; the `grpc-status` it
/// ended with. With `read` false the body is never read: only a trailers-only answer (a
/// refusal) is seen.
async fn read_responses(
    response: h2::client::ResponseFuture,
    read: bool,
    counters: &FloodCounters,
) -> Option<i32> {
    let response = response.await.ok()?;
    if let Some(code) = grpc_status(response.headers()) {
        return Some(code);
    }
    if !read {
        std::future::pending::<()>().await;
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        counters
            .response_bytes
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    let trailers = body.trailers().await.ok()??;
    grpc_status(&trailers)
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// A well-behaved RLQS client; also `rls-abuse rlqs-probe`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaProbe {
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub target: SocketAddr,
    #[arg(long, default_value = "example")]
    pub domain: String,
    /// The probe's bucket: `key` = `value`.
    #[arg(long, default_value = "path")]
    pub key: String,
    #[arg(long, default_value = "/probe")]
    pub value: String,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// What the probe got.
#[derive(Debug, Default, Serialize)]
pub struct QuotaProbeReport {
    /// Seconds the long-lived stream was open, and those in which it held an assignment that
    /// had not expired: what Envoy needs to keep applying the server's quota.
    pub long_lived_seconds: u64,
    pub long_lived_covered: u64,
    /// Short streams opened, and those whose first report got an assignment within 2 s.
    pub short_streams: u64,
    pub short_answered: u64,
    /// The slowest first assignment of a short stream, ms.
    pub first_assignment_max_ms: Option<f64>,
    /// Streams that ended with an error status or failed to open.
    pub errors: u64,
}

const PROBE_WAIT: Duration = Duration::from_secs(2);

/// One stream of the probe: its sending half, and a reader that publishes when the
/// latest assignment it received expires.
struct ProbeStream {
    send: h2::SendStream<Bytes>,
    expires: tokio::sync::watch::Receiver<Option<Instant>>,
    reader: tokio::task::JoinHandle<()>,
}

impl ProbeStream {
    async fn open(target: SocketAddr) -> Option<Self> {
        let (response, send) = open(target).await?;
        let response = tokio::time::timeout(PROBE_WAIT, response)
            .await
            .ok()?
            .ok()?;
        if grpc_status(response.headers()).is_some() {
            return None;
        }
        let (publish, expires) = tokio::sync::watch::channel(None);
        let reader = tokio::spawn(read_assignments(response.into_body(), publish));
        Some(Self {
            send,
            expires,
            reader,
        })
    }

    /// Reports one request for the probe's bucket.
    async fn report(&mut self, probe: &QuotaProbe, elapsed_s: i64) -> Result<(), ()> {
        let id = BucketId {
            bucket: [(probe.key.clone(), probe.value.clone())].into(),
        };
        let report = RateLimitQuotaUsageReports {
            domain: probe.domain.clone(),
            bucket_quota_usages: vec![usage(id, elapsed_s)],
        };
        let sent = AtomicU64::new(0);
        send_all(&mut self.send, framed_report(&report), &sent).await
    }

    /// Whether the stream holds an assignment that has not expired.
    fn covered(&self) -> bool {
        self.expires
            .borrow()
            .is_some_and(|expires| expires > Instant::now())
    }

    fn ended(&self) -> bool {
        self.reader.is_finished()
    }

    /// Waits up to [`PROBE_WAIT`] for the first assignment.
    async fn first_assignment(&mut self) -> bool {
        let first = self.expires.wait_for(Option::is_some);
        matches!(tokio::time::timeout(PROBE_WAIT, first).await, Ok(Ok(_)))
    }
}

impl Drop for ProbeStream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Decodes responses until the stream ends, publishing when each assignment expires.
async fn read_assignments(
    mut body: h2::RecvStream,
    publish: tokio::sync::watch::Sender<Option<Instant>>,
) {
    let mut buffered = BytesMut::new();
    loop {
        if let Some([_, a, b, c, d]) = buffered.get(..5) {
            let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            if buffered.len() >= 5 + len {
                let message = buffered.split_to(5 + len).split_off(5);
                let Ok(response) = RateLimitQuotaResponse::decode(message) else {
                    return;
                };
                let received = Instant::now();
                for action in &response.bucket_action {
                    if let Some(ttl) = assignment_ttl(action) {
                        publish.send_replace(Some(received + ttl));
                    }
                }
                continue;
            }
        }
        let Some(Ok(chunk)) = body.data().await else {
            return;
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        buffered.extend_from_slice(&chunk);
    }
}

/// How long an action's quota assignment holds (`None`: the action is not an assignment).
fn assignment_ttl(action: &BucketAction) -> Option<Duration> {
    let Some(ActionKind::QuotaAssignmentAction(assignment)) = &action.bucket_action else {
        return None;
    };
    let ttl = assignment.assignment_time_to_live.as_ref()?;
    let seconds = u64::try_from(ttl.seconds).ok()?;
    let nanos = u32::try_from(ttl.nanos).ok()?;
    Some(Duration::new(seconds, 0) + Duration::from_nanos(u64::from(nanos)))
}

/// A short stream: opened, one report, its first assignment awaited; the ms it took.
async fn short_stream(target: SocketAddr, probe: Arc<QuotaProbe>) -> Result<Option<f64>, ()> {
    let started = Instant::now();
    let mut stream = ProbeStream::open(target).await.ok_or(())?;
    stream.report(&probe, 0).await?;
    Ok(stream
        .first_assignment()
        .await
        .then(|| started.elapsed().as_secs_f64() * 1_000.0))
}

/// Runs the probe for `duration`: the long-lived stream reports every second and is sampled
/// each second; a short stream opens every two seconds beside it.
pub async fn quota_probe(probe: QuotaProbe) -> QuotaProbeReport {
    let probe = Arc::new(probe);
    let deadline = Instant::now() + probe.duration;
    let mut report = QuotaProbeReport::default();
    let mut shorts = JoinSet::new();
    let mut long_lived = ProbeStream::open(probe.target).await;
    let mut first = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut second = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        if second.is_multiple_of(2) {
            shorts.spawn(short_stream(probe.target, Arc::clone(&probe)));
        }
        second += 1;
        report.long_lived_seconds += 1;
        let healthy = match &mut long_lived {
            Some(stream) if !stream.ended() => {
                if stream.covered() {
                    report.long_lived_covered += 1;
                }
                stream
                    .report(&probe, if first { 0 } else { 1 })
                    .await
                    .is_ok()
            }
            _ => false,
        };
        first = false;
        if !healthy {
            report.errors += 1;
            long_lived = ProbeStream::open(probe.target).await;
            first = true;
        }
    }
    while let Some(done) = shorts.join_next().await {
        report.short_streams += 1;
        match done {
            Ok(Ok(Some(ms))) => {
                report.short_answered += 1;
                let max = report.first_assignment_max_ms.get_or_insert(ms);
                *max = max.max(ms);
            }
            Ok(Ok(None)) => {}
            _ => report.errors += 1,
        }
    }
    report
}
