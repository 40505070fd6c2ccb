//! `rlqs-load`: Envoys' RLQS reporting, simulated, against any `RateLimitQuotaService`.
//!
//! `--streams` streams (one per Envoy) each report the same `--buckets` buckets
//! (`{<key>: k0}` to `{<key>: k<n-1>}`) every `--interval`, each bucket with
//! `--requests-per-report` allowed requests, as Envoy's `rate_limit_quota` filter does: all
//! of a stream's buckets in one message. Prints one JSON line: reports and usages sent, bucket
//! actions received by kind, and how long each stream's first report waited for its last
//! bucket's first assignment.
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
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::google::protobuf;
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
}

#[derive(Debug, Default)]
struct StreamResult {
    reports: u64,
    usages: u64,
    actions: HashMap<&'static str, u64>,
    /// From the first report to the first action of its last bucket.
    first_assignment: Option<Duration>,
    error: Option<String>,
}

fn report(cli: &Cli) -> RateLimitQuotaUsageReports {
    let usages = (0..cli.buckets)
        .map(|i| BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: HashMap::from([(cli.key.clone(), format!("k{i}"))]),
            }),
            time_elapsed: Some(protobuf::Duration {
                seconds: i64::try_from(cli.interval.as_secs()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            num_requests_allowed: cli.requests_per_report,
            num_requests_denied: 0,
        })
        .collect();
    RateLimitQuotaUsageReports {
        domain: cli.domain.clone(),
        bucket_quota_usages: usages,
    }
}

async fn run_stream(cli: &Cli) -> StreamResult {
    let mut result = StreamResult::default();
    let endpoint = format!("http://{}", cli.target);
    let mut client = match RateLimitQuotaServiceClient::connect(endpoint).await {
        Ok(client) => client.max_encoding_message_size(64 << 20),
        Err(error) => {
            result.error = Some(format!("connect: {error}"));
            return result;
        }
    };
    let (sender, outbound) = mpsc::channel(4);
    let reports = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(outbound);
    let mut inbound = match client.stream_rate_limit_quotas(reports).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            result.error = Some(format!("open: {status}"));
            return result;
        }
    };
    let message = report(cli);
    let started = Instant::now();
    let end = started + cli.duration;
    let mut assigned = vec![false; cli.buckets];
    let mut unassigned = cli.buckets;
    let mut tick = tokio::time::interval(cli.interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if Instant::now() >= end {
                    break;
                }
                if sender.send(message.clone()).await.is_err() {
                    break;
                }
                result.reports += 1;
                result.usages += cli.buckets as u64;
            }
            response = inbound.message() => match response {
                Ok(Some(response)) => {
                    for action in response.bucket_action {
                        let kind = match action.bucket_action {
                            Some(BucketAction::QuotaAssignmentAction(_)) => "assignment",
                            Some(BucketAction::AbandonAction(_)) => "abandon",
                            None => "empty",
                        };
                        *result.actions.entry(kind).or_default() += 1;
                        let index = action
                            .bucket_id
                            .as_ref()
                            .and_then(|id| id.bucket.get(&cli.key))
                            .and_then(|value| value.strip_prefix('k'))
                            .and_then(|n| n.parse::<usize>().ok());
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
                Ok(None) => break,
                Err(status) => {
                    result.error = Some(format!("stream: {status}"));
                    break;
                }
            },
        }
    }
    result
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
            .map(|_| {
                let cli = std::sync::Arc::clone(&cli);
                tokio::spawn(async move { run_stream(&cli).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap_or_else(|error| StreamResult {
                error: Some(format!("task: {error}")),
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
    let errors: Vec<&str> = results.iter().filter_map(|r| r.error.as_deref()).collect();
    let line = serde_json::json!({
        "streams": results.len(),
        "buckets": first.len(),
        "reports": results.iter().map(|r| r.reports).sum::<u64>(),
        "usages": results.iter().map(|r| r.usages).sum::<u64>(),
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
