//! The RLQS service (`StreamRateLimitQuotas`) of the real binary, spoken to as Envoy's
//! `rate_limit_quota` filter speaks: reports counted on the counters RLS v3 decides on, token
//! bucket assignments, the unmatched answer, hostile streams refused without disturbing the
//! others, idle buckets abandoned, and assignments expired at once on shutdown.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{Code, should_rate_limit};
use support::quota::{Assigned, QuotaStream, bucket, report, usage};
use support::{metrics, serve_limits};

const LIMITS: &str = "
domain: quota
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: free
    rate_limit: {unlimited: true}
";

const WAIT: Duration = Duration::from_secs(10);

fn usages(text: &str, outcome: &str) -> f64 {
    metrics::count(text, "rls_rlqs_usages_total", &[("outcome", outcome)])
}

#[tokio::test]
async fn reports_count_on_the_counter_rls_decides_on() {
    let (_dir, service) = serve_limits(LIMITS, &[]);
    support::stay_in_one_minute(Duration::from_secs(10));
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let alice = bucket(&[("user", "alice")]);
    stream.send_usage("quota", &alice, 1, 0, 0).await;
    match stream.action_for(&alice, WAIT).await {
        Assigned::TokenBucket { rate, ttl_s, .. } => {
            assert!(rate > 0.0, "a share of the limit: {rate}");
            assert_eq!(ttl_s, 10, "the default --rlqs-assignment-ttl");
        }
        other => panic!("a first report gets a token bucket, not {other:?}"),
    }
    // counter inspection shows the stream's demand and share (the rate beyond its burst:
    // alone on the counter, the bucket was lent the whole room at once, so next to none)
    let inspected = service.debug_get("/counters?domain=quota&descriptor=user%3Dalice");
    let body: serde_json::Value = serde_json::from_slice(&inspected.body).expect("JSON");
    let shares = body["rlqs"].as_array().expect("an rlqs list");
    assert_eq!(shares.len(), 1, "{body}");
    assert!(
        shares[0]["demand_per_second"]
            .as_f64()
            .is_some_and(|d| d > 0.0),
        "{body}"
    );
    assert!(
        shares[0]["share_per_second"]
            .as_f64()
            .is_some_and(|s| s >= 0.0),
        "{body}"
    );
    // A second later, as Envoy reports, it let 59 more through: the minute's limit of 60 is
    // spent for RLS v3 as well.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stream.send_usage("quota", &alice, 59, 0, 1).await;
    let deny = stream
        .action_until(&alice, WAIT, |a| matches!(a, Assigned::Deny { .. }))
        .await;
    assert_eq!(deny, Assigned::Deny { ttl_s: 10 });
    let mut rls = support::grpc::rls_client(service.grpc_addr).await;
    let answer = should_rate_limit(&mut rls, support::grpc::hit("quota", "user", "alice")).await;
    assert_eq!(support::grpc::overall(&answer), Code::OverLimit);
    // another user's counter is untouched
    let answer = should_rate_limit(&mut rls, support::grpc::hit("quota", "user", "bob")).await;
    assert_eq!(support::grpc::overall(&answer), Code::Ok);
    assert_eq!(usages(&service.metrics(), "counted"), 2.0);
}

#[tokio::test]
async fn rls_traffic_leaves_the_quota_nothing() {
    let (_dir, service) = serve_limits(LIMITS, &[]);
    support::stay_in_one_minute(Duration::from_secs(10));
    let mut rls = support::grpc::rls_client(service.grpc_addr).await;
    for _ in 0..60 {
        should_rate_limit(&mut rls, support::grpc::hit("quota", "user", "carol")).await;
    }
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let carol = bucket(&[("user", "carol")]);
    stream.send_usage("quota", &carol, 0, 1, 0).await;
    assert_eq!(
        stream.action_for(&carol, WAIT).await,
        Assigned::Deny { ttl_s: 10 }
    );
}

#[tokio::test]
async fn unmatched_and_unlimited_buckets_get_blanket_rules() {
    let (_dir, service) = serve_limits(LIMITS, &[]);
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let free = bucket(&[("free", "x")]);
    let unknown = bucket(&[("nobody", "x")]);
    stream
        .send(report(
            "quota",
            vec![usage(&free, 5, 0, 0), usage(&unknown, 5, 0, 0)],
        ))
        .await;
    assert_eq!(
        stream.action_for(&free, WAIT).await,
        Assigned::Allow { ttl_s: 10 }
    );
    let (_dir, strict) = serve_limits(LIMITS, &["--rlqs-unmatched", "deny-all"]);
    let mut stream = QuotaStream::opened(strict.grpc_addr).await;
    stream.send_usage("quota", &unknown, 5, 0, 0).await;
    assert_eq!(
        stream.action_for(&unknown, WAIT).await,
        Assigned::Deny { ttl_s: 10 }
    );
    assert_eq!(usages(&strict.metrics(), "not_counted"), 1.0);
}

/// Sends `bad` on a fresh stream and returns the status that ends it.
async fn refused(
    service: &support::Service,
    bad: Vec<envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports>,
) -> tonic::Status {
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    for report in bad {
        stream.send(report).await;
    }
    loop {
        match stream.next(WAIT).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => return status,
        }
    }
}

// Multi-threaded: `eventually` blocks its thread while the streams' tasks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_streams_are_refused_and_others_go_on() {
    let (_dir, service) = serve_limits(LIMITS, &["--rlqs-max-buckets-per-stream", "2"]);
    let mut good = QuotaStream::opened(service.grpc_addr).await;
    let dave = bucket(&[("user", "dave")]);
    good.send_usage("quota", &dave, 1, 0, 0).await;
    assert!(matches!(
        good.action_for(&dave, WAIT).await,
        Assigned::TokenBucket { .. }
    ));

    let status = refused(&service, vec![report("", vec![usage(&dave, 1, 0, 0)])]).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("domain"), "{}", status.message());
    let status = refused(
        &service,
        vec![
            report("quota", vec![usage(&dave, 1, 0, 0)]),
            report("other", vec![usage(&dave, 1, 0, 0)]),
        ],
    )
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("one domain"),
        "{}",
        status.message()
    );
    let status = refused(
        &service,
        vec![report("quota", vec![usage(&bucket(&[]), 1, 0, 0)])],
    )
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let three = vec![
        usage(&bucket(&[("user", "a")]), 1, 0, 0),
        usage(&bucket(&[("user", "b")]), 1, 0, 0),
        usage(&bucket(&[("user", "c")]), 1, 0, 0),
    ];
    let status = refused(&service, vec![report("quota", three)]).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("at most 2"),
        "{}",
        status.message()
    );

    // the first stream and the one whose domain changed counted dave once each
    assert_eq!(usages(&service.metrics(), "counted"), 2.0);
    // absurd counts are set aside, the stream goes on
    good.send_usage("quota", &dave, u64::MAX, 0, 1).await;
    good.send_usage("quota", &dave, 1, 0, -5).await;
    support::eventually("two usages ignored", 2.0, || {
        usages(&service.metrics(), "ignored")
    });
    good.send_usage("quota", &dave, 1, 0, 1).await;
    support::eventually("the good stream still counted", 3.0, || {
        usages(&service.metrics(), "counted")
    });
    assert_eq!(
        metrics::count(
            &service.metrics(),
            "rls_rlqs_stream_errors_total",
            &[("reason", "invalid_argument")]
        ),
        4.0
    );
}

#[tokio::test]
async fn idle_buckets_are_abandoned_and_shutdown_expires_every_assignment() {
    let (_dir, mut service) = serve_limits(
        LIMITS,
        &[
            "--rlqs-abandon-after",
            "1s",
            "--rlqs-reassign-interval",
            "200ms",
        ],
    );
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let idle = bucket(&[("user", "idle")]);
    stream.send_usage("quota", &idle, 0, 0, 0).await;
    let abandoned = stream
        .action_until(&idle, WAIT, |a| *a == Assigned::Abandon)
        .await;
    assert_eq!(abandoned, Assigned::Abandon);

    let busy = bucket(&[("user", "busy")]);
    stream.send_usage("quota", &busy, 1, 0, 0).await;
    assert!(matches!(
        stream.action_for(&busy, WAIT).await,
        Assigned::TokenBucket { .. }
    ));
    service.send_signal("TERM");
    let expired = stream
        .action_until(&busy, WAIT, |a| {
            matches!(
                a,
                Assigned::TokenBucket { ttl_s: 0, .. } | Assigned::Allow { ttl_s: 0 }
            )
        })
        .await;
    assert!(
        matches!(expired, Assigned::TokenBucket { ttl_s: 0, .. }),
        "{expired:?}"
    );
    // As Envoy ends its side once the server has ended the call.
    drop(stream);
    assert!(
        service.wait_exit(WAIT).is_some(),
        "the process exits after SIGTERM"
    );
}

// Multi-threaded: `eventually` blocks its thread while the stream's task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_past_the_cap_are_counted_but_not_held() {
    let (_dir, service) = serve_limits(LIMITS, &["--rlqs-max-buckets-per-stream", "2"]);
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    for user in ["a", "b"] {
        let id = bucket(&[("user", user)]);
        stream.send_usage("quota", &id, 1, 0, 0).await;
        assert!(matches!(
            stream.action_for(&id, WAIT).await,
            Assigned::TokenBucket { .. }
        ));
    }
    // a third bucket: counted on its counter, no assignment, not held
    let third = bucket(&[("user", "c")]);
    stream.send_usage("quota", &third, 60, 0, 0).await;
    support::eventually("the third bucket over capacity", 1.0, || {
        usages(&service.metrics(), "over_capacity")
    });
    let metrics = service.metrics();
    assert_eq!(metrics::count(&metrics, "rls_rlqs_buckets", &[]), 2.0);
    let mut rls = support::grpc::rls_client(service.grpc_addr).await;
    let answer = should_rate_limit(&mut rls, support::grpc::hit("quota", "user", "c")).await;
    assert_eq!(
        support::grpc::overall(&answer),
        Code::OverLimit,
        "its 60 were counted"
    );
}
