//! RLQS clients for the tests and `scripts/abuse.py`: a hostile one and a well-behaved one.
//!
//! - [`quota_flood`]: streams that each report many buckets, then reports naming many of them
//!   at once: with `--key`/`--value-prefix` on a `share_threshold` wildcard every bucket counts
//!   on one counter (a report's cost against its group's size); with `--id-bytes` each id is
//!   as large as the server allows (memory per bucket); with `--no-read` the client never
//!   reads a response, so its flow-control window stays shut (a stream that stops reading).
//! - [`quota_probe`]: what a real Envoy does: one long-lived stream reporting a bucket every
//!   second, and a new stream every two seconds; it reports how many assignments came back
//!   and how long the first took.
//!
//! Both speak raw HTTP/2 (to choose what is read and when) and report what happened to them;
//! neither decides anything about the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
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
    let mut sending = Ok(());
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
            sending = send_report(&mut send, &mut report, &counters).await;
            if sending.is_err() {
                break;
            }
        }
    }
    if sending.is_ok() && !report.bucket_quota_usages.is_empty() {
        let _ = send_report(&mut send, &mut report, &counters).await;
    }
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
    /// Seconds of the long-lived stream's reports that got an assignment back within 2 s.
    pub long_lived_reports: u64,
    pub long_lived_answered: u64,
    /// Short streams opened, and those whose first report got an assignment within 2 s.
    pub short_streams: u64,
    pub short_answered: u64,
    /// The slowest first assignment of a short stream, ms.
    pub first_assignment_max_ms: Option<f64>,
    /// Streams that ended with an error status or failed to open.
    pub errors: u64,
}

const PROBE_WAIT: Duration = Duration::from_secs(2);

/// One stream of the probe: it sends a report when asked and says whether an assignment
/// came back within [`PROBE_WAIT`].
struct ProbeStream {
    send: h2::SendStream<Bytes>,
    body: h2::RecvStream,
    buffered: BytesMut,
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
        Some(Self {
            send,
            body: response.into_body(),
            buffered: BytesMut::new(),
        })
    }

    /// Reports one request for the bucket; true if an action came back within the wait.
    async fn report(&mut self, probe: &QuotaProbe, elapsed_s: i64) -> Result<bool, ()> {
        let id = BucketId {
            bucket: [(probe.key.clone(), probe.value.clone())].into(),
        };
        let report = RateLimitQuotaUsageReports {
            domain: probe.domain.clone(),
            bucket_quota_usages: vec![usage(id, elapsed_s)],
        };
        let sent = AtomicU64::new(0);
        send_all(&mut self.send, framed_report(&report), &sent).await?;
        let answered = tokio::time::timeout(PROBE_WAIT, self.next_response()).await;
        match answered {
            Ok(Some(response)) => Ok(!response.bucket_action.is_empty()),
            Ok(None) => Err(()),
            Err(_) => Ok(false),
        }
    }

    async fn next_response(&mut self) -> Option<RateLimitQuotaResponse> {
        loop {
            if let Some([_, a, b, c, d]) = self.buffered.get(..5) {
                let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
                if self.buffered.len() >= 5 + len {
                    let message = self.buffered.split_to(5 + len).split_off(5);
                    return RateLimitQuotaResponse::decode(message).ok();
                }
            }
            let chunk = self.body.data().await?.ok()?;
            let _ = self.body.flow_control().release_capacity(chunk.len());
            self.buffered.extend_from_slice(&chunk);
        }
    }
}

/// Runs the probe for `duration`.
pub async fn quota_probe(probe: QuotaProbe) -> QuotaProbeReport {
    let deadline = Instant::now() + probe.duration;
    let mut report = QuotaProbeReport::default();
    let mut long_lived = ProbeStream::open(probe.target).await;
    if long_lived.is_none() {
        report.errors += 1;
    }
    let mut next_short = Instant::now();
    let mut first = true;
    while Instant::now() < deadline {
        if let Some(stream) = &mut long_lived {
            report.long_lived_reports += 1;
            match stream.report(&probe, if first { 0 } else { 1 }).await {
                Ok(true) => report.long_lived_answered += 1,
                Ok(false) => {}
                Err(()) => {
                    report.errors += 1;
                    long_lived = ProbeStream::open(probe.target).await;
                }
            }
            first = false;
        }
        if Instant::now() >= next_short {
            next_short += Duration::from_secs(2);
            report.short_streams += 1;
            let started = Instant::now();
            match ProbeStream::open(probe.target).await {
                Some(mut stream) => match stream.report(&probe, 0).await {
                    Ok(true) => {
                        report.short_answered += 1;
                        let ms = started.elapsed().as_secs_f64() * 1_000.0;
                        let max = report.first_assignment_max_ms.get_or_insert(ms);
                        *max = max.max(ms);
                    }
                    Ok(false) => {}
                    Err(()) => report.errors += 1,
                },
                None => report.errors += 1,
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    report
}
