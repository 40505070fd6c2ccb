//! The whole decision of one `ShouldRateLimit` without gRPC (validation, descriptor
//! matching, the engine, the response), and the heap allocations it makes.
//!
//! `cargo bench --bench rls`. Allocations are counted by a wrapping global allocator and
//! printed once per case before timing (what the profile of BENCHMARKS.md refers to).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark: a panic is how it reports a broken set-up"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use futures_util::FutureExt;
use gcounter_engine::engine::{Engine, EngineSettings, SystemClock};
use gcounter_engine::regional::InProcessOrigin;
use gcounter_rls::rls::{RateLimiter, RlsSettings};
use gcounter_rls::telemetry::Metrics;
use gcounter_rls_integration::grpc::{descriptor, request};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const LIMITS: &str = "\
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
    descriptors:
      - key: path
        value: /api/*
        rate_limit: { unit: hour, requests_per_unit: 1000000000 }
";

fn limiter() -> RateLimiter {
    let limits = gcounter_rls::config::load_str("bench.yaml", LIMITS).expect("valid limits");
    let metrics = Arc::new(Metrics::new());
    let engine = Arc::new(Engine::new(
        EngineSettings::default(),
        Arc::new(InProcessOrigin::new(1_000)),
        Arc::new(SystemClock),
        Arc::clone(&metrics) as _,
    ));
    RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(limits)),
        engine,
        metrics,
        RlsSettings::default(),
    )
}

fn decide(limiter: &RateLimiter, request: &RateLimitRequest) {
    let answer = limiter
        .should_rate_limit(request)
        .now_or_never()
        .expect("a warm decision awaits nothing")
        .expect("a valid request");
    black_box(answer);
}

fn bench(c: &mut Criterion) {
    let limiter = limiter();
    let cases = [
        (
            "one descriptor",
            request("bench", vec![descriptor(&[("remote_address", "10.0.0.1")])]),
        ),
        (
            "two descriptors, nested",
            request(
                "bench",
                vec![
                    descriptor(&[("tenant", "acme")]),
                    descriptor(&[("tenant", "acme"), ("path", "/api/users")]),
                ],
            ),
        ),
    ];
    let mut group = c.benchmark_group("rls request, warm");
    group.throughput(Throughput::Elements(1));
    for (name, request) in &cases {
        decide(&limiter, request);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..1_000 {
            decide(&limiter, request);
        }
        let per_request = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / 1_000.0;
        println!("rls request, warm/{name}: {per_request:.2} allocations per request");
        group.bench_function(*name, |b| b.iter(|| decide(&limiter, request)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
