//! `guarantee: never_above` on one process (the embedded default): many concurrent RLS v3
//! clients on several connections (decisions on every worker thread, on the same cell) never
//! get more admitted than one process deciding alone allows, on fixed and sliding windows;
//! RLQS buckets on such a limit are refused with a blanket denial instead of token buckets.

use gcounter_rls_integration as support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::grpc::{self, RlsClient};
use support::load::{self, Sent};
use support::quota::{Assigned, QuotaStream, bucket};
use support::serve_limits;

/// Clients, each its own connection: their calls are decided on several worker threads.
const CLIENTS: usize = 8;

async fn clients(service: &support::Service) -> Vec<RlsClient> {
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(grpc::rls_client(service.grpc_addr).await);
    }
    clients
}

fn admitted(sent: &Sent) -> bool {
    sent.first_status()
        .is_some_and(|status| status.code == Code::Ok as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_admit_exactly_the_limit_of_a_fixed_window() {
    const LIMIT: usize = 300;
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 300, guarantee: never_above}\n";
    let (_dir, service) = serve_limits(limits, &["--windows", "fixed"]);
    let clients = clients(&service).await;
    support::stay_in_one_minute(Duration::from_secs(15));
    // Ten times the limit, 2 000 a second over eight connections, inside one minute's window.
    let sent = load::paced(clients, 2_000.0, Duration::from_millis(1_500), |_| {
        grpc::hit("bounded", "api_key", "k")
    })
    .await;
    load::assert_no_grpc_errors(&sent, "the fixed-window load");
    let admitted = sent.iter().filter(|s| admitted(s)).count();
    assert_eq!(
        admitted,
        LIMIT,
        "{} requests in one window of a limit of {LIMIT}",
        sent.len()
    );
}

/// The sliding window's rule by the oracle of the clients' times (`support::bounded`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_never_go_above_the_sliding_window_rule() {
    let (_dir, service) = serve_limits(&support::bounded::sliding_limits(), &[]);
    support::bounded::assert_never_above_the_sliding_rule(std::slice::from_ref(&service), CLIENTS)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_buckets_of_a_never_above_limit_are_denied_and_still_counted() {
    let limits = "domain: quota\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 60, guarantee: never_above}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 60}\n";
    let (_dir, service) = serve_limits(limits, &[]);
    // Inside one minute, and not in its first seconds: a report just after the boundary
    // counts part of its requests on the previous window (they are taken as spread over the
    // time since the bucket's last report).
    support::stay_in_one_minute(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(
        2_000u64.saturating_sub(support::now_ms() % 60_000),
    ));
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let wait = Duration::from_secs(10);
    // A never_above counter with all its room: no token bucket, a blanket denial.
    let bounded = bucket(&[("api_key", "k")]);
    stream.send_usage("quota", &bounded, 0, 0, 0).await;
    assert_eq!(
        stream.action_for(&bounded, wait).await,
        Assigned::Deny { ttl_s: 10 }
    );
    // A never_below one beside it is shared out as before.
    let shared = bucket(&[("user", "u")]);
    stream.send_usage("quota", &shared, 0, 0, 0).await;
    let assigned = stream.action_for(&shared, wait).await;
    assert!(
        matches!(assigned, Assigned::TokenBucket { .. }),
        "{assigned:?}"
    );
    // What an Envoy admitted on its own anyway (before the denial reached it) still counts:
    // RLS v3 finds the minute's 60 spent.
    stream.send_usage("quota", &bounded, 60, 0, 1).await;
    support::eventually("the three usages counted", true, || {
        support::metrics::count(
            &service.metrics(),
            "rls_rlqs_usages_total",
            &[("outcome", "counted")],
        ) >= 3.0
    });
    let mut rls = grpc::rls_client(service.grpc_addr).await;
    let answer = grpc::should_rate_limit(&mut rls, grpc::hit("quota", "api_key", "k")).await;
    assert_eq!(grpc::overall(&answer), Code::OverLimit, "{answer:?}");
}
