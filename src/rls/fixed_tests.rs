//! Upstream's semantics (`--windows fixed --count-denied`) through the limiter, on a manual
//! clock: envoyproxy/ratelimit's own expectations (its `fixed_cache_impl_test.go`), each
//! failing if the mode were ignored.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use gcounter_engine::{EngineSettings, ManualClock, Windows};

use gcounter_rls_integration::grpc::{codes, costing, descriptor, request};
use gcounter_rls_integration::metrics::sample;

use super::{RateLimiter, RlsSettings};
use crate::telemetry::Metrics;

/// Upstream's test clock: Unix second 1_000_000.
const NOW_MS: u64 = 1_000_000_000;

/// Upstream's two hourly keys of its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT test.
const TWO_KEYS: &str = "domain: domain
descriptors:
  - key: key4
    value: value4
    rate_limit: { unit: hour, requests_per_unit: 15 }
  - key: key5
    value: value5
    rate_limit: { unit: hour, requests_per_unit: 14 }
  - key: api_key
    rate_limits:
      - { unit: hour, requests_per_unit: 6 }
      - { unit: second, requests_per_unit: 2 }
";

struct Upstream {
    limiter: RateLimiter,
    metrics: Arc<Metrics>,
    clock: Arc<ManualClock>,
}

impl Upstream {
    fn new(all_or_nothing: bool) -> Self {
        let limits = match crate::config::load_str("test.yaml", TWO_KEYS) {
            Ok(limits) => limits,
            Err(errors) => panic!("test limits must load: {errors}"),
        };
        let engine = EngineSettings {
            max_cells: 1_000,
            windows: Windows::Fixed,
            count_denied: true,
            ..EngineSettings::default()
        };
        let settings = RlsSettings {
            all_or_nothing,
            ..RlsSettings::default()
        };
        let clock = Arc::new(ManualClock::new(NOW_MS));
        let (limiter, metrics) =
            RateLimiter::in_process_with(limits, Arc::clone(&clock) as _, engine, settings);
        Self {
            limiter,
            metrics,
            clock,
        }
    }

    /// One request with key4 and key5, each costing `cost`.
    async fn both(&self, cost: u64) -> RateLimitResponse {
        let descriptors = vec![
            costing("key4", "value4", cost),
            costing("key5", "value5", cost),
        ];
        match self
            .limiter
            .should_rate_limit(&request("domain", descriptors))
            .await
        {
            Ok(answer) => answer.into_response(),
            Err(status) => panic!("a valid request was refused: {status:?}"),
        }
    }

    fn stat(&self, key: &str, name: &str) -> f64 {
        let rule = format!("domain.{key}");
        sample(
            &self.metrics.encode(),
            &format!("ratelimit_service_rate_limit_{name}"),
            &[("domain", "domain"), ("key1", key), ("rule", &rule)],
        )
        .unwrap_or(0.0)
    }
}

fn remaining(response: &RateLimitResponse) -> Vec<u32> {
    response
        .statuses
        .iter()
        .map(|s| s.limit_remaining)
        .collect()
}

/// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig`: both keys at 10, hits of
/// 1, 2, 2; the third request takes key5 over its 14 and, with the switch, leaves key4
/// uncharged. Every `duration_until_reset` is upstream's `3600 - 1_000_000 % 3600 = 800 s`.
#[tokio::test]
async fn upstreams_stop_increment_expectations() {
    let up = Upstream::new(true);
    up.both(10).await;
    let first = up.both(1).await;
    assert_eq!(
        (codes(&first), remaining(&first)),
        (vec![Code::Ok, Code::Ok], vec![4, 3])
    );
    let second = up.both(2).await;
    assert_eq!(
        (codes(&second), remaining(&second)),
        (vec![Code::Ok, Code::Ok], vec![2, 1])
    );
    let third = up.both(2).await;
    assert_eq!(
        (codes(&third), remaining(&third)),
        (vec![Code::Ok, Code::OverLimit], vec![2, 0])
    );
    for status in &third.statuses {
        let reset = status
            .duration_until_reset
            .as_ref()
            .map(|d| (d.seconds, d.nanos));
        assert_eq!(reset, Some((800, 0)), "{status:?}");
    }
    // key5: 1 over the limit, and 3 near it (2 of the second request, 1 of the third).
    assert_eq!(up.stat("key5_value5", "over_limit"), 1.0);
    assert_eq!(up.stat("key5_value5", "near_limit"), 3.0);
    assert_eq!(up.stat("key5_value5", "total_hits"), 15.0);
    // key4, passed in the denied request and given back: every hit within the limit, as
    // upstream counts them (its test's 5, after the 10 set up here), its near_limit from the count with the hit (3, where
    // upstream's, from the count without it less the hit, says 2: docs/migration.md).
    assert_eq!(up.stat("key4_value4", "within_limit"), 15.0);
    assert_eq!(up.stat("key4_value4", "near_limit"), 3.0);
    // key5 counted the denied hits (15: over whatever comes), key4 did not (13: 2 left, as
    // upstream answers a key it does not charge).
    let after = up.both(1).await;
    assert_eq!(
        (codes(&after), remaining(&after)),
        (vec![Code::Ok, Code::OverLimit], vec![2, 0])
    );
    assert_eq!(up.stat("key5_value5", "over_limit"), 2.0);
}

/// Upstream's default (no STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): every key counts every
/// hit, over the limit or not.
#[tokio::test]
async fn without_stop_increment_every_key_counts_every_hit() {
    let up = Upstream::new(false);
    up.both(13).await;
    let over = up.both(2).await;
    assert_eq!(
        (codes(&over), remaining(&over)),
        (vec![Code::Ok, Code::OverLimit], vec![0, 0])
    );
    // key4 is at 15 of 15, key5 at 15 of 14.
    let after = up.both(1).await;
    assert_eq!(codes(&after), [Code::OverLimit, Code::OverLimit]);
}

/// Several limits of one descriptor: with counted denials each counts every hit (no
/// all-or-nothing refund among them): the second's denials still count in the hour.
#[tokio::test]
async fn counted_denials_count_in_every_limit_of_a_descriptor() {
    let up = Upstream::new(false);
    let ask = async || {
        let key = vec![descriptor(&[("api_key", "k")])];
        match up.limiter.should_rate_limit(&request("domain", key)).await {
            Ok(answer) => answer.into_response(),
            Err(status) => panic!("a valid request was refused: {status:?}"),
        }
    };
    // 2 per second: 2 admitted, 3 denied by the second's limit, all 5 counted in the hour
    // (6 per hour).
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.extend(codes(&ask().await));
    }
    assert_eq!(
        seen,
        [
            Code::Ok,
            Code::Ok,
            Code::OverLimit,
            Code::OverLimit,
            Code::OverLimit
        ]
    );
    up.clock.advance(1_000);
    // The next second: the hour's 6th hit, its last (uncounted denials would leave 3).
    let last = ask().await;
    assert_eq!((codes(&last), remaining(&last)), (vec![Code::Ok], vec![0]));
    assert_eq!(codes(&ask().await), [Code::OverLimit]);
}
