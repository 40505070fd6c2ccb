//! A counter carried over at the switch from envoyproxy/ratelimit, through a real Envoy: the
//! README's `per-api-key` example, with upstream's Redis holding `gold-key`'s count of the
//! current minute in upstream's key layout.

use gcounter_rls_integration as support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Commands;
use support::Example;
use support::example::Client;
use support::redis_admin::{self, LOCAL_REDIS_URL};

const GOLD: &str = "10, 10;w=60;name=\"gold\"";

#[test]
fn a_counter_at_7_of_10_in_upstreams_redis_allows_3_through_envoy() {
    redis_admin::require_local_redis();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    let prefix = format!("test-carry-envoy-{}-{nanos}:", std::process::id());
    // Start, the reads and the requests inside one minute: upstream's key is that minute's.
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(40));
    let minute = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
        / 60
        * 60;
    // As upstream's cache_key.go writes it: prefix, domain, key_value_, the window's start.
    let key = format!("{prefix}per-api-key_api_key_gold-key_{minute}");
    let mut redis = redis_admin::connect(LOCAL_REDIS_URL);
    let _: () = redis.set_ex(&key, 7, 120).expect("SET upstream's key");

    let example = Example::load("per-api-key");
    let service = example.start_service(&[
        "--carry-over-from-redis",
        LOCAL_REDIS_URL,
        "--carry-over-key-prefix",
        &prefix,
    ]);
    let envoy = example.start_envoy(&service);
    let client = Client::new(&envoy, vec![service.log_path.clone()]);

    // 7 of 10 used before the switch: 3 admitted (remaining 2, 1, 0), then the 429.
    client.exhaust("/", &[("x-api-key", "gold-key")], GOLD, 3);
    // Another key upstream never counted has its whole limit.
    client.exhaust(
        "/",
        &[("x-api-key", "fresh-key")],
        "3, 3;w=60;name=\"per_api_key\"",
        3,
    );
    // Upstream's key is read, never written.
    let after: Option<u64> = redis.get(&key).expect("GET upstream's key");
    assert_eq!(after, Some(7));
    let _: () = redis.del(&key).expect("DEL upstream's key");
}
