//! A closed-loop load generator for ShouldRateLimit: throughput and latency percentiles.
//!
//! ```sh
//! cargo run --release --example load -- --target 127.0.0.1:8081 --domain example \
//!     --key remote_address --keys 1000 --connections 4 --concurrency 16 --seconds 10
//! ```
//!
//! Every answer is checked: gRPC errors are counted apart, never as successes (unlike HTTP
//! load tools, which see a gRPC error as HTTP 200).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
struct Args {
    /// host:port of the service's gRPC listener.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    #[arg(long, default_value = "example")]
    domain: String,
    /// Descriptor key; values are `k0`..`k{keys-1}`, cycled.
    #[arg(long, default_value = "remote_address")]
    key: String,
    /// Distinct descriptor values (1 = one hot key).
    #[arg(long, default_value_t = 1)]
    keys: u64,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds of warm-up not counted.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    over_limit: AtomicU64,
    errors: AtomicU64,
}

fn request(domain: &str, key: &str, value: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value: format!("k{value}"),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

async fn worker(
    mut client: RateLimitServiceClient<Channel>,
    args: Arc<Args>,
    seed: u64,
    measure_from: Instant,
    until: Instant,
    counts: Arc<Counts>,
) -> Histogram<u64> {
    // microseconds, 3 significant digits
    let mut latencies = Histogram::<u64>::new(3).expect("valid histogram precision");
    let mut i = seed;
    while Instant::now() < until {
        let req = request(&args.domain, &args.key, i % args.keys.max(1));
        i = i.wrapping_add(7919);
        let started = Instant::now();
        let answer = client.should_rate_limit(req).await;
        let measured = started >= measure_from;
        match answer {
            Ok(response) if measured => {
                let _ = latencies.record(started.elapsed().as_micros() as u64);
                if response.get_ref().overall_code == Code::OverLimit as i32 {
                    counts.over_limit.fetch_add(1, Ordering::Relaxed);
                } else {
                    counts.ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(status) if measured => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                if counts.errors.load(Ordering::Relaxed) <= 3 {
                    eprintln!("gRPC error: {status}");
                }
            }
            _ => {}
        }
    }
    latencies
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let counts = Arc::new(Counts::default());
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(args.warmup);
    let until = measure_from + Duration::from_secs(args.seconds);

    let mut tasks = Vec::new();
    for c in 0..args.connections {
        let channel = Endpoint::from_shared(format!("http://{}", args.target))?
            .connect()
            .await?;
        for s in 0..args.concurrency {
            let client = RateLimitServiceClient::new(channel.clone());
            let seed = (c * args.concurrency + s) as u64;
            tasks.push(tokio::spawn(worker(
                client,
                Arc::clone(&args),
                seed,
                measure_from,
                until,
                Arc::clone(&counts),
            )));
        }
    }
    let mut latencies = Histogram::<u64>::new(3)?;
    for task in tasks {
        latencies.add(task.await?)?;
    }
    let answered = counts.ok.load(Ordering::Relaxed) + counts.over_limit.load(Ordering::Relaxed);
    let errors = counts.errors.load(Ordering::Relaxed);
    println!(
        "requests/s {:.0}  p50 {} µs  p99 {} µs  p99.9 {} µs  ok {}  over_limit {}  errors {}",
        answered as f64 / args.seconds as f64,
        latencies.value_at_quantile(0.50),
        latencies.value_at_quantile(0.99),
        latencies.value_at_quantile(0.999),
        counts.ok.load(Ordering::Relaxed),
        counts.over_limit.load(Ordering::Relaxed),
        errors,
    );
    if errors > 0 {
        return Err(format!("{errors} gRPC errors").into());
    }
    Ok(())
}
