//! `gcounter-loadtest`: closed- or open-loop gRPC load against any RateLimitService v3
//! server, printing one JSON line (requests/s, latency percentiles, OK / OVER_LIMIT / errors).
//! Also the hostile client of `rls-abuse` and the tests (`abuse`); `rls-noop` is the no-op
//! server every benchmark is a ratio to.
//!
//! It talks the public protocol only; it knows nothing of gcounter-rls's internals, so it
//! measures Envoy's ratelimit, Limitador or a no-op server the same way. Every answer is
//! checked: gRPC errors are counted apart, never as successes (HTTP load tools such as h2load
//! see a gRPC error as a 200).
//!
//! Open loop (`--rate`) sends on a fixed schedule whatever the server does, and measures each
//! latency from the moment the request was dispatched, before it waits for one of the
//! `--concurrency` slots: a stalled server shows up as latency instead of silently slowing the
//! client down (coordinated omission). Not from the scheduled instant itself: tokio's timer
//! ticks by the millisecond, so requests due between two ticks leave together at the next,
//! and measuring from their due time would add up to a millisecond of the client's own.

pub mod abuse;
pub mod quota;
pub mod quota_abuse;
mod report;
mod template;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use prost::Message;
use tokio::sync::Semaphore;
use tonic::transport::{Channel, Endpoint};

use report::Percentiles;
pub use report::Report;
pub use template::{DescriptorTemplate, RequestTemplate};

#[derive(Debug, Clone, clap::Args)]
pub struct LoadtestArgs {
    /// host:port of the RateLimitService (plaintext HTTP/2).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub target: String,
    #[arg(long, default_value = "example")]
    pub domain: String,
    /// A descriptor, `key=value[,key=value...]`; `{key}` in a value is replaced by a random key
    /// from --key-space. Repeat for several descriptors per request.
    #[arg(long = "descriptor", default_value = "remote_address={key}")]
    pub descriptors: Vec<DescriptorTemplate>,
    /// Distinct keys drawn uniformly (1 = one hot key).
    #[arg(long, default_value_t = 1)]
    pub key_space: u64,
    /// Each key of --key-space once, in order (0, 1, 2, ...), then stop: fills a server with
    /// --key-space distinct counters before a measurement. The run ends when every key was
    /// sent or at --duration, whichever comes first.
    #[arg(long)]
    pub sequential: bool,
    /// The request's hits_addend (0 means 1, as in Envoy).
    #[arg(long, default_value_t = 1)]
    pub hits_addend: u32,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests in flight per connection (closed loop: workers; open loop: the cap).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Open loop at this many requests/s in total; without it, closed loop.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Measured time, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Time before measuring (connections warm, cells cold-read), e.g. `2s`.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Write one gRPC-framed request (key 0) to this file and exit: the body for
    /// `h2load -d FILE -H 'content-type: application/grpc' -H 'te: trailers'`.
    #[arg(long)]
    pub write_grpc_body: Option<PathBuf>,
    /// List when each OK answer's request was sent and answered (ms since the Unix epoch,
    /// the first 10,000): an oracle can then place every admission in time.
    #[arg(long)]
    pub ok_spans: bool,
}

impl LoadtestArgs {
    fn template(&self) -> RequestTemplate {
        RequestTemplate {
            domain: self.domain.clone(),
            descriptors: self.descriptors.clone(),
            hits_addend: self.hits_addend,
            key_space: self.key_space.max(1),
        }
    }
}

/// The most error times a report lists: enough to place every error of a short run against
/// a fault (the chaos run's kills), bounded for a long one.
const MAX_ERROR_TIMES: usize = 10_000;

/// Answers counted during the measured interval.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    over_limit: AtomicU64,
    errors: AtomicU64,
    /// When each error answered, in milliseconds since the Unix epoch (the first
    /// `MAX_ERROR_TIMES`): a caller that killed the server can tell the errors before the kill
    /// from the requests the kill severed.
    error_times_ms: Mutex<Vec<u64>>,
    /// With --ok-spans: `[sent, answered]` of each OK answer (ms since the Unix epoch, the
    /// first `MAX_ERROR_TIMES`).
    ok_spans_ms: Option<Mutex<Vec<[u64; 2]>>>,
}

/// Now, in microseconds since the Unix epoch.
fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

impl Tally {
    /// Counts an answer that came `waited` after its request was sent.
    fn record(
        &self,
        answer: &Result<
            tonic::Response<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse>,
            tonic::Status,
        >,
        waited: Duration,
    ) {
        match answer {
            Ok(response) if response.get_ref().overall_code == Code::OverLimit as i32 => {
                self.over_limit.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                if let Some(spans) = &self.ok_spans_ms {
                    // The send rounded down, the answer up: the admission lies within.
                    let answered_us = wall_clock_us();
                    let sent_ms = answered_us.saturating_sub(micros(waited)) / 1_000;
                    let answered_ms = answered_us.div_ceil(1_000);
                    if let Ok(mut spans) = spans.lock()
                        && spans.len() < MAX_ERROR_TIMES
                    {
                        spans.push([sent_ms, answered_ms]);
                    }
                }
            }
            Err(status) => {
                // A handful is enough to see what went wrong; the count says how often.
                if self.errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    tracing::warn!(%status, "gRPC error");
                }
                let now_ms = wall_clock_us() / 1_000;
                if let Ok(mut times) = self.error_times_ms.lock()
                    && times.len() < MAX_ERROR_TIMES
                {
                    times.push(now_ms);
                }
            }
        }
    }
}

/// Where each request's key comes from: drawn at random per worker, or the next one of a
/// count every worker shares (`--sequential`), which runs out after the key space.
enum Keys {
    Random(fastrand::Rng),
    Sequential {
        next: Arc<AtomicU64>,
        key_space: u64,
    },
}

impl Keys {
    fn new(sequential: Option<&Arc<AtomicU64>>, key_space: u64, seed: u64) -> Self {
        match sequential {
            Some(next) => Self::Sequential {
                next: Arc::clone(next),
                key_space,
            },
            None => Self::Random(fastrand::Rng::with_seed(seed)),
        }
    }

    /// `None` once a sequential run has sent every key.
    fn next(&mut self, template: &RequestTemplate) -> Option<RateLimitRequest> {
        match self {
            Self::Random(rng) => Some(template.build(rng)),
            Self::Sequential { next, key_space } => {
                let key = next.fetch_add(1, Ordering::Relaxed);
                (key < *key_space).then(|| template.build_with_key(key))
            }
        }
    }
}

/// When measuring starts and stops.
#[derive(Clone, Copy)]
struct Schedule {
    measure_from: Instant,
    until: Instant,
}

/// Run the load and return the report (or, with --write-grpc-body, write it and return None).
pub async fn run(args: LoadtestArgs) -> anyhow::Result<Option<Report>> {
    let template = args.template();
    if let Some(path) = &args.write_grpc_body {
        std::fs::write(path, grpc_frame(&template.build_with_key(0)))
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(None);
    }
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.rate != Some(0), "--rate must be at least 1 request/s");

    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        // One Endpoint::connect per channel = one HTTP/2 connection each.
        let channel = Endpoint::from_shared(format!("http://{}", args.target))
            .context("invalid --target")?
            .connect()
            .await
            .with_context(|| format!("cannot connect to {}", args.target))?;
        channels.push(channel);
    }

    let tally = Arc::new(Tally {
        ok_spans_ms: args.ok_spans.then(Mutex::default),
        ..Tally::default()
    });
    let start = Instant::now();
    let schedule = Schedule {
        measure_from: start + args.warmup,
        until: start + args.warmup + args.duration,
    };
    let key_space = template.key_space;
    let template = Arc::new(template);
    let sequential = args.sequential.then(|| Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for (c, channel) in channels.into_iter().enumerate() {
        match args.rate {
            None => {
                for w in 0..args.concurrency {
                    let seed = (c * args.concurrency + w) as u64;
                    tasks.push(tokio::spawn(closed_loop_worker(
                        RateLimitServiceClient::new(channel.clone()),
                        Arc::clone(&template),
                        Keys::new(sequential.as_ref(), key_space, seed),
                        schedule,
                        Arc::clone(&tally),
                    )));
                }
            }
            Some(rate) => {
                // Each connection carries its share of the rate.
                let interval = Duration::from_secs_f64(args.connections as f64 / rate as f64);
                tasks.push(tokio::spawn(open_loop_connection(
                    RateLimitServiceClient::new(channel),
                    Arc::clone(&template),
                    Keys::new(sequential.as_ref(), key_space, c as u64),
                    interval,
                    args.concurrency,
                    schedule,
                    Arc::clone(&tally),
                )));
            }
        }
    }
    let mut latencies = new_histogram();
    for task in tasks {
        latencies
            .add(task.await.context("load worker panicked")?)
            .context("merge latency histograms")?;
    }
    let p = Percentiles::of(&latencies);
    let ok = tally.ok.load(Ordering::Relaxed);
    let over_limit = tally.over_limit.load(Ordering::Relaxed);
    // A sequential run may end before --duration: its rate is over the time it took.
    let seconds = if args.sequential {
        Instant::now()
            .saturating_duration_since(schedule.measure_from)
            .min(args.duration)
            .as_secs_f64()
    } else {
        args.duration.as_secs_f64()
    };
    Ok(Some(Report {
        target: args.target.clone(),
        mode: if args.rate.is_some() {
            "open"
        } else {
            "closed"
        },
        connections: args.connections,
        concurrency: args.concurrency,
        rate: args.rate,
        key_space: args.key_space.max(1),
        duration_s: seconds,
        requests_per_s: (ok + over_limit) as f64 / seconds,
        p50_us: p.p50,
        p90_us: p.p90,
        p99_us: p.p99,
        p99_9_us: p.p99_9,
        max_us: p.max,
        ok,
        over_limit,
        errors: tally.errors.load(Ordering::Relaxed),
        error_times_ms: tally
            .error_times_ms
            .lock()
            .map(|times| times.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone()),
        ok_spans_ms: tally.ok_spans_ms.as_ref().map(|spans| {
            spans
                .lock()
                .map(|spans| spans.clone())
                .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
        }),
    }))
}

/// Microseconds, 3 significant digits.
#[expect(
    clippy::expect_used,
    reason = "a constant precision within hdrhistogram's 0..=5 cannot fail"
)]
fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

async fn closed_loop_worker(
    mut client: RateLimitServiceClient<Channel>,
    template: Arc<RequestTemplate>,
    mut keys: Keys,
    schedule: Schedule,
    tally: Arc<Tally>,
) -> Histogram<u64> {
    let mut latencies = new_histogram();
    loop {
        let Some(request) = keys.next(&template) else {
            return latencies;
        };
        let started = Instant::now();
        if started >= schedule.until {
            return latencies;
        }
        let answer = client.should_rate_limit(request).await;
        if started >= schedule.measure_from {
            let waited = started.elapsed();
            let _ = latencies.record(micros(waited));
            tally.record(&answer, waited);
        }
    }
}

async fn open_loop_connection(
    client: RateLimitServiceClient<Channel>,
    template: Arc<RequestTemplate>,
    mut keys: Keys,
    interval: Duration,
    max_in_flight: usize,
    schedule: Schedule,
    tally: Arc<Tally>,
) -> Histogram<u64> {
    // A std mutex: held for one record, never across an await.
    let latencies = Arc::new(Mutex::new(new_histogram()));
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    let mut ticks = tokio::time::interval(interval);
    // Late ticks fire at once, so the schedule (and so the offered rate) is kept.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut requests = Vec::new();
    loop {
        let scheduled = ticks.tick().await.into_std();
        if scheduled >= schedule.until {
            break;
        }
        let dispatched = Instant::now();
        let Some(request) = keys.next(&template) else {
            break;
        };
        let mut client = client.clone();
        let in_flight = Arc::clone(&in_flight);
        let latencies = Arc::clone(&latencies);
        let tally = Arc::clone(&tally);
        requests.push(tokio::spawn(async move {
            // Waiting for a slot counts as latency: the request was due.
            let Ok(_permit) = in_flight.acquire().await else {
                return;
            };
            let answer = client.should_rate_limit(request).await;
            if scheduled >= schedule.measure_from {
                let waited = dispatched.elapsed();
                if let Ok(mut histogram) = latencies.lock() {
                    let _ = histogram.record(micros(waited));
                }
                tally.record(&answer, waited);
            }
        }));
        // Keep the list of handles short: drop the finished ones now and then.
        if requests.len() >= 4_096 {
            requests.retain(|r: &tokio::task::JoinHandle<()>| !r.is_finished());
        }
    }
    for request in requests {
        let _ = request.await;
    }
    latencies
        .lock()
        .map(|h| h.clone())
        .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
}

/// A gRPC message frame: uncompressed flag, big-endian length, the protobuf bytes.
pub fn grpc_frame(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut frame = Vec::with_capacity(body.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

#[cfg(test)]
mod tests;
