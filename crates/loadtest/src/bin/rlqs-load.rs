//! `rlqs-load`: Envoys' RLQS reporting, simulated, against any `RateLimitQuotaService`.
//!
//! `--streams` streams (one per Envoy) each report the same `--buckets` buckets
//! (`{<key>: k0}` to `{<key>: k<n-1>}`) every `--interval`, each bucket with
//! `--requests-per-report` allowed requests, as Envoy's `rate_limit_quota` filter does: all
//! of a stream's buckets in one message. Prints one JSON line: reports and usages sent, bucket
//! actions received by kind, and how long each stream's first report waited for its last
//! bucket's first assignment. A stream that ends is opened again at the next report, as
//! Envoy's filter does; every error is counted.
//!
//! With `--rate`, each bucket is offered that many requests a second and admits them on its
//! assignments as the filter would (`--unassigned` before the first, the token bucket, then
//! `--expired` past the time to live); the reports carry what was allowed and denied, and
//! `--trace` prints a line per report (with the time of each admission) and per stream ended.
//!
//! ```sh
//! rlqs-load --target 127.0.0.1:8081 --domain quota --key api_key --streams 10 --buckets 10000
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf;
use gcounter_loadtest::quota::{Fallback, Quota};
use tokio::sync::mpsc;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Envoys' RLQS reports against any RateLimitQuotaService; prints one JSON line"
)]
struct Cli {
    /// The server, host:port (plaintext gRPC)
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    /// The reports' domain
    #[arg(long, default_value = "quota")]
    domain: String,
    /// The bucket id's one key
    #[arg(long, default_value = "api_key")]
    key: String,
    /// The buckets' values: this prefix and the bucket's number (`k0`, `k1`, ...)
    #[arg(long, default_value = "k")]
    value_prefix: String,
    /// Streams, one per simulated Envoy
    #[arg(long, default_value_t = 10)]
    streams: usize,
    /// Buckets each stream reports (the same ones on every stream)
    #[arg(long, default_value_t = 1_000)]
    buckets: usize,
    /// Allowed requests each bucket reports each time
    #[arg(long, default_value_t = 1)]
    requests_per_report: u64,
    /// Time between a stream's reports
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// How long to report
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Requests a second each stream offers each bucket: each is admitted on the bucket's
    /// assignment as Envoy would (all before the first one), and the reports say what was
    /// allowed and denied (instead of --requests-per-report)
    #[arg(long)]
    rate: Option<f64>,
    /// With --rate: what a bucket does once its assignment's time to live has passed (the
    /// filter's expired_assignment_behavior)
    #[arg(long, value_enum, default_value = "deny-all")]
    expired: Fallback,
    /// With --rate: what a bucket does before its first assignment (the filter's
    /// no_assignment_behavior)
    #[arg(long, value_enum, default_value = "allow-all")]
    unassigned: Fallback,
    /// One JSON line per stream ended or not opened (`error`, `closed`) and, with --rate, per
    /// report sent (`allowed`, `denied`, and `admitted_ms`: when each allowed request was
    /// admitted, in milliseconds since the Unix epoch), each with its time `t` in seconds since
    /// the start
    #[arg(long)]
    trace: bool,
}

#[derive(Debug, Default)]
struct StreamResult {
    reports: u64,
    usages: u64,
    allowed: u64,
    denied: u64,
    actions: HashMap<&'static str, u64>,
    /// From the first report to the first action of its last bucket.
    first_assignment: Option<Duration>,
    errors: Vec<String>,
    /// Streams the server ended with OK (a shutdown): the client reconnected.
    closed: u64,
}

fn usage(cli: &Cli, i: usize, allowed: u64, denied: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: HashMap::from([(cli.key.clone(), format!("{}{i}", cli.value_prefix))]),
        }),
        time_elapsed: Some(protobuf::Duration {
            seconds: i64::try_from(cli.interval.as_secs()).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// Each bucket's admission, with `--rate`: what it allowed and denied since its last report.
struct Follower {
    rate: f64,
    quotas: Vec<Quota>,
    pending: Vec<(u64, u64)>,
    /// With `--trace`: when each request allowed since the last report was admitted.
    admitted_at: Option<Vec<Instant>>,
    /// Arrivals so far (each bucket's k-th request arrives k ÷ rate after the start).
    arrived: u64,
}

impl Follower {
    /// Decides every request that arrived by `now`, each at its own arrival time.
    fn catch_up(&mut self, started: Instant, now: Instant) {
        let due = (now.saturating_duration_since(started).as_secs_f64() * self.rate) as u64;
        while self.arrived < due {
            let at = started + Duration::from_secs_f64(self.arrived as f64 / self.rate);
            for (quota, pending) in self.quotas.iter_mut().zip(&mut self.pending) {
                if quota.admit(at) {
                    pending.0 += 1;
                    if let Some(admitted) = self.admitted_at.as_mut() {
                        admitted.push(at);
                    }
                } else {
                    pending.1 += 1;
                }
            }
            self.arrived += 1;
        }
    }
}

fn report(cli: &Cli) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: cli.domain.clone(),
        bucket_quota_usages: (0..cli.buckets)
            .map(|i| usage(cli, i, cli.requests_per_report, 0))
            .collect(),
    }
}

type Inbound = tonic::Streaming<RateLimitQuotaResponse>;

/// Opens a stream; a server that does not answer within the interval counts as down.
async fn open(cli: &Cli) -> Result<(mpsc::Sender<RateLimitQuotaUsageReports>, Inbound), String> {
    let attempt = async {
        let endpoint = format!("http://{}", cli.target);
        let client = RateLimitQuotaServiceClient::connect(endpoint)
            .await
            .map_err(|error| format!("connect: {error}"))?;
        let mut client = client.max_encoding_message_size(64 << 20);
        let (sender, outbound) = mpsc::channel(4);
        let reports = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(outbound);
        let inbound = client
            .stream_rate_limit_quotas(reports)
            .await
            .map_err(|status| format!("open: {:?}: {}", status.code(), status.message()))?;
        Ok((sender, inbound.into_inner()))
    };
    tokio::time::timeout(cli.interval.max(Duration::from_secs(1)), attempt)
        .await
        .unwrap_or_else(|_| Err("connect: no answer".to_owned()))
}

/// One simulated Envoy: reports every interval, on a stream it opens again whenever the last
/// one ended, as Envoy's filter does; with `--rate`, admits on its assignments meanwhile.
async fn run_stream(cli: &Cli, index: usize) -> StreamResult {
    let mut result = StreamResult::default();
    let fixed = report(cli);
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let end = started + cli.duration;
    let mut follower = cli.rate.map(|rate| Follower {
        rate,
        quotas: (0..cli.buckets)
            .map(|_| Quota::new(cli.unassigned, cli.expired))
            .collect(),
        pending: vec![(0, 0); cli.buckets],
        admitted_at: cli.trace.then(Vec::new),
        arrived: 0,
    });
    let mut assigned = vec![false; cli.buckets];
    let mut unassigned = cli.buckets;
    let mut stream: Option<(mpsc::Sender<RateLimitQuotaUsageReports>, Inbound)> = None;
    let mut tick = tokio::time::interval(cli.interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if Instant::now() >= end {
                    break;
                }
                if stream.is_none() {
                    match open(cli).await {
                        Ok(opened) => stream = Some(opened),
                        Err(error) => {
                            event(cli, index, started, "error", &error);
                            result.errors.push(error);
                            continue;
                        }
                    }
                }
                let message = match follower.as_mut() {
                    Some(follower) => {
                        follower.catch_up(started, Instant::now());
                        RateLimitQuotaUsageReports {
                            domain: cli.domain.clone(),
                            bucket_quota_usages: follower
                                .pending
                                .iter()
                                .enumerate()
                                .map(|(i, (allowed, denied))| usage(cli, i, *allowed, *denied))
                                .collect(),
                        }
                    }
                    None => fixed.clone(),
                };
                let sent = match stream.as_ref() {
                    Some((sender, _)) => sender.send(message).await.is_ok(),
                    None => false,
                };
                if !sent {
                    stream = None;
                    continue;
                }
                result.reports += 1;
                result.usages += cli.buckets as u64;
                if let Some(follower) = follower.as_mut() {
                    let allowed: u64 = follower.pending.iter().map(|p| p.0).sum();
                    let denied: u64 = follower.pending.iter().map(|p| p.1).sum();
                    result.allowed += allowed;
                    result.denied += denied;
                    follower.pending.iter_mut().for_each(|p| *p = (0, 0));
                    if cli.trace {
                        let admitted_ms: Vec<u128> = follower
                            .admitted_at
                            .as_mut()
                            .map(std::mem::take)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|at| (started_unix + at.saturating_duration_since(started)).as_millis())
                            .collect();
                        let line = serde_json::json!({
                            "t": started.elapsed().as_secs_f64(), "stream": index,
                            "event": "report", "allowed": allowed, "denied": denied,
                            "admitted_ms": admitted_ms,
                        });
                        println!("{line}");
                    }
                }
            }
            response = async {
                match stream.as_mut() {
                    Some((_, inbound)) => inbound.message().await,
                    None => std::future::pending().await,
                }
            } => match response {
                Ok(Some(response)) => {
                    let now = Instant::now();
                    if let Some(follower) = follower.as_mut() {
                        // The requests before the assignment were decided on the old one.
                        follower.catch_up(started, now);
                    }
                    for action in response.bucket_action {
                        let index = action
                            .bucket_id
                            .as_ref()
                            .and_then(|id| id.bucket.get(&cli.key))
                            .and_then(|value| value.strip_prefix(cli.value_prefix.as_str()))
                            .and_then(|n| n.parse::<usize>().ok());
                        let kind = match &action.bucket_action {
                            Some(BucketAction::QuotaAssignmentAction(assignment)) => {
                                if let Some(quota) = follower
                                    .as_mut()
                                    .zip(index)
                                    .and_then(|(f, i)| f.quotas.get_mut(i))
                                {
                                    quota.assign(assignment, now);
                                }
                                "assignment"
                            }
                            Some(BucketAction::AbandonAction(_)) => "abandon",
                            None => "empty",
                        };
                        *result.actions.entry(kind).or_default() += 1;
                        if let Some(slot) = index.and_then(|i| assigned.get_mut(i))
                            && !*slot
                        {
                            *slot = true;
                            unassigned -= 1;
                            if unassigned == 0 {
                                result.first_assignment = Some(started.elapsed());
                            }
                        }
                    }
                }
                Ok(None) => {
                    event(cli, index, started, "closed", "");
                    result.closed += 1;
                    stream = None;
                }
                Err(status) => {
                    let error = format!("stream: {:?}: {}", status.code(), status.message());
                    event(cli, index, started, "error", &error);
                    result.errors.push(error);
                    stream = None;
                }
            },
        }
    }
    result
}

/// With `--trace`, one JSON line for a stream's end or a failed attempt to open one.
fn event(cli: &Cli, index: usize, started: Instant, kind: &str, detail: &str) {
    if cli.trace {
        let line = serde_json::json!({
            "t": started.elapsed().as_secs_f64(), "stream": index, "event": kind, "detail": detail,
        });
        println!("{line}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let workers = gcounter_runtime::available_cores();
    let runtime = match gcounter_runtime::build(gcounter_runtime::flavor_for(workers), workers) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("rlqs-load: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let results = runtime.block_on(async {
        let cli = std::sync::Arc::new(cli);
        let tasks: Vec<_> = (0..cli.streams)
            .map(|index| {
                let cli = std::sync::Arc::clone(&cli);
                tokio::spawn(async move { run_stream(&cli, index).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap_or_else(|error| StreamResult {
                errors: vec![format!("task: {error}")],
                ..StreamResult::default()
            }));
        }
        results
    });
    let mut actions: HashMap<&str, u64> = HashMap::new();
    for result in &results {
        for (kind, count) in &result.actions {
            *actions.entry(kind).or_default() += count;
        }
    }
    let mut first: Vec<f64> = results
        .iter()
        .filter_map(|r| r.first_assignment)
        .map(|d| d.as_secs_f64() * 1_000.0)
        .collect();
    first.sort_by(f64::total_cmp);
    let errors: Vec<&str> = results
        .iter()
        .flat_map(|r| r.errors.iter().map(String::as_str))
        .collect();
    let line = serde_json::json!({
        "streams": results.len(),
        "buckets": first.len(),
        "reports": results.iter().map(|r| r.reports).sum::<u64>(),
        "usages": results.iter().map(|r| r.usages).sum::<u64>(),
        "allowed": results.iter().map(|r| r.allowed).sum::<u64>(),
        "denied": results.iter().map(|r| r.denied).sum::<u64>(),
        "closed": results.iter().map(|r| r.closed).sum::<u64>(),
        "actions": actions,
        "all_assigned_ms_max": first.last(),
        "all_assigned_ms_min": first.first(),
        "errors": errors,
    });
    println!("{line}");
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
