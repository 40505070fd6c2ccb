//! Refunds (Envoy's descriptor `is_negative_hits`), end to end: the PN-counter cells through
//! the real binary, two processes sharing Redis and two regions sharing a SQL database.
//!
//! The use case: an AI gateway reserves an estimate of tokens when a request starts
//! (`hits_addend`) and gives back the unused part when the stream ends (`hits_addend` with
//! `is_negative_hits`). A budget of 100 tokens per hour:
//!
//! - A reserves 60 and refunds 45: 85 remain, in A and (once converged) in B;
//! - B reserves 80 (5 left), a reservation of 10 is denied;
//! - refunds are capped at what the refunding process consumed itself (the refund rule):
//!   B's refund of 200 gives back its 80, A's refund of 100 gives back its last 15, so the
//!   whole budget is back, and no more: exactly 100 more pass;
//! - a refund on a counter nobody consumed gives nothing.
//!
//! Redis: the machine's on 127.0.0.1:6379 under a unique prefix; SQL: MariaDB, PostgreSQL,
//! SQLite, each test its own database. A missing service fails the test saying so.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::Service;
use support::grpc::{self, Code, RlsClient, code, costing, one_status, request};
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};
use support::sql_admin::{Backend, FAST_GLOBAL, TestDb, region_args};

const HOUR: Duration = Duration::from_secs(3_600);
const DOMAIN: &str = "ai";

/// Every key's budget: 100 tokens an hour.
fn limits() -> String {
    support::one_rule(DOMAIN, "api_key", "hour", 1, 100)
}

/// Reserves `tokens` for `key`: (code, remaining).
async fn reserve(client: &mut RlsClient, key: &str, tokens: u64) -> (Code, u32) {
    let status = one_status(
        client,
        request(DOMAIN, vec![costing("api_key", key, tokens)]),
    )
    .await;
    (code(&status), status.limit_remaining)
}

/// Gives `tokens` back for `key` (`is_negative_hits`): (code, remaining).
async fn refund(client: &mut RlsClient, key: &str, tokens: u64) -> (Code, u32) {
    let mut descriptor = costing("api_key", key, tokens);
    descriptor.is_negative_hits = true;
    let status = one_status(client, request(DOMAIN, vec![descriptor])).await;
    (code(&status), status.limit_remaining)
}

/// Reserves the `left` tokens of `key`, all of them: then one more is denied.
async fn reserve_the_rest(client: &mut RlsClient, key: &str, left: u64, why: &str) {
    assert_eq!(
        reserve(client, key, left).await,
        (Code::Ok, 0),
        "{key}: {why}"
    );
    let one_more = reserve(client, key, 1).await.0;
    assert_eq!(one_more, Code::OverLimit, "{key}: one more than {why}");
}

/// Polls a peek in `client` until `key`'s remaining is `want`; panics after 10 s.
async fn converges(client: &mut RlsClient, key: &str, want: u32, what: &str, service: &Service) {
    let started = Instant::now();
    loop {
        let (_, remaining) = reserve(client, key, 0).await;
        if remaining == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: remaining {remaining}, {want} expected\n{}",
            service.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scenario(a: &Service, b: &Service) {
    support::avoid_window_boundary(HOUR, Duration::from_secs(60));
    let mut ca = grpc::rls_client(a.grpc_addr).await;
    let mut cb = grpc::rls_client(b.grpc_addr).await;

    assert_eq!(
        reserve(&mut ca, "team-1", 60).await,
        (Code::Ok, 40),
        "reserve 60"
    );
    assert_eq!(
        refund(&mut ca, "team-1", 45).await,
        (Code::Ok, 85),
        "45 unused"
    );
    converges(
        &mut cb,
        "team-1",
        85,
        "B sees A's reservation and refund",
        b,
    )
    .await;
    assert_eq!(
        reserve(&mut cb, "team-1", 80).await,
        (Code::Ok, 5),
        "reserve 80"
    );
    assert_eq!(
        reserve(&mut cb, "team-1", 10).await.0,
        Code::OverLimit,
        "only 5 left"
    );

    // The refund rule: each process gives back at most what it consumed itself.
    assert_eq!(
        refund(&mut cb, "team-1", 200).await,
        (Code::Ok, 85),
        "B's own 80 only"
    );
    refund(&mut ca, "team-1", 100).await;
    converges(&mut cb, "team-1", 100, "every reservation refunded", b).await;
    converges(
        &mut ca,
        "team-1",
        100,
        "every reservation refunded, in A",
        a,
    )
    .await;
    let why = "the whole budget: refunds gave back budget, never created any";
    reserve_the_rest(&mut cb, "team-1", 100, why).await;

    // Nothing consumed, nothing to give back.
    assert_eq!(refund(&mut ca, "team-2", 50).await, (Code::Ok, 100));
    reserve_the_rest(&mut ca, "team-2", 100, "the refund of nothing gave nothing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_and_refunds_across_processes_sharing_redis() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("refunds");
    let (_dir, path) = support::limits_file(&limits());
    let args = redis_args(LOCAL_REDIS_URL, &prefix, &[]);
    let a = Service::start(&path, &args);
    let b = Service::start(&path, &args);
    scenario(&a, &b).await;
    // team-1's cell: hits 60 + 80 + 100, refunds 45 + 80 + 15; team-2's: 100 hits.
    support::eventually(
        "the cells in Redis (hits, refunds)",
        vec![(240, 140), (100, 0)],
        || {
            ["team-1", "team-2"]
                .map(|team| redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, team))
                .to_vec()
        },
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

async fn across_regions(backend: Backend) {
    let db = TestDb::create(backend, "refunds");
    let url = db.url();
    let (_dir, path) = support::limits_file(&limits());
    let a = Service::start(&path, &region_args("a", &url, &FAST_GLOBAL));
    let b = Service::start(&path, &region_args("b", &url, &FAST_GLOBAL));
    scenario(&a, &b).await;
    let (count, refunds, region) = match backend {
        Backend::MariaDb => (
            "CAST(SUM(count) AS CHAR)",
            "CAST(SUM(refunds) AS CHAR)",
            "CAST(region AS CHAR)",
        ),
        Backend::Postgres => (
            "CAST(SUM(count) AS TEXT)",
            "CAST(SUM(refunds) AS TEXT)",
            "convert_from(region, 'UTF8')",
        ),
        Backend::Sqlite => (
            "CAST(SUM(count) AS TEXT)",
            "CAST(SUM(refunds) AS TEXT)",
            "CAST(region AS TEXT)",
        ),
    };
    let sql = format!(
        "SELECT {region}, {count}, {refunds} FROM ratelimit_window_counts \
         GROUP BY region ORDER BY region"
    );
    let row = |region: &str, hits: u64, refunds: u64| {
        vec![region.to_owned(), hits.to_string(), refunds.to_string()]
    };
    // a: team-1 60 − (45 + 15), team-2 100; b: team-1 80 + 100 − 80.
    support::eventually(
        "each region's component (hits, refunds)",
        vec![row("a", 160, 60), row("b", 180, 80)],
        || db.query(&sql),
    );
}

support::scenario_tests!(across_regions {
    reservations_and_refunds_across_regions_on_mariadb => Backend::MariaDb,
    reservations_and_refunds_across_regions_on_postgres => Backend::Postgres,
    reservations_and_refunds_across_regions_on_sqlite => Backend::Sqlite,
});
