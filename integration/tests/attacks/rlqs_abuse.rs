//! Hostile RLQS clients against the real binary, each beside well-behaved clients that must
//! not notice: streams that only announce messages (the request-bytes budget), a report on a
//! counter thousands of buckets share (a report's cost), buckets with the largest ids and a
//! stream that stops reading (RLQS memory). Sizes are `scripts/abuse.py`'s, scaled down.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use gcounter_loadtest::abuse::{self, SHOULD_RATE_LIMIT, SlowLoris, SlowLorisReport};
use gcounter_loadtest::quota_abuse::{self, QuotaFlood, STREAM_RATE_LIMIT_QUOTAS};
use support::grpc::{self, Code, descriptor, request};
use support::metrics::{count, sample};
use support::process::cpu_ticks;
use support::quota::{Assigned, QuotaStream, bucket};
use support::{Service, serve_limits};

const YAML: &str = "\
domain: abuse
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
";

const WAIT: Duration = Duration::from_secs(10);

/// `calls` ShouldRateLimit calls on one connection, each with a 2 s deadline; the ones that
/// did not answer OK.
async fn rls_calls(service: &Service, calls: usize, tag: &str) -> Vec<String> {
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let mut failures = Vec::new();
    for i in 0..calls {
        let key = format!("{tag}-{i}");
        let mut call = tonic::Request::new(request("abuse", vec![descriptor(&[("k", &key)])]));
        call.set_timeout(Duration::from_secs(2));
        match client.should_rate_limit(call).await {
            Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => {}
            Ok(r) => failures.push(format!("call {i}: {:?}", r.into_inner())),
            Err(status) => failures.push(format!("call {i}: {status:?}")),
        }
    }
    failures
}

/// Runs `attack` on a thread and runtime of its own: building large reports takes a debug
/// build's CPU, which must not delay the test's own well-behaved client.
fn on_own_thread<F>(attack: F) -> std::thread::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the attack")
            .block_on(attack)
    })
}

/// A well-behaved RLQS stream's first assignment for a fresh bucket.
async fn rlqs_assignment(service: &Service, user: &str) -> Assigned {
    let mut stream = QuotaStream::opened(service.grpc_addr).await;
    let id = bucket(&[("k", user)]);
    stream.send_usage("abuse", &id, 1, 0, 0).await;
    stream.action_for(&id, WAIT).await
}

fn held_request_bytes(service: &Service) -> f64 {
    sample(
        &service.metrics(),
        "rls_memory_bytes",
        &[("pool", "request_bytes")],
    )
    .unwrap_or(f64::NAN)
}

/// 1,280 RLQS streams on 16 connections (and 160 ShouldRateLimit streams besides) each send a
/// 5-byte prefix announcing a message (the largest allowed, 4 KiB, 200 bytes or 1) and nothing
/// more: 200 MB announced against an 8 MiB budget. When the budget charged announcements, every ShouldRateLimit
/// call was then refused with RESOURCE_EXHAUSTED for as long as the streams stayed open.
/// Now an announcement holds the bytes that arrived, and a message not whole within
/// --request-timeout is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announcements_cannot_pin_the_request_budget() {
    let (_dir, service) = serve_limits(
        YAML,
        &[
            "--max-buffered-request-bytes",
            "8MiB",
            "--request-timeout",
            "3s",
            "--max-concurrent-streams",
            "80",
        ],
    );
    let target = service.grpc_addr;
    let announce = |path: &str, connections: usize, bytes: u32| SlowLoris {
        target,
        path: path.to_owned(),
        connections,
        streams_per_connection: 80,
        announce_bytes: bytes,
        send_bytes: 0,
        trickle_every: Duration::from_secs(3_600),
        duration: Duration::from_secs(8),
    };
    let quota = tokio::spawn(abuse::slow_loris(announce(
        STREAM_RATE_LIMIT_QUOTAS,
        8,
        256 << 10,
    )));
    // Small announcements too, down to a few bytes: a budget that kept a reserve for small
    // messages saw it filled by them.
    let small = tokio::spawn(abuse::slow_loris(announce(
        STREAM_RATE_LIMIT_QUOTAS,
        4,
        4 << 10,
    )));
    let smaller = tokio::spawn(abuse::slow_loris(announce(
        STREAM_RATE_LIMIT_QUOTAS,
        2,
        200,
    )));
    let tiny = tokio::spawn(abuse::slow_loris(announce(STREAM_RATE_LIMIT_QUOTAS, 2, 1)));
    let unary = tokio::spawn(abuse::slow_loris(announce(SHOULD_RATE_LIMIT, 2, 256 << 10)));
    // The streams open and announce; calls go on beside them, 25 a second for 5 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut failures = Vec::new();
    for round in 0..25 {
        failures.extend(rls_calls(&service, 5, &format!("pinned-{round}")).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        failures.is_empty(),
        "{} of 125 calls refused while streams announced, the first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        matches!(
            rlqs_assignment(&service, "good").await,
            Assigned::TokenBucket { .. }
        ),
        "a well-behaved RLQS stream still gets its assignment"
    );
    let held = held_request_bytes(&service);
    assert!(
        held < (1 << 20) as f64,
        "{held} bytes held for announcements"
    );

    let mut quota: SlowLorisReport = quota.await.expect("the RLQS attack");
    quota.add(&small.await.expect("the small announcements"));
    quota.add(&smaller.await.expect("the smaller announcements"));
    quota.add(&tiny.await.expect("the tiny announcements"));
    let unary: SlowLorisReport = unary.await.expect("the unary attack");
    eprintln!("RLQS announcements {quota:?}; ShouldRateLimit announcements {unary:?}");
    assert!(
        quota.streams_opened >= 700,
        "the attack must hold its streams: {quota:?}"
    );
    // Each announcing stream is cut at --request-timeout and opened again.
    assert!(
        quota.streams_ended_by_server >= 700,
        "streams whose message never came are cut: {quota:?}"
    );
    let ended = sample(
        &service.metrics(),
        "rls_rlqs_stream_errors_total",
        &[("reason", "message_deadline")],
    )
    .unwrap_or(0.0);
    assert!(
        ended >= 700.0,
        "{ended} RLQS streams ended for a late message"
    );
    support::eventually("nothing held once the attack is over", 0.0, || {
        held_request_bytes(&service)
    });
}

/// Streams that send real bytes of messages they never finish, on ShouldRateLimit and on
/// RLQS, hold at most each connection's share and each pool: a ShouldRateLimit call split
/// over frames still passes while RLQS streams hold their whole pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_messages_take_a_share_not_the_budget() {
    let (_dir, service) = serve_limits(
        YAML,
        &[
            "--max-buffered-request-bytes",
            "8MiB",
            "--request-timeout",
            "4s",
        ],
    );
    let target = service.grpc_addr;
    let loris = SlowLoris {
        target,
        path: STREAM_RATE_LIMIT_QUOTAS.to_owned(),
        connections: 12,
        streams_per_connection: 50,
        announce_bytes: 256 << 10,
        send_bytes: 200 << 10,
        trickle_every: Duration::from_secs(1),
        duration: Duration::from_secs(8),
    };
    let attack = tokio::spawn(abuse::slow_loris(loris));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = held_request_bytes(&service);
    assert!(
        held <= (4 << 20) as f64,
        "RLQS streams hold {held} bytes, more than their half of the budget"
    );
    // A call whose message spans several frames (tonic splits at 16 KiB).
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let big = request(
        "abuse",
        (0..8)
            .map(|i| grpc::big_override(&format!("split-{i}"), 4, 1_000))
            .collect(),
    );
    let answer = client.should_rate_limit(big).await;
    assert!(
        answer.is_ok(),
        "a split call refused while RLQS streams held their pool: {answer:?}"
    );
    let failures = rls_calls(&service, 20, "partial").await;
    assert!(failures.is_empty(), "{failures:?}");
    let report = attack.await.expect("the attack");
    eprintln!("RLQS partial messages {report:?}");
    assert!(
        report.bytes_sent > 8 << 20,
        "the attack must send more than the budget: {report:?}"
    );
}

/// Two streams of 5,000 buckets each on one `share_threshold` wildcard (one counter, one group
/// of 10,000), then reports naming 2,500 buckets at a time. When every usage computed its
/// group's split again, a report of k usages cost O(k × 10,000): seconds of CPU each, and
/// RLS v3 calls beside it missed their deadlines. Now a usage costs the same whatever its
/// group's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_costs_its_usages_not_its_groups_size() {
    let (_dir, service) = serve_limits(YAML, &[]);
    let pid = service.pid();
    let before = cpu_ticks(pid).expect("the service's CPU time");
    let flood = QuotaFlood {
        target: service.grpc_addr,
        streams: 2,
        buckets: 5_000,
        usages_per_report: 2_500,
        reports: 8,
        domain: "abuse".into(),
        key: "path".into(),
        value_prefix: "/api/".into(),
        id_bytes: 0,
        max_report_bytes: 200_000,
        no_read: false,
        duration: Duration::from_secs(90),
    };
    let started = Instant::now();
    let attack = on_own_thread(quota_abuse::quota_flood(flood));
    let mut failures = Vec::new();
    let mut calls = 0;
    while !attack.is_finished() {
        failures.extend(rls_calls(&service, 5, &format!("group-{calls}")).await);
        calls += 5;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Once every report is counted the flood only holds its streams open.
        let counted = sample(
            &service.metrics(),
            "rls_rlqs_usages_total",
            &[("outcome", "counted")],
        );
        if counted.is_some_and(|n| n >= 2.0 * (5_000.0 + 8.0 * 2_500.0)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the reports were not all counted within a minute"
        );
    }
    let cpu_s = (cpu_ticks(pid).expect("CPU time") - before) as f64 / 100.0;
    eprintln!(
        "50,000 usages on one group of 10,000 in {:?}: {cpu_s} s of the service's CPU, \
         {calls} RLS v3 calls beside",
        started.elapsed()
    );
    assert!(failures.is_empty(), "RLS v3 calls failed: {failures:?}");
    // About 1 s in a debug build; computing the split per usage took minutes.
    assert!(
        cpu_s < 15.0,
        "{cpu_s} s of CPU for 50,000 usages: a usage's cost grows with its group"
    );
    assert_eq!(count(&service.metrics(), "rls_rlqs_buckets", &[]), 10_000.0);
    drop(attack);
}

/// Buckets whose ids are as large as the server allows (16 KiB) stop at
/// --rlqs-max-bucket-bytes, not only at a count; and a stream that stops reading its
/// responses is let go after --rlqs-abandon-after, its buckets with it. When buckets were
/// capped by count alone, each of these held 64–75 KiB, and a stream that stopped reading
/// kept its buckets forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_memory_is_bounded_in_bytes_and_a_silent_stream_is_let_go() {
    let (_dir, service) = serve_limits(
        YAML,
        &[
            "--rlqs-max-bucket-bytes",
            "4MiB",
            "--rlqs-abandon-after",
            "2s",
        ],
    );
    let flood = |no_read: bool, buckets: usize, seconds: u64| QuotaFlood {
        target: service.grpc_addr,
        streams: 1,
        buckets,
        usages_per_report: 100,
        reports: 0,
        domain: "abuse".into(),
        key: "k".into(),
        value_prefix: "large-".into(),
        id_bytes: 16_000,
        max_report_bytes: 200_000,
        no_read,
        duration: Duration::from_secs(seconds),
    };
    // A reading stream: 600 buckets of 16 KB ids, 9.6 MB of ids against a 4 MiB cap.
    let reading = tokio::spawn(quota_abuse::quota_flood(flood(false, 600, 6)));
    support::eventually("the buckets past the bytes cap set aside", true, || {
        sample(
            &service.metrics(),
            "rls_rlqs_usages_total",
            &[("outcome", "over_capacity")],
        )
        .is_some_and(|n| n > 0.0)
    });
    let text = service.metrics();
    let held = count(&text, "rls_rlqs_buckets", &[]);
    let bytes = sample(&text, "rls_memory_bytes", &[("pool", "rlqs_buckets")]).unwrap_or(0.0);
    eprintln!("held {held} buckets of 16 KB ids in {bytes} bytes");
    assert!(
        bytes <= (4 << 20) as f64,
        "{bytes} bytes over the 4 MiB cap"
    );
    assert!(
        (150.0..=260.0).contains(&held),
        "{held} buckets of 16 KB held under 4 MiB"
    );
    let report = reading.await.expect("the reading flood");
    assert_eq!(report.failed, 0, "{report:?}");
    support::eventually("the reading stream's buckets left with it", 0.0, || {
        count(&service.metrics(), "rls_rlqs_buckets", &[])
    });

    // A stream that never reads: its responses fill its window, its task waits, and after
    // --rlqs-abandon-after the server lets it go while the client still holds it open.
    let silent = tokio::spawn(quota_abuse::quota_flood(flood(true, 60, 30)));
    support::eventually("the silent stream's buckets held", true, || {
        count(&service.metrics(), "rls_rlqs_buckets", &[]) > 0.0
    });
    support::eventually("the silent stream let go", Some(1.0), || {
        sample(
            &service.metrics(),
            "rls_rlqs_stream_errors_total",
            &[("reason", "stalled")],
        )
    });
    support::eventually("its buckets and its place gone", (0.0, 0.0), || {
        let text = service.metrics();
        (
            count(&text, "rls_rlqs_buckets", &[]),
            count(&text, "rls_rlqs_streams", &[]),
        )
    });
    assert!(!silent.is_finished(), "the client still holds its stream");
    silent.abort();
    assert!(matches!(
        rlqs_assignment(&service, "after").await,
        Assigned::TokenBucket { .. }
    ));
}
