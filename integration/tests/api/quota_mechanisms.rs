//! The RLQS service's mechanisms through the real binary, each in a test that fails when the
//! mechanism is taken away: the penalty box turns a bucket's assignment to `DENY_ALL`, a
//! report that straddles a window boundary is split by time between the two windows, the
//! stream and report-rate caps refuse, two Envoys of unequal demand get max-min fair
//! shares of one counter, and Envoys joining one counter together are lent its room once.

use gcounter_rls_integration as support;

use std::time::Duration;

use serde_json::Value;
use support::grpc::Code;
use support::quota::{Assigned, QuotaStream, bucket, report, usage};
use support::rls::Rls;
use support::{Service, now_ms, serve_limits};

const WAIT: Duration = Duration::from_secs(10);

/// The counter inspection of `descriptor` (`key%3Dvalue`) in `domain`.
fn inspect(service: &Service, domain: &str, descriptor: &str) -> Value {
    let r = service.debug_get(&format!(
        "/counters?domain={domain}&descriptor={descriptor}"
    ));
    assert_eq!(r.status, 200, "{}", r.body_text());
    serde_json::from_slice(&r.body).expect("JSON")
}

/// The rate (hits a second) a token bucket assignment states.
fn rate(assigned: &Assigned) -> f64 {
    match assigned {
        Assigned::TokenBucket { rate, .. } => *rate,
        other => panic!("a token bucket, not {other:?}"),
    }
}

/// A client past its limit is in the penalty box for 30 s; once its window has rolled over,
/// the window alone would give its RLQS bucket a share again, but the box holds: `DENY_ALL`.
#[tokio::test]
async fn a_counter_in_the_penalty_box_is_denied_to_rlqs() {
    let limits = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 2, penalty: 30s}
";
    let mut rls = Rls::start(limits, &[]).await;
    support::into_fresh_window(Duration::from_secs(1));
    let codes = rls.codes_in_a_row(3, "edge", &[("client", "a")]).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    // Two windows later the sliding window has room again for client a and for b.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let mut stream = QuotaStream::opened(rls.service.grpc_addr).await;
    let a = bucket(&[("client", "a")]);
    let b = bucket(&[("client", "b")]);
    stream.send_usage("edge", &a, 0, 1, 0).await;
    assert_eq!(
        stream.action_for(&a, WAIT).await,
        Assigned::Deny { ttl_s: 10 },
        "the box holds client a"
    );
    stream.send_usage("edge", &b, 1, 0, 0).await;
    assert!(
        matches!(
            stream.action_for(&b, WAIT).await,
            Assigned::TokenBucket { .. }
        ),
        "client b is not in the box"
    );
    let v = inspect(&rls.service, "edge", "client%3Da");
    assert!(
        v["penalty"]["left_ms"]
            .as_u64()
            .is_some_and(|left| left > 20_000),
        "{v}"
    );
}

/// Windows of 10 s. A bucket's first report 6 s into a window, its second 2 s into the next
/// carrying 100 requests: of the 6 s they were spread over, 4 were in the previous window,
/// so about 67 count there and 33 in the current one. Multi-threaded: the waits below block
/// their thread while the stream's tasks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_across_a_window_boundary_is_split_by_time() {
    let (_dir, service) = serve_limits(
        &support::one_rule("quota", "user", "second", 10, 1_000_000),
        &[],
    );
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let alice = bucket(&[("user", "alice")]);
    let window = support::into_fresh_window(Duration::from_secs(10));
    support::sleep_until_ms(window + 6_000);
    stream.send_usage("quota", &alice, 0, 0, 0).await;
    let _ = stream.action_for(&alice, WAIT).await;
    support::sleep_until_ms(window + 12_000);
    let sent = now_ms();
    stream.send_usage("quota", &alice, 100, 0, 6).await;
    assert!(
        sent < window + 12_500,
        "the report left {} ms late: the split is not the one measured",
        sent - window - 12_000
    );
    // Counted once the two cells hold its 100 (an action may already be on its way).
    let counted = |v: &Value| {
        v["previous"]["regional"].as_u64().unwrap_or(0)
            + v["current"]["regional"].as_u64().unwrap_or(0)
    };
    support::eventually("the report counted", 100, || {
        counted(&inspect(&service, "quota", "user%3Dalice"))
    });
    let v = inspect(&service, "quota", "user%3Dalice");
    let previous = v["previous"]["regional"].as_u64().unwrap_or(0);
    assert!(
        (60..=72).contains(&previous),
        "{previous} of 100 on the previous window, about 67 expected: {v}"
    );
}

/// `--rlqs-max-streams 2`: the third stream is refused; `--rlqs-max-reports-per-second 2`
/// (bursts of 4): a stream that sends ten at once is ended, the other streams go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_and_report_rate_caps_refuse() {
    let (_dir, service) = serve_limits(
        &support::one_rule("quota", "user", "minute", 1, 1_000),
        &[
            "--rlqs-max-streams",
            "2",
            "--rlqs-max-reports-per-second",
            "2",
        ],
    );
    let mut first = QuotaStream::opened(service.grpc_addr).await;
    let mut flooding = QuotaStream::opened(service.grpc_addr).await;
    let alice = bucket(&[("user", "alice")]);
    first.send_usage("quota", &alice, 1, 0, 0).await;
    assert!(matches!(
        first.action_for(&alice, WAIT).await,
        Assigned::TokenBucket { .. }
    ));
    let refused = match QuotaStream::open(service.grpc_addr).await {
        Ok(mut third) => third
            .next(WAIT)
            .await
            .expect_err("the third stream refused"),
        Err(status) => status,
    };
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("--rlqs-max-streams"),
        "{refused:?}"
    );

    let bob = bucket(&[("user", "bob")]);
    for _ in 0..10 {
        flooding
            .send(report("quota", vec![usage(&bob, 1, 0, 1)]))
            .await;
    }
    let ended = loop {
        match flooding.next(WAIT).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the flooding stream ended without an error"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::ResourceExhausted, "{ended:?}");
    assert!(
        ended.message().contains("--rlqs-max-reports-per-second"),
        "{ended:?}"
    );
    // The first stream goes on, and the flooding one's place is free again.
    first.send_usage("quota", &alice, 1, 0, 1).await;
    let _ = first.action_for(&alice, WAIT).await;
    support::eventually("the flooding stream's place freed", 1.0, || {
        support::metrics::count(&service.metrics(), "rls_rlqs_streams", &[])
    });
    let mut again = QuotaStream::opened(service.grpc_addr).await;
    again.send_usage("quota", &bob, 1, 0, 0).await;
    assert!(matches!(
        again.action_for(&bob, WAIT).await,
        Assigned::TokenBucket { .. }
    ));
}

/// Two Envoys on one counter (600 a minute: 60 a second to hand out over an empty window):
/// one wanting 100 a second, one 10. Max-min fair: the small one gets all it wants, the
/// large one the rest; an equal split (30 and 30) would refuse the small one nothing but
/// starve the large one of what the small one leaves. The first to report is alone and lent
/// the whole room; once the second joins, that burst is taken back and stays charged until
/// its next report (every 5 s, as Envoy 1.40's) shows what it spent.
#[tokio::test]
async fn two_envoys_of_unequal_demand_share_one_counter_max_min_fair() {
    let (_dir, service) = serve_limits(&support::one_rule("quota", "user", "minute", 1, 600), &[]);
    support::stay_in_one_minute(Duration::from_secs(40));
    let mut big = QuotaStream::opened(service.grpc_addr).await;
    let mut small = QuotaStream::opened(service.grpc_addr).await;
    let hot = bucket(&[("user", "hot")]);
    // Reports of what each let through (none counted: the Envoys denied, so the window
    // stays empty and its whole rate is to share).
    big.send_usage("quota", &hot, 0, 100, 0).await;
    small.send_usage("quota", &hot, 0, 10, 0).await;
    let _ = big.action_for(&hot, WAIT).await;
    let _ = small.action_for(&hot, WAIT).await;
    let every = Duration::from_secs(5);
    big.report_every(every, report("quota", vec![usage(&hot, 0, 500, 5)]));
    small.report_every(every, report("quota", vec![usage(&hot, 0, 50, 5)]));
    // Once the burst is shown, both shares come from both demands.
    let shared = |a: &Assigned, most: f64| matches!(a, Assigned::TokenBucket { rate, .. } if (1.0..most).contains(rate));
    let big_rate = rate(&big.action_until(&hot, 3 * WAIT, |a| shared(a, 55.0)).await);
    let small_rate = rate(
        &small
            .action_until(&hot, 3 * WAIT, |a| shared(a, 15.0))
            .await,
    );
    assert!(
        (8.0..=12.0).contains(&small_rate),
        "the small Envoy gets its 10 a second: {small_rate}"
    );
    assert!(
        (45.0..=55.0).contains(&big_rate),
        "the large one the rest of 60: {big_rate}"
    );
}

/// Four Envoys join one fresh counter (10 a minute) at once, each with one request let
/// through before its first assignment. A new token bucket starts full, so what they may
/// admit before their next reports (5 s) is each bucket's `max_tokens` and its rate over
/// those 5 s: with what they reported, never more than the limit and one request of
/// rounding each (docs/rlqs.md, "Bursts"). Lending each the room it saw, without charging
/// what the others were lent, gives them 9 + 8 + 7 + 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_joining_one_counter_together_stay_within_the_burst_bound() {
    const LIMIT: f64 = 10.0;
    const ENVOYS: usize = 4;
    const REPORT_INTERVAL_S: f64 = 5.0;
    let (_dir, service) = serve_limits(&support::one_rule("quota", "user", "minute", 1, 10), &[]);
    support::stay_in_one_minute(Duration::from_secs(15));
    let hot = bucket(&[("user", "burst")]);
    let mut streams = Vec::new();
    for _ in 0..ENVOYS {
        streams.push(QuotaStream::opened(service.grpc_addr).await);
    }
    for stream in &streams {
        stream.send_usage("quota", &hot, 1, 4, 0).await;
    }
    let mut admissible = ENVOYS as f64;
    let mut assigned = Vec::new();
    for stream in &mut streams {
        let action = stream.action_for(&hot, WAIT).await;
        if let Assigned::TokenBucket {
            rate, max_tokens, ..
        } = action
        {
            admissible += f64::from(max_tokens) + rate * REPORT_INTERVAL_S;
        }
        assigned.push(action);
    }
    println!("{ENVOYS} streams joining: {admissible:.2} admissible, bound {LIMIT} + {ENVOYS}");
    assert!(
        admissible <= LIMIT + ENVOYS as f64,
        "{admissible} admissible before the next reports, over {LIMIT} + {ENVOYS}: {assigned:?}"
    );
    assert!(
        assigned
            .iter()
            .any(|a| matches!(a, Assigned::TokenBucket { max_tokens, .. } if *max_tokens >= 6)),
        "the room is lent at once to one of them: {assigned:?}"
    );
}
