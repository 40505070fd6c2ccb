//! RLQS across processes and regions, through real binaries: what an Envoy reports to one
//! process counts against the limit every other process of its region decides (through
//! Redis) and every other region (through the global counters in SQL), for RLS v3 calls and
//! RLQS assignments alike.
//!
//! Each test fails when its mechanism is taken away: reports not replayed to Redis leave
//! the other process deciding from its own counts; reports not flushed to the database leave
//! the other region its whole limit.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::Service;
use support::grpc::{
    self, Code, RlsClient, UInt64Value, code, costing, descriptor, one_status, request,
};
use support::quota::{Assigned, QuotaStream, bucket};
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};
use support::sql_admin::{Backend, FAST_GLOBAL, TestDb, region_args};

const WAIT: Duration = Duration::from_secs(10);
const DAY: Duration = Duration::from_secs(86_400);

/// What `client` sees left of user `who`'s daily 100, without consuming.
async fn remaining(client: &mut RlsClient, who: &str) -> u32 {
    let mut peek = descriptor(&[("user", who)]);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    one_status(client, request("quota", vec![peek]))
        .await
        .limit_remaining
}

/// Waits until `client` sees `want` left of `who`'s limit.
async fn sees(client: &mut RlsClient, who: &str, want: u32, what: &str) {
    let started = std::time::Instant::now();
    loop {
        let left = remaining(client, who).await;
        if left == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{what}: {left} left, {want} expected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reports `allowed` requests of `who` on a fresh stream to `service` and waits until the
/// stream got its first assignment (the report is counted by then).
async fn report(service: &Service, who: &str, allowed: u64) -> QuotaStream {
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let id = bucket(&[("user", who)]);
    stream.send_usage("quota", &id, allowed, 0, 0).await;
    let _ = stream.action_for(&id, WAIT).await;
    stream
}

/// Two processes of one region share Redis. An Envoy reports 70 of alice's daily 100 to
/// process a; process b's RLS v3 calls take 20; then each process sees 10 left, a cost of 11
/// is refused in either, and once the 10 are spent a's RLQS stream is told to deny.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_reports_count_in_every_process_of_the_region() {
    support::avoid_window_boundary(DAY, Duration::from_secs(120));
    let (_dir, path) = support::limits_file(&support::one_rule("quota", "user", "day", 1, 100));
    let prefix = redis_admin::unique_prefix("rlqs-fleet");
    let args = redis_args(LOCAL_REDIS_URL, &prefix, &["--freshness", "200ms"]);
    let a = Service::start(&path, &args);
    let b = Service::start(&path, &args);
    let mut at_a = grpc::rls_client(a.grpc_addr).await;
    let mut at_b = grpc::rls_client(b.grpc_addr).await;

    let mut stream = report(&a, "alice", 70).await;
    sees(&mut at_b, "alice", 30, "b sees a's RLQS report").await;
    let taken = one_status(
        &mut at_b,
        request("quota", vec![costing("user", "alice", 20)]),
    )
    .await;
    assert_eq!(code(&taken), Code::Ok);
    sees(&mut at_a, "alice", 10, "a sees b's RLS v3 calls").await;
    for client in [&mut at_a, &mut at_b] {
        let over = one_status(client, request("quota", vec![costing("user", "alice", 11)])).await;
        assert_eq!(code(&over), Code::OverLimit, "11 of 10 left");
    }
    let rest = one_status(
        &mut at_b,
        request("quota", vec![costing("user", "alice", 10)]),
    )
    .await;
    assert_eq!(code(&rest), Code::Ok);
    let alice = bucket(&[("user", "alice")]);
    stream.send_usage("quota", &alice, 0, 5, 1).await;
    let denied = stream
        .action_until(&alice, WAIT, |a| matches!(a, Assigned::Deny { .. }))
        .await;
    assert_eq!(
        denied,
        Assigned::Deny { ttl_s: 10 },
        "a's Envoy told to deny"
    );
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}

/// Two regions share a database (SQLite, every count flushed and synced every 200 ms). An
/// Envoy reports 60 of bob's daily 100 to region a and 30 to region b; each region then sees
/// 10 left and refuses 11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_reports_count_in_every_region() {
    support::avoid_window_boundary(DAY, Duration::from_secs(120));
    let db = TestDb::create(Backend::Sqlite, "rlqs_regions");
    let url = db.url();
    let (_dir, path) = support::limits_file(&support::one_rule("quota", "user", "day", 1, 100));
    let a = Service::start(&path, &region_args("a", &url, &FAST_GLOBAL));
    let b = Service::start(&path, &region_args("b", &url, &FAST_GLOBAL));
    let mut at_a = grpc::rls_client(a.grpc_addr).await;
    let mut at_b = grpc::rls_client(b.grpc_addr).await;

    let _in_a = report(&a, "bob", 60).await;
    let _in_b = report(&b, "bob", 30).await;
    sees(&mut at_a, "bob", 10, "region a sees region b's report").await;
    sees(&mut at_b, "bob", 10, "region b sees region a's report").await;
    for client in [&mut at_a, &mut at_b] {
        let over = one_status(client, request("quota", vec![costing("user", "bob", 11)])).await;
        assert_eq!(code(&over), Code::OverLimit, "11 of 10 left");
    }
    assert_eq!(
        db.counts_by_region(),
        vec![("a".to_string(), 60), ("b".to_string(), 30)],
        "each region's component holds its Envoys' reports"
    );
}
