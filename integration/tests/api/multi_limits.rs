//! Several limits on one descriptor (`rate_limits`, our extension), end to end: the real
//! binary, two processes sharing Redis, two regions sharing a SQL database.
//!
//! The rule: `user` may spend 10 per hour and 6 per second, in that (config) order. The
//! scenario proves that a denied request consumes from none of its limits:
//!
//! 1. process/region A: cost 5 passes (hour 5/10, second 5/6); the status reports the most
//!    constrained limit (the second's, 1 remaining);
//! 2. A: cost 2 is denied by the second's limit after the hour's took it: the hour's 2 are
//!    refunded (all-or-nothing);
//! 3. two seconds later (the second's window slid out), B sees the hour at 5 (not 7), so
//!    cost 5 passes exactly to the hour's limit, and cost 1 is denied by the hour's;
//! 4. the backends hold the hour's cell as 12 hits − 2 refunds, every second's cell as 5.
//!
//! Redis: the machine's on 127.0.0.1:6379 under a unique prefix. SQL: MariaDB, PostgreSQL,
//! SQLite, each test its own database. A missing service fails the test saying so.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{
    self, Code, RlsClient, Unit, code, codes, costing, request, should_rate_limit,
};
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};
use support::sql_admin::{Backend, FAST_GLOBAL, TestDb, region_args};
use support::{Service, now_ms};

const HOUR: Duration = Duration::from_secs(3_600);
const DOMAIN: &str = "multi";
const LIMITS: &str = "domain: multi
descriptors:
  - key: user
    rate_limits:
      - unit: hour
        requests_per_unit: 10
      - unit: second
        requests_per_unit: 6
";

/// One decision: code, (limit, unit) of the status, remaining, and the service's
/// `RateLimit-Limit` header when it sent one.
async fn spend(client: &mut RlsClient, cost: u64) -> (Code, (u32, Unit), u32, Option<String>) {
    let response =
        should_rate_limit(client, request(DOMAIN, vec![costing("user", "u1", cost)])).await;
    let status = response
        .statuses
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("{response:?}"));
    let limit = status
        .current_limit
        .as_ref()
        .map(|l| {
            (
                l.requests_per_unit,
                Unit::try_from(l.unit).unwrap_or(Unit::Unknown),
            )
        })
        .unwrap_or_else(|| panic!("a limited status: {status:?}"));
    let header = response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "RateLimit-Limit")
        .map(|h| h.value.clone());
    (code(&status), limit, status.limit_remaining, header)
}

/// Spends `cost` and asserts the decision, `want`: (code, the status's (limit, unit),
/// remaining); the `RateLimit-Limit` header.
async fn assert_spends(
    client: &mut RlsClient,
    cost: u64,
    want: (Code, (u32, Unit), u32),
    why: &str,
) -> Option<String> {
    let (got, limit, remaining, header) = spend(client, cost).await;
    assert_eq!((got, limit, remaining), want, "cost {cost}: {why}");
    header
}

/// Polls a peek in `client` until the remaining is no longer the second's untouched 6 (the
/// hour's count from the other process or region has arrived), and returns it.
async fn remaining_once_converged(client: &mut RlsClient, service: &Service) -> u32 {
    support::until_some(
        Duration::from_millis(50),
        || {
            format!(
                "the other side's count never arrived\n{}",
                service.log_tail(30)
            )
        },
        async || {
            let (_, _, remaining, _) = spend(client, 0).await;
            (remaining != 6).then_some(remaining)
        },
    )
    .await
}

/// Sleeps until the second after next: the cell of "now" is then the previous-but-one, out
/// of the sliding window.
fn let_the_second_slide_out() {
    let next_next = (now_ms() / 1_000 + 2) * 1_000 + 50;
    std::thread::sleep(Duration::from_millis(next_next.saturating_sub(now_ms())));
}

async fn scenario(a: &Service, b: &Service) {
    support::avoid_window_boundary(HOUR, Duration::from_secs(60));
    let mut ca = grpc::rls_client(a.grpc_addr).await;
    let mut cb = grpc::rls_client(b.grpc_addr).await;
    // Both requests below inside one second: the whole of a fresh one.
    support::into_fresh_window(Duration::from_secs(1));

    let header = assert_spends(&mut ca, 5, (Code::Ok, (6, Unit::Second), 1), "within both").await;
    assert_eq!(
        header.as_deref(),
        Some("6, 10;w=3600, 6;w=1"),
        "our RateLimit-Limit lists every policy"
    );
    let denied = (Code::OverLimit, (6, Unit::Second), 0);
    assert_spends(&mut ca, 2, denied, "denied by the second's limit").await;

    let_the_second_slide_out();
    assert_eq!(
        remaining_once_converged(&mut cb, b).await,
        5,
        "the hour holds 5: the denied request's 2 were refunded"
    );
    let exactly = (Code::Ok, (10, Unit::Hour), 0);
    let why = "reaches the hour's limit exactly; the hour is now the most constrained";
    assert_spends(&mut cb, 5, exactly, why).await;
    let (got, limit, _, _) = spend(&mut cb, 1).await;
    assert_eq!(
        (got, limit),
        (Code::OverLimit, (10, Unit::Hour)),
        "over the hour's limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_all_or_nothing_across_processes_sharing_redis() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("multi");
    let (_dir, path) = support::limits_file(LIMITS);
    let args = redis_args(LOCAL_REDIS_URL, &prefix, &["--response-headers"]);
    let a = Service::start(&path, &args);
    let b = Service::start(&path, &args);
    scenario(&a, &b).await;
    // The hour's cell: a's 5 + 2 − 2 refunded, b's 5; every second's cell holds what passed.
    support::eventually("the hour's cell in Redis (hits, refunds)", (12, 2), || {
        redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, ":3600000:")
    });
    let seconds: Vec<u64> = redis_admin::counts_under(LOCAL_REDIS_URL, &prefix)
        .into_iter()
        .filter(|(key, _)| key.contains(":1000:"))
        .map(|(_, net)| net)
        .collect();
    assert_eq!(
        seconds,
        [5, 5],
        "the second's cells: nothing of the denied requests"
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

async fn across_regions(backend: Backend) {
    let db = TestDb::create(backend, "multi");
    let url = db.url();
    let (_dir, path) = support::limits_file(LIMITS);
    let mut extra = FAST_GLOBAL.to_vec();
    extra.push("--response-headers");
    let a = Service::start(&path, &region_args("a", &url, &extra));
    let b = Service::start(&path, &region_args("b", &url, &extra));
    scenario(&a, &b).await;
    let (count, refunds) = match backend {
        Backend::MariaDb => ("CAST(count AS CHAR)", "CAST(refunds AS CHAR)"),
        Backend::Postgres => ("CAST(count AS TEXT)", "CAST(refunds AS TEXT)"),
        Backend::Sqlite => ("CAST(count AS TEXT)", "CAST(refunds AS TEXT)"),
    };
    let region = match backend {
        Backend::MariaDb => "CAST(region AS CHAR)",
        Backend::Postgres => "convert_from(region, 'UTF8')",
        Backend::Sqlite => "CAST(region AS TEXT)",
    };
    let sql = format!(
        "SELECT {region}, {count}, {refunds} FROM ratelimit_window_counts \
         WHERE duration_ms = 3600000 ORDER BY region"
    );
    support::eventually(
        "the hour's rows (region, hits, refunds)",
        vec![
            vec!["a".to_owned(), "7".to_owned(), "2".to_owned()],
            vec!["b".to_owned(), "5".to_owned(), "0".to_owned()],
        ],
        || db.query(&sql),
    );
}

support::scenario_tests!(across_regions {
    several_limits_are_all_or_nothing_across_regions_on_mariadb => Backend::MariaDb,
    several_limits_are_all_or_nothing_across_regions_on_postgres => Backend::Postgres,
    several_limits_are_all_or_nothing_across_regions_on_sqlite => Backend::Sqlite,
});

/// `check-config` and `/rlconfig` show every limit; an ambiguous file is refused with its
/// place, and the running config is kept.
#[test]
fn the_config_tools_know_rate_limits() {
    let (dir, path) = support::limits_file(LIMITS);
    support::check_config::accepted(&path, "several limits per descriptor");

    let service = Service::start(&path, &[]);
    let dump = service.rlconfig();
    assert!(
        dump.contains("multi.user: unit=HOUR requests_per_unit=10, shadow_mode: false, and unit=SECOND requests_per_unit=6"),
        "{dump}"
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "domain: bad\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n",
    )
    .expect("write bad.yaml");
    let stderr = support::check_config::refused(&bad);
    assert!(
        stderr.contains(&format!("{}:6:", bad.display()))
            && stderr.contains("two limits with the same window"),
        "{stderr}"
    );
}

/// `--all-or-nothing` through the real binary on Redis: a request denied by one descriptor
/// gives back what its other descriptors consumed, in the region's counts too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_across_descriptors_on_redis() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("all-or-nothing");
    let (_dir, path) = support::limits_file(
        "domain: aon\ndescriptors:\n  - key: team\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    );
    support::avoid_window_boundary(HOUR, Duration::from_secs(60));
    let a = Service::start(
        &path,
        &redis_args(LOCAL_REDIS_URL, &prefix, &["--all-or-nothing"]),
    );
    let b = Service::start(&path, &redis_args(LOCAL_REDIS_URL, &prefix, &[]));
    let mut ca = grpc::rls_client(a.grpc_addr).await;
    let both = || {
        request(
            "aon",
            vec![
                grpc::descriptor(&[("team", "t")]),
                grpc::descriptor(&[("user", "u")]),
            ],
        )
    };
    assert_eq!(
        grpc::overall(&should_rate_limit(&mut ca, both()).await),
        Code::Ok
    );
    let denied = should_rate_limit(&mut ca, both()).await;
    assert_eq!(codes(&denied), [Code::Ok, Code::OverLimit], "{denied:?}");
    // The team's cell in Redis: 2 hits, 1 refunded (the denied request's).
    support::eventually("the team's cell (hits, refunds)", (2, 1), || {
        redis_admin::pn_sum_under(LOCAL_REDIS_URL, &prefix, "4:team")
    });
    // Another process (without the setting) sees the team's second unit free.
    let mut cb = grpc::rls_client(b.grpc_addr).await;
    let team = grpc::one_status(&mut cb, grpc::hit("aon", "team", "t")).await;
    assert_eq!(
        (code(&team), team.limit_remaining),
        (Code::Ok, 0),
        "{team:?}"
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}
