//! The whole decision of one `ShouldRateLimit` without gRPC (validation, descriptor
//! matching, the engine, the response), the heap allocations it makes, and how its cost
//! grows with the work (rules in a domain, descriptors per request, entries per descriptor).
//! Every case is set up before criterion filters them.
//!
//! `cargo bench --bench rls`. Allocations are counted by a wrapping global allocator and
//! printed once per case before timing (what the profile of BENCHMARKS.md refers to).
//!
//! Instruction counts (repeatable on a loaded machine, unlike times): with `RLS_PROFILE=<case>`
//! the binary runs `RLS_PROFILE_CALLS` (default 10,000) warm decisions of that warm case inside
//! `profile_loop` and exits, so callgrind can count only them:
//! `RLS_PROFILE="one descriptor" valgrind --tool=callgrind --toggle-collect='*profile_loop*'
//! target/release/deps/rls-<hash>`, then `callgrind_annotate` (total ÷ calls = per request).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark: a panic is how it reports a broken set-up"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use criterion::{BenchmarkId, Criterion, Throughput};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use futures_util::FutureExt;
use gcounter_engine::regional::InProcessOrigin;
use gcounter_engine::{Engine, EngineSettings, SystemClock};
use gcounter_rls::rls::{HeaderNames, RateLimiter, RlsSettings};
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

/// A limit never reached: every decision accepts.
const NEVER_REACHED: &str = "rate_limit: { unit: hour, requests_per_unit: 1000000000 }";

/// The warm cases' limits: `remote_address`, `tenant` and `tenant` → `path: /api/*`.
fn limits_yaml() -> String {
    format!(
        "domain: bench\n\
         descriptors:\n  \
           - {{ key: remote_address, {NEVER_REACHED} }}\n  \
           - key: tenant\n    \
             {NEVER_REACHED}\n    \
             descriptors:\n      \
               - {{ key: path, value: /api/*, {NEVER_REACHED} }}\n"
    )
}

fn limiter_with(yaml: &str, settings: RlsSettings) -> RateLimiter {
    let limits = gcounter_rls::config::load_str("bench.yaml", yaml).expect("valid limits");
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
        settings,
    )
}

fn limiter() -> RateLimiter {
    limiter_with(&limits_yaml(), RlsSettings::default())
}

/// The same limits with the `RateLimit-*` response headers on (`--response-headers`).
fn limiter_with_headers() -> RateLimiter {
    limiter_with(
        &limits_yaml(),
        RlsSettings {
            response_headers: Some(HeaderNames::default()),
            ..RlsSettings::default()
        },
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

/// Heap allocations of one warm decision (the mean of 1,000, after one to warm the cells).
fn allocations_per_request(limiter: &RateLimiter, request: &RateLimitRequest) -> f64 {
    decide(limiter, request);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..1_000 {
        decide(limiter, request);
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / 1_000.0
}

/// The warm cases: a limiter and a request each.
fn warm_cases() -> Vec<(&'static str, RateLimiter, RateLimitRequest)> {
    let one = || request("bench", vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    vec![
        ("one descriptor", limiter(), one()),
        (
            "two descriptors, nested",
            limiter(),
            request(
                "bench",
                vec![
                    descriptor(&[("tenant", "acme")]),
                    descriptor(&[("tenant", "acme"), ("path", "/api/users")]),
                ],
            ),
        ),
        (
            "one descriptor, RateLimit headers",
            limiter_with_headers(),
            one(),
        ),
    ]
}

fn warm(c: &mut Criterion) {
    let mut group = c.benchmark_group("rls request, warm");
    group.throughput(Throughput::Elements(1));
    for (name, limiter, request) in &warm_cases() {
        let per_request = allocations_per_request(limiter, request);
        println!("rls request, warm/{name}: {per_request:.2} allocations per request");
        group.bench_function(*name, |b| b.iter(|| decide(limiter, request)));
    }
    group.finish();
}

/// `n` rules in one domain: nine in ten match an exact value (`user: u<i>`), one in ten a
/// wildcard (`path: /p<i>/*`), matched in config order after the exact values.
fn rules_yaml(n: usize) -> String {
    let wildcards = (n / 10).max(1);
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for i in 0..n - wildcards {
        let _ = writeln!(yaml, "  - {{ key: user, value: u{i}, {NEVER_REACHED} }}");
    }
    for i in 0..wildcards {
        let _ = writeln!(
            yaml,
            "  - {{ key: path, value: \"/p{i}/*\", {NEVER_REACHED} }}"
        );
    }
    yaml
}

/// Cost as the rules of a domain grow: an exact match, and the last wildcard (every
/// wildcard of the key is tried before it, in config order).
fn rules_in_a_domain(c: &mut Criterion) {
    let mut group = c.benchmark_group("rls growth, rules in a domain");
    group.throughput(Throughput::Elements(1));
    // One file holds at most ~22k rules of this shape: its YAML is capped at 250,000 nodes.
    for n in [10, 100, 1_000, 10_000, 20_000] {
        let limiter = limiter_with(&rules_yaml(n), RlsSettings::default());
        let wildcards = (n / 10).max(1);
        let exact = request(
            "bench",
            vec![descriptor(&[("user", &format!("u{}", n / 2))])],
        );
        let last = format!("/p{}/x", wildcards - 1);
        let wildcard = request("bench", vec![descriptor(&[("path", &last)])]);
        for (case, request) in [("exact", &exact), ("last wildcard", &wildcard)] {
            let allocations = allocations_per_request(&limiter, request);
            println!("rls growth, rules/{case}/{n}: {allocations:.2} allocations per request");
            group.bench_with_input(BenchmarkId::new(case, n), request, |b, request| {
                b.iter(|| decide(&limiter, request));
            });
        }
    }
    group.finish();
}

/// Cost as the descriptors of one request grow (each its own warm counter).
fn descriptors_per_request(c: &mut Criterion) {
    let limiter = limiter();
    let mut group = c.benchmark_group("rls growth, descriptors per request");
    group.throughput(Throughput::Elements(1));
    for n in [1, 4, 16, 64] {
        let values: Vec<String> = (0..n).map(|i| format!("10.0.0.{i}")).collect();
        let descriptors = values
            .iter()
            .map(|value| descriptor(&[("remote_address", value)]))
            .collect();
        let request = request("bench", descriptors);
        let allocations = allocations_per_request(&limiter, &request);
        println!("rls growth, descriptors/{n}: {allocations:.2} allocations per request");
        group.bench_with_input(BenchmarkId::from_parameter(n), &request, |b, request| {
            b.iter(|| decide(&limiter, request));
        });
    }
    group.finish();
}

/// A chain `k0 → k1 → … → k7`, each level with a limit, so a descriptor of `n` entries
/// (`k0 … k<n-1>`) matches the rule at depth `n`.
fn chain_yaml(depth: usize) -> String {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for level in 0..depth {
        let indent = "  ".repeat(2 * level + 1);
        if level > 0 {
            let _ = writeln!(yaml, "{}descriptors:", "  ".repeat(2 * level));
        }
        let _ = writeln!(yaml, "{indent}- key: k{level}");
        let _ = writeln!(yaml, "{indent}  {NEVER_REACHED}");
    }
    yaml
}

/// Cost as the entries of one descriptor grow (the tree walked one level per entry, the
/// identifier one segment per entry).
fn entries_per_descriptor(c: &mut Criterion) {
    let limiter = limiter_with(&chain_yaml(8), RlsSettings::default());
    let mut group = c.benchmark_group("rls growth, entries per descriptor");
    group.throughput(Throughput::Elements(1));
    for n in [1, 2, 4, 8] {
        let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
        let entries: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "value-1234")).collect();
        let request = request("bench", vec![descriptor(&entries)]);
        let allocations = allocations_per_request(&limiter, &request);
        println!("rls growth, entries/{n}: {allocations:.2} allocations per request");
        group.bench_with_input(BenchmarkId::from_parameter(n), &request, |b, request| {
            b.iter(|| decide(&limiter, request));
        });
    }
    group.finish();
}

/// What callgrind counts: `calls` warm decisions and nothing else.
#[inline(never)]
fn profile_loop(limiter: &RateLimiter, request: &RateLimitRequest, calls: u64) {
    for _ in 0..calls {
        decide(limiter, request);
    }
}

/// `RLS_PROFILE=<warm case>`: the decisions callgrind counts (see the module's doc).
fn profile(case: &str) {
    let calls = std::env::var("RLS_PROFILE_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000u64);
    let cases = warm_cases();
    let Some((name, limiter, request)) = cases.iter().find(|(name, _, _)| *name == case) else {
        let names: Vec<&str> = cases.iter().map(|(name, _, _)| *name).collect();
        panic!("RLS_PROFILE={case:?}: expected one of {names:?}");
    };
    // Cells warm, the metric series created, the allocator's free lists filled.
    for _ in 0..1_000 {
        decide(limiter, request);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    profile_loop(limiter, request, calls);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    println!("{name}: {calls} decisions, {allocations} allocations");
}

fn main() {
    if let Ok(case) = std::env::var("RLS_PROFILE") {
        profile(&case);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    warm(&mut criterion);
    rules_in_a_domain(&mut criterion);
    descriptors_per_request(&mut criterion);
    entries_per_descriptor(&mut criterion);
    criterion.final_summary();
}
