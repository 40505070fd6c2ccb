//! Fuzzing the request path: bytes → protobuf decode → validation → plan → engine → answer.
//!
//! The stable toolchain has no libFuzzer instrumentation, so this is property-based fuzzing
//! (proptest): structured requests built to reach every branch (wildcards, nested rules,
//! overrides with any unit number, hits_addend at the extremes, long and odd values), and byte
//! mutations of the seed corpus in `fuzz/corpus/request/` (encoded requests), decoded as the
//! server decodes them. A case fails on a panic or a broken invariant of the answer; failures
//! are kept in `fuzz/regressions/` and replayed first on every run.
//!
//! Runs in the README's test command with a bounded case count; `FUZZ_CASES=100000` for a
//! longer run. `FUZZ_WRITE_CORPUS=1` rewrites the seed corpus from [`seeds`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a test: a panic is how it reports a broken set-up"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use gcounter_engine::ManualClock;
use gcounter_rls::rls::{Answer, RateLimiter, RlsSettings};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use prost::Message;

/// Limits that give the fuzzer something to match: exact values, wildcards, nesting,
/// `replaces`, shadow mode, unlimited, detailed metrics and tiny limits (denials).
const LIMITS: &str = "\
domain: fuzz
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 3 }
  - key: path
    value: /api/*
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    value: /static/*
    rate_limit: { unlimited: true }
  - key: tenant
    descriptors:
      - key: path
        value: /v1/*
        rate_limit: { name: t, unit: hour, requests_per_unit: 5 }
      - key: path
        rate_limit: { unit: day, requests_per_unit: 1, replaces: [{ name: t }] }
        shadow_mode: true
  - key: k
    value: v
    rate_limit: { unit: minute, requests_per_unit: 0 }
";

/// Cases per run and test in the README's test command (seconds in a debug build).
const DEFAULT_CASES: u32 = 1_000;

/// Keys and values the limits know, so generated requests match rules, not only miss them.
const KEYS: &[&str] = &["remote_address", "path", "tenant", "k", "", "x"];
const VALUES: &[&str] = &["/api/a", "/static/x", "/v1/y", "v", "", "*", "10.0.0.1"];

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn runner(name: &str) -> TestRunner {
    let regressions = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(format!("{name}.txt"));
    let regressions: &'static str = Box::leak(regressions.display().to_string().into_boxed_str());
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    })
}

/// A limiter on the compiled `LIMITS`, with an in-process origin and a manual clock.
fn limiter() -> (RateLimiter, Arc<ManualClock>) {
    let limits = match gcounter_rls::config::load_str("fuzz.yaml", LIMITS) {
        Ok(limits) => limits,
        Err(e) => panic!("the fuzz limits must load: {e}"),
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (limiter, _) =
        RateLimiter::in_process(limits, Arc::clone(&clock) as _, 512, RlsSettings::default());
    (limiter, clock)
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("tokio runtime: {e}"),
    }
}

/// What every answer must satisfy, whatever the request.
fn check_answer(
    request: &RateLimitRequest,
    answer: Result<RateLimitResponse, tonic::Status>,
) -> Result<(), TestCaseError> {
    let response = match answer {
        Ok(response) => response,
        Err(status) => {
            prop_assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "a refused request is InvalidArgument: {:?}",
                status
            );
            prop_assert!(!status.message().is_empty());
            return Ok(());
        }
    };
    prop_assert_eq!(response.statuses.len(), request.descriptors.len());
    let any_over = response
        .statuses
        .iter()
        .any(|s| s.code == Code::OverLimit as i32);
    let overall = if any_over { Code::OverLimit } else { Code::Ok };
    prop_assert_eq!(response.overall_code, overall as i32);
    for status in &response.statuses {
        if let Some(limit) = &status.current_limit {
            prop_assert!(status.limit_remaining <= limit.requests_per_unit);
        }
    }
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(VALUES).prop_map(str::to_owned),
        2 => "[ -~]{0,12}",
        1 => any::<String>(),
        1 => (1usize..6_000).prop_map(|n| "x".repeat(n)),
        1 => Just("a\0b\u{202e}\u{fffd}".to_owned()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => text(),
    ]
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    (
        proptest::collection::vec((key(), text()), 0..5),
        proptest::option::weighted(0.2, (any::<u32>(), -2i32..12)),
        proptest::option::weighted(
            0.3,
            prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>()],
        ),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(entries, limit, hits, negative)| RateLimitDescriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| Entry { key, value })
                .collect(),
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| envoy_types::pb::google::protobuf::UInt64Value { value }),
            is_negative_hits: negative,
        })
}

fn request() -> impl Strategy<Value = RateLimitRequest> {
    (
        prop_oneof![8 => Just("fuzz".to_owned()), 1 => Just(String::new()), 1 => text()],
        proptest::collection::vec(descriptor(), 0..6),
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

/// Structured requests, several per case on one limiter (so counts build up and deny), the
/// clock moving between them.
#[test]
fn structured_requests_get_a_sound_answer() {
    let runtime = runtime();
    let result = runner("structured_requests").run(
        &(proptest::collection::vec((request(), 0u64..5_000), 1..8)),
        |steps| {
            let (limiter, clock) = limiter();
            for (request, advance_ms) in steps {
                clock.advance(advance_ms);
                let answer = runtime.block_on(limiter.should_rate_limit(&request));
                check_answer(&request, answer.map(Answer::into_response))?;
            }
            Ok(())
        },
    );
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// One byte-level change of a seed.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
    Truncate { at: usize },
    Repeat { at: usize, len: usize, times: usize },
}

impl Mutation {
    fn apply(&self, data: &mut Vec<u8>) {
        let at = |i: usize| if data.is_empty() { 0 } else { i % data.len() };
        match self {
            Self::Flip { at: i, bit } => {
                let i = at(*i);
                if let Some(b) = data.get_mut(i) {
                    *b ^= 1 << (bit % 8);
                }
            }
            Self::Set { at: i, byte } => {
                let i = at(*i);
                if let Some(b) = data.get_mut(i) {
                    *b = *byte;
                }
            }
            Self::Insert { at: i, bytes } => {
                let i = at(*i);
                data.splice(i..i, bytes.iter().copied());
            }
            Self::Remove { at: i, len } => {
                let i = at(*i);
                let end = (i + len).min(data.len());
                data.drain(i..end);
            }
            Self::Truncate { at: i } => {
                let i = at(*i);
                data.truncate(i);
            }
            Self::Repeat { at: i, len, times } => {
                let i = at(*i);
                let end = (i + len).min(data.len());
                let chunk: Vec<u8> = data.get(i..end).map(<[u8]>::to_vec).unwrap_or_default();
                for _ in 0..*times {
                    data.splice(end..end, chunk.iter().copied());
                }
            }
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), 1usize..64, 1usize..64).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
    ]
}

/// Seeds mutated at the byte level and handed to the limiter as the server hands it a gRPC
/// message: a body that does not decode is `InvalidArgument`; one that decodes gets a sound
/// answer.
#[test]
fn mutated_seed_bytes_get_a_sound_answer() {
    let seeds = read_corpus();
    assert!(
        seeds.len() >= 5,
        "the seed corpus in fuzz/corpus/request/ is missing ({} seeds); \
         FUZZ_WRITE_CORPUS=1 cargo nextest run --test fuzz_request_path writes it",
        seeds.len()
    );
    let runtime = runtime();
    let (limiter, clock) = limiter();
    let result = runner("mutated_seeds").run(
        &(
            0..seeds.len(),
            proptest::collection::vec(mutation(), 0..6),
            0u64..2_000,
        ),
        |(seed, mutations, advance_ms)| {
            let mut bytes = seeds.get(seed).cloned().unwrap_or_default();
            for mutation in &mutations {
                mutation.apply(&mut bytes);
            }
            clock.advance(advance_ms);
            // As the server does: the limiter decodes the raw message.
            let answer = runtime.block_on(limiter.should_rate_limit_encoded(bytes.clone().into()));
            match RateLimitRequest::decode(bytes.as_slice()) {
                Ok(request) => check_answer(&request, answer.map(Answer::into_response))?,
                Err(_) => prop_assert_eq!(
                    answer.map_err(|status| status.code()).err(),
                    Some(tonic::Code::InvalidArgument),
                    "an undecodable message is InvalidArgument"
                ),
            }
            Ok(())
        },
    );
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/request")
}

fn read_corpus() -> Vec<Vec<u8>> {
    if std::env::var_os("FUZZ_WRITE_CORPUS").is_some() {
        write_corpus();
    }
    let Ok(entries) = std::fs::read_dir(corpus_dir()) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

fn write_corpus() {
    let dir = corpus_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("create {}: {e}", dir.display());
    }
    for (name, request) in seeds() {
        let path = dir.join(format!("{name}.bin"));
        if let Err(e) = std::fs::write(&path, request.encode_to_vec()) {
            panic!("write {}: {e}", path.display());
        }
    }
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(k, v)| Entry {
            key: (*k).into(),
            value: (*v).into(),
        })
        .collect()
}

/// The seed corpus: one request per shape Envoy sends.
fn seeds() -> Vec<(&'static str, RateLimitRequest)> {
    let one = |pairs: &[(&str, &str)]| RateLimitDescriptor {
        entries: entries(pairs),
        ..Default::default()
    };
    let request = |descriptors: Vec<RateLimitDescriptor>, hits_addend: u32| RateLimitRequest {
        domain: "fuzz".into(),
        descriptors,
        hits_addend,
    };
    vec![
        (
            "01-remote-address",
            request(vec![one(&[("remote_address", "10.0.0.1")])], 0),
        ),
        (
            "02-wildcard-path",
            request(vec![one(&[("path", "/api/orders")])], 1),
        ),
        (
            "03-nested-replaces",
            request(
                vec![
                    one(&[("tenant", "acme"), ("path", "/v1/x")]),
                    one(&[("tenant", "acme"), ("path", "/other")]),
                ],
                2,
            ),
        ),
        (
            "04-override",
            request(
                vec![RateLimitDescriptor {
                    entries: entries(&[("k", "v")]),
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 7,
                        unit: 2,
                    }),
                    ..Default::default()
                }],
                1,
            ),
        ),
        (
            "05-descriptor-hits-addend",
            request(
                vec![RateLimitDescriptor {
                    entries: entries(&[("remote_address", "10.0.0.2")]),
                    hits_addend: Some(envoy_types::pb::google::protobuf::UInt64Value { value: 2 }),
                    ..Default::default()
                }],
                0,
            ),
        ),
        (
            "06-many-descriptors",
            request(
                (0..8)
                    .map(|i| one(&[("remote_address", &format!("10.0.0.{i}"))]))
                    .collect(),
                1,
            ),
        ),
        (
            "07-unknown-domain",
            RateLimitRequest {
                domain: "other".into(),
                descriptors: vec![one(&[("a", "b")])],
                hits_addend: 1,
            },
        ),
    ]
}
