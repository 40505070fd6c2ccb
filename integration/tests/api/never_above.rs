//! `guarantee: never_above` on one process (the embedded default): many concurrent RLS v3
//! clients on several connections (decisions on every worker thread, on the same cell) never
//! get more admitted than one process deciding alone allows, on fixed and sliding windows;
//! RLQS buckets on such a limit get token buckets only once what they may admit is taken.

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

/// What RLS v3 has left of the bounded counter after one more hit of it.
async fn remaining_after_a_hit(rls: &mut RlsClient) -> u32 {
    let answer = grpc::should_rate_limit(rls, grpc::hit("quota", "api_key", "k")).await;
    answer
        .statuses
        .first()
        .map(|status| status.limit_remaining)
        .unwrap_or_else(|| panic!("no status: {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_buckets_of_a_never_above_limit_take_their_token_bucket_before_it_is_sent() {
    let limits = "domain: quota\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 60, guarantee: never_above}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 60}\n";
    let (_dir, service) = serve_limits(limits, &["--windows", "fixed"]);
    // Inside one minute, with the assignment's 10 s and a delivery left in it, and not in its
    // first seconds: a report just after the boundary counts part of its requests on the
    // previous window (they are taken as spread over the time since the bucket's last report).
    support::stay_in_one_minute(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(
        2_000u64.saturating_sub(support::now_ms() % 60_000),
    ));
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let wait = Duration::from_secs(10);
    // A new bucket with no demand yet: one a second, a token and 10 s of refill (11) taken
    // on the counter before the bucket is sent.
    let bounded = bucket(&[("api_key", "k")]);
    stream.send_usage("quota", &bounded, 0, 0, 0).await;
    let assigned = stream.action_for(&bounded, wait).await;
    assert_eq!(
        assigned,
        Assigned::TokenBucket {
            rate: 1.0,
            max_tokens: 1,
            ttl_s: 10
        }
    );
    let mut rls = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(remaining_after_a_hit(&mut rls).await, 60 - 11 - 1);
    // A never_below one beside it is shared out as before.
    let shared = bucket(&[("user", "u")]);
    stream.send_usage("quota", &shared, 0, 0, 0).await;
    let assigned = stream.action_for(&shared, wait).await;
    assert!(
        matches!(assigned, Assigned::TokenBucket { .. }),
        "{assigned:?}"
    );
    // The Envoy spent what was taken for it: not counted again. Its demand shows now, and
    // the answer is a new token bucket, taken in full (Envoy starts it full) less what the
    // first one can no longer refill once replaced (under 10, at one a second), or a denial;
    // or nothing new, the first bucket running to its end, where the counter has no room for
    // what would replace it.
    stream.send_usage("quota", &bounded, 11, 0, 1).await;
    let answer = tokio::time::timeout(Duration::from_secs(2), stream.action_for(&bounded, wait));
    let taken_again = match answer.await {
        Ok(Assigned::TokenBucket {
            rate,
            max_tokens,
            ttl_s,
        }) => max_tokens + (rate * ttl_s as f64).ceil() as u32,
        Ok(Assigned::Deny { .. }) | Err(_) => 0,
        Ok(other) => panic!("{other:?}"),
    };
    let remaining = i64::from(remaining_after_a_hit(&mut rls).await);
    let in_full = 60 - 11 - i64::from(taken_again) - 2;
    assert!(
        (in_full..in_full + 10).contains(&remaining),
        "{remaining} left, the new bucket taken at {taken_again} in full"
    );
    // What an Envoy admits beyond everything taken for it (on its own, with no assignment)
    // still counts: RLS v3 finds the minute spent.
    stream.send_usage("quota", &bounded, 60, 0, 1).await;
    support::eventually("the four usages counted", true, || {
        support::metrics::count(
            &service.metrics(),
            "rls_rlqs_usages_total",
            &[("outcome", "counted")],
        ) >= 4.0
    });
    let answer = grpc::should_rate_limit(&mut rls, grpc::hit("quota", "api_key", "k")).await;
    assert_eq!(grpc::overall(&answer), Code::OverLimit, "{answer:?}");
}

/// Streams joining one bounded counter at once, each asking for more than its share: what
/// all their token buckets may admit until their assignments end never exceeds the room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_streams_on_one_never_above_counter_are_never_sent_more_than_its_room() {
    const LIMIT: u64 = 100;
    const STREAMS: usize = 6;
    let limits = "domain: quota\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 100, guarantee: never_above}\n";
    let (_dir, service) = serve_limits(limits, &["--windows", "fixed"]);
    support::stay_in_one_minute(Duration::from_secs(20));
    let bounded = bucket(&[("api_key", "k")]);
    let mut streams = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let stream = QuotaStream::opened(service.grpc_addr).await;
        // 50 a second wanted (denied by the filter while it has no assignment).
        stream.send_usage("quota", &bounded, 0, 50, 1).await;
        streams.push(stream);
    }
    let mut most = 0.0;
    let mut buckets = 0;
    for stream in &mut streams {
        match stream.action_for(&bounded, Duration::from_secs(10)).await {
            Assigned::TokenBucket {
                rate,
                max_tokens,
                ttl_s,
            } => {
                buckets += 1;
                most += f64::from(max_tokens) + (rate * ttl_s as f64).ceil();
            }
            Assigned::Deny { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    println!("{buckets} of {STREAMS} streams sent a token bucket; together they may admit {most}");
    assert!(buckets >= 1, "no stream got a token bucket");
    assert!(
        most <= LIMIT as f64,
        "the token buckets sent may admit {most} on a limit of {LIMIT}"
    );
}
