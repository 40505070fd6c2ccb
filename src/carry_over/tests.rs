//! Carry-over through the whole decision path (config, planning, engine, Redis) against the
//! machine's Redis (127.0.0.1:6379), holding keys written as envoyproxy/ratelimit writes
//! them: each test under its own prefix, per-second counts in a database of their own.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use gcounter_engine::{Engine, EngineSettings, ManualClock};
use gcounter_redis::RedisOrigin;
use gcounter_rls_integration::grpc::{code, descriptor, request};

use super::*;
use crate::rls::{RateLimiter, RlsSettings};
use crate::telemetry::Metrics;

const MAIN_DB: &str = "redis://127.0.0.1:6379/0";
/// Upstream's per-second Redis (`REDIS_PERSECOND_URL`), here another database.
const PER_SECOND_DB: &str = "redis://127.0.0.1:6379/3";
/// Now, on the engine's clock: 40 s into a minute, 1,240 s into an hour.
const NOW_MS: u64 = 1_700_000_040_000 + 40_000;

const LIMITS: &str = "
domain: carry
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: file
    value: files*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5}
";

/// A key prefix no other test or run uses.
fn unique_prefix(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("test-{what}-{}-{nanos}:", std::process::id())
}

/// A window's start in seconds, as upstream computes it: `now / divider * divider`.
fn window(divider: u64) -> u64 {
    NOW_MS / 1_000 / divider * divider
}

async fn set(db: &str, key: &str, count: u64) {
    let client = redis::Client::open(db).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(count)
        .arg("EX")
        .arg(600)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("Redis on 127.0.0.1:6379 must answer: {e}"));
}

/// The service deciding over the machine's Redis, carrying counts over from it under
/// `upstream_prefix`.
fn limiter(upstream_prefix: &str) -> RateLimiter {
    let limits = match crate::config::load_str("carry.yaml", LIMITS) {
        Ok(limits) => limits,
        Err(errors) => panic!("test limits must load: {errors}"),
    };
    let metrics = Arc::new(Metrics::new());
    let ours = RedisOrigin::connect(RedisSettings {
        urls: vec![MAIN_DB.into()],
        key_prefix: unique_prefix("carry-ours"),
        ..RedisSettings::default()
    })
    .unwrap();
    let group = CarryOverGroup::from_flags(
        Some(MAIN_DB),
        Some(PER_SECOND_DB),
        upstream_prefix,
        Duration::from_secs(2),
        1_000,
    )
    .unwrap()
    .unwrap();
    let origin = group
        .wrap(Arc::new(ours), Arc::clone(&metrics) as _)
        .unwrap();
    let engine = Arc::new(Engine::new(
        EngineSettings::default(),
        origin,
        Arc::new(ManualClock::new(NOW_MS)),
        Arc::clone(&metrics) as _,
    ));
    RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(limits)),
        engine,
        metrics,
        RlsSettings::default(),
    )
}

/// How many of `calls` requests with `entries` are allowed.
async fn allowed(limiter: &RateLimiter, entries: &[(&str, &str)], calls: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..calls {
        let answer = limiter
            .should_rate_limit(&request("carry", vec![descriptor(entries)]))
            .await
            .unwrap_or_else(|status| panic!("refused: {status:?}"))
            .into_response();
        if answer.statuses.iter().all(|s| code(s) == Code::Ok) {
            allowed += 1;
        }
    }
    allowed
}

#[tokio::test]
async fn a_counter_at_7_of_10_in_upstreams_redis_allows_3() {
    let prefix = unique_prefix("upstream");
    set(
        MAIN_DB,
        &format!("{prefix}carry_api_key_k1_{}", window(60)),
        7,
    )
    .await;
    let limiter = limiter(&prefix);
    assert_eq!(allowed(&limiter, &[("api_key", "k1")], 10).await, 3);
    // Another value upstream never counted starts at zero.
    assert_eq!(allowed(&limiter, &[("api_key", "k2")], 12).await, 10);
}

#[tokio::test]
async fn a_nested_descriptors_count_is_carried() {
    let prefix = unique_prefix("upstream");
    set(
        MAIN_DB,
        &format!("{prefix}carry_tenant_acme_path_/v1/items_{}", window(3_600)),
        8,
    )
    .await;
    let limiter = limiter(&prefix);
    let entries = [("tenant", "acme"), ("path", "/v1/items")];
    assert_eq!(allowed(&limiter, &entries, 10).await, 2);
}

#[tokio::test]
async fn a_share_threshold_count_is_carried_for_every_value_it_shares() {
    let prefix = unique_prefix("upstream");
    // Upstream writes the wildcard's pattern, not the request's value.
    set(
        MAIN_DB,
        &format!("{prefix}carry_file_files*_{}", window(86_400)),
        6,
    )
    .await;
    let limiter = limiter(&prefix);
    let first = allowed(&limiter, &[("file", "files-a")], 3).await;
    let second = allowed(&limiter, &[("file", "files-b")], 3).await;
    assert_eq!((first, second), (3, 1));
}

#[tokio::test]
async fn a_per_second_count_is_read_from_upstreams_per_second_redis() {
    let prefix = unique_prefix("upstream");
    let key = format!("{prefix}carry_ip_10.0.0.1_{}", window(1));
    set(PER_SECOND_DB, &key, 4).await;
    // The same key in the main Redis is not where per-second limits live.
    set(MAIN_DB, &key, 0).await;
    let limiter = limiter(&prefix);
    assert_eq!(allowed(&limiter, &[("ip", "10.0.0.1")], 5).await, 1);
}

#[test]
fn keys_are_upstreams_and_only_for_its_units() {
    let key = |namespace: &str, identifier: &str, duration_ms: u64, sequence: u64| {
        upstream_key(
            "pre_",
            &CellKey::new("dom", namespace, identifier, duration_ms, sequence),
        )
    };
    assert_eq!(
        key("1:a=1:x/1:b/", "1:x6:v_1/ok", 60_000, 3).as_deref(),
        Some("pre_dom_a_x_b_v_1/ok_180")
    );
    assert_eq!(
        key("4:file=6:files*/", "*", 1_000, 7).as_deref(),
        Some("pre_dom_file_files*_7")
    );
    assert_eq!(
        key("!override/2:ip/", "3:1.2", 3_600_000, 2).as_deref(),
        Some("pre_dom_ip_1.2_7200")
    );
    // A unit_multiplier window upstream has no key for, and identities that do not decode.
    assert_eq!(key("1:a/", "1:x", 120_000, 1), None);
    assert_eq!(key("1:a/", "1:x1:y", 60_000, 1), None);
    assert_eq!(key("1:a/", "*", 60_000, 1), None);
    assert_eq!(key("9:a/", "1:x", 60_000, 1), None);
}
