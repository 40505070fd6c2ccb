//! One hostile client against the real binary's transport: memory stays bounded under an HTTP/2
//! slow-loris, silent connections are closed and capped, the accept loop does not spin on
//! EMFILE, and undecodable bodies are refused and counted. Sizes are reduced from
//! `scripts/abuse.py`'s; the mechanisms are the same.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use gcounter_loadtest::abuse::{self, SlowLoris, SlowLorisReport};
use support::Launch;
use support::Service;
use support::grpc::{self, Code, descriptor, request};
use support::metrics::{requests, sample};
use support::process::{accepted_on, cpu_ticks, open_fds, rss_kib};
use support::raw_grpc::{self, framed};

const YAML: &str = "\
domain: abuse
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
";

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

async fn legit_call(service: &Service, i: usize) -> Result<(), String> {
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let key = format!("legit-{i}");
    match client
        .should_rate_limit(request("abuse", vec![descriptor(&[("k", &key)])]))
        .await
    {
        Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => Ok(()),
        Ok(r) => Err(format!("call {i}: {:?}", r.into_inner())),
        Err(status) => Err(format!("call {i}: {status:?}")),
    }
}

/// 4 connections × 50 streams, each announcing 1 MB and sending 0.9 MB, then a byte a second.
/// Without a bound on buffered bytes each stream would buffer its message (about 180 MB here,
/// 2 GB at `scripts/abuse.py`'s sizes); with a 16 MiB budget of buffered request bytes the
/// service's RSS must stay within 80 MiB of where it started, and legitimate calls and /healthz
/// must keep answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_keeps_memory_bounded_and_calls_answered() {
    let (_dir, mut service) = support::serve_limits(
        YAML,
        &[
            "--max-request-bytes",
            "1048576",
            "--max-buffered-request-bytes",
            "16777216",
            "--request-timeout",
            "3s",
        ],
    );
    let pid = service.pid();
    // One call first, so the baseline includes a warm gRPC path.
    legit_call(&service, 0).await.expect("a first call");
    let baseline = rss_kib(pid).expect("the service's RSS");

    // Rounds of 8 s until the attack has pushed over 100 MB (fewer bytes would not tell a
    // bounded server from an unbounded one): a quiet machine does it in one round, one loaded
    // by builds has pushed as little as 70 MB in 8 s. At most 40 s.
    let target = service.grpc_addr;
    let attack = tokio::spawn(async move {
        let mut total = SlowLorisReport::default();
        let until = Instant::now() + Duration::from_secs(40);
        while total.bytes_sent <= 100 << 20 && Instant::now() < until {
            let round = abuse::slow_loris(SlowLoris {
                target,
                path: abuse::SHOULD_RATE_LIMIT.into(),
                connections: 4,
                streams_per_connection: 50,
                announce_bytes: 1_000_000,
                send_bytes: 900_000,
                trickle_every: Duration::from_secs(1),
                duration: Duration::from_secs(8),
            })
            .await;
            total.add(&round);
        }
        total
    });
    let mut peak = baseline;
    let mut failures = Vec::new();
    let mut calls = 0;
    let started = Instant::now();
    while !attack.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(rss_kib(pid).expect("the service's RSS"));
        if calls < started.elapsed().as_secs() as usize * 2 {
            calls += 1;
            if let Err(failure) = legit_call(&service, calls).await {
                failures.push(failure);
            }
            let health = service.admin_get("/healthz");
            assert_eq!(health.status, 200, "/healthz during the slow-loris");
        }
    }
    let report = attack.await.expect("the slow-loris task");
    let growth_mib = (peak.saturating_sub(baseline)) / 1024;
    eprintln!("slow-loris: {report:?}; RSS {baseline} KiB -> peak {peak} KiB (+{growth_mib} MiB)");
    assert!(
        report.bytes_sent > 100 << 20,
        "the attack must have pushed real bytes: {report:?}"
    );
    assert!(
        growth_mib < 80,
        "RSS grew by {growth_mib} MiB under the slow-loris (bound 80 MiB): {report:?}\n{}",
        service.log_tail(20)
    );
    assert!(calls >= 4, "only {calls} legitimate calls were made");
    assert!(
        failures.is_empty(),
        "legitimate calls failed during the slow-loris: {failures:?}"
    );
    assert!(service.is_running(), "{}", service.log_tail(30));
}

/// Waits until the service holds `cap` connections accepted on its listener at `port` (it
/// took what it would of `flood`), asserting at every look that it never holds more than
/// `cap` of them, nor more than `cap` descriptors over `before` (and 2 of its runtime's own).
async fn assert_connections_capped(pid: u32, port: u16, before: usize, cap: usize, flood: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let accepted = accepted_on(pid, port).expect("the service's sockets");
        let fds = open_fds(pid).expect("the service's fds");
        assert!(
            accepted <= cap && fds <= before + cap + 2,
            "{flood}: {accepted} connections accepted, {} descriptors taken (cap {cap})",
            fds.saturating_sub(before)
        );
        if accepted == cap {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{flood}: the service accepted only {accepted} of its {cap} connections within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Silent TCP connections. With `--max-connections 8` and a 1 s preface deadline,
/// 40 connections that never send a byte cost at most 8 descriptors, are closed after the
/// deadline, and neither /healthz nor a new gRPC call is shut out. Without the cap and the
/// deadline every one would be accepted and held forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_capped_and_closed() {
    let (_dir, mut service) =
        support::serve_limits(YAML, &["--max-connections", "8", "--preface-timeout", "1s"]);
    let pid = service.pid();
    let before = open_fds(pid).expect("the service's fds");

    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(
            tokio::net::TcpStream::connect(service.grpc_addr)
                .await
                .expect("connect (the kernel backlog accepts)"),
        );
    }
    assert_connections_capped(
        pid,
        service.grpc_addr.port(),
        before,
        8,
        "40 silent connections",
    )
    .await;
    let health = service.admin_get("/healthz");
    assert_eq!(health.status, 200, "/healthz during the idle flood");

    // Accepted ones are closed after the deadline: some connection sees EOF.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut closed = 0;
    while closed == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for stream in &idle {
            let mut buf = [0u8; 256];
            // SETTINGS from the server are fine; EOF or a reset means closed.
            while let Ok(n) = stream.try_read(&mut buf) {
                if n == 0 {
                    closed += 1;
                    break;
                }
            }
        }
    }
    assert!(closed > 0, "no silent connection was closed within 5 s");
    let text = service.metrics();
    let open = sample(&text, "rls_connections_open", &[("listener", "grpc")]);
    assert!(
        open.is_some_and(|n| n <= 8.0),
        "open gRPC connections: {open:?}"
    );
    let timeouts = sample(
        &text,
        "rls_connections_preface_timeouts_total",
        &[("listener", "grpc")],
    );
    assert!(
        timeouts.is_some_and(|n| n >= 1.0),
        "preface timeouts: {timeouts:?}"
    );

    // A real client gets through while the flood is still connected (it waits its turn).
    legit_call(&service, 1)
        .await
        .expect("a new gRPC call during the idle flood");
    let health = service.admin_get("/healthz");
    assert_eq!(health.status, 200);
    assert!(service.is_running(), "{}", service.log_tail(30));
    drop(idle);
}

/// The accept loop at the open-files limit (64 descriptors, a cap of 1,000): accept fails
/// with EMFILE. A loop that retried at once would spin silently at 100 % CPU; this one backs
/// off, says so in the log, and serves again once descriptors free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emfile_backs_off_logs_and_recovers() {
    let (dir, path) = support::limits_file(YAML);
    let mut service = Service::start_with(
        &path,
        &["--max-connections", "1000", "--preface-timeout", "30s"],
        Launch {
            nofile: Some(64),
            ..Launch::default()
        },
    );
    let pid = service.pid();
    let mut flood = Vec::new();
    for _ in 0..120 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(service.grpc_addr),
        )
        .await
        {
            flood.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ticks = cpu_ticks(pid).expect("the service's CPU time");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_ticks(pid).expect("the service's CPU time") - ticks;
    assert!(
        spent < 40,
        "the service used {spent} ticks (1/100 s) of CPU in 2 s while out of descriptors"
    );
    let log = service.log_tail(40);
    assert!(
        log.contains("accept failed"),
        "EMFILE should be logged\n--- service log ---\n{log}"
    );
    assert!(
        log.matches("accept failed").count() <= 4,
        "accept errors should be rate-limited\n--- service log ---\n{log}"
    );

    drop(flood);
    legit_call(&service, 1)
        .await
        .expect("a gRPC call once descriptors are free");
    assert_eq!(service.admin_get("/healthz").status, 200);
    let text = service.metrics();
    let errors = sample(&text, "rls_accept_errors_total", &[("listener", "grpc")]);
    assert!(
        errors.is_some_and(|n| n >= 1.0),
        "accept errors: {errors:?}"
    );
    assert!(service.is_running(), "{}", service.log_tail(30));
    drop(dir);
}

/// A body that is not a RateLimitRequest is INVALID_ARGUMENT and counted; a
/// message over --max-request-bytes is RESOURCE_EXHAUSTED (grpc-go's answer) and counted.
#[tokio::test]
async fn undecodable_and_oversized_bodies_are_refused_and_counted() {
    let (_dir, mut service) = support::serve_limits(YAML, &["--max-request-bytes", "65536"]);

    // 0xff is field 31 with wire type 7, which does not exist.
    let (code, message) =
        raw_grpc::call(service.grpc_addr, SHOULD_RATE_LIMIT, framed(4, &[0xff; 4])).await;
    assert_eq!(code, tonic::Code::InvalidArgument as i32, "{message}");
    assert!(message.contains("decode"), "{message}");

    let (code, message) = raw_grpc::call(
        service.grpc_addr,
        SHOULD_RATE_LIMIT,
        framed(1 << 20, &[0u8; 16]),
    )
    .await;
    assert_eq!(code, tonic::Code::ResourceExhausted as i32, "{message}");

    let text = service.metrics();
    assert_eq!(requests(&text, "invalid_argument"), Some(1.0), "{text}");
    assert_eq!(requests(&text, "resource_exhausted"), Some(1.0), "{text}");
    legit_call(&service, 1).await.expect("still serving");
    assert!(service.is_running(), "{}", service.log_tail(30));
}

/// The admin port is bounded the same way: with `--max-admin-connections 4` and a 1 s
/// header deadline, 12 connections that send half a request head cost at most 4
/// descriptors and are closed; /healthz answers once they are. Served by `axum::serve`
/// (no timer), each would be held until the client left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_half_requests_are_capped_and_timed_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_dir, mut service) = support::serve_limits(
        YAML,
        &[
            "--max-admin-connections",
            "4",
            "--admin-header-timeout",
            "1s",
        ],
    );
    let pid = service.pid();
    let before = open_fds(pid).expect("the service's fds");
    let mut partial = Vec::new();
    for _ in 0..12 {
        let mut stream = tokio::net::TcpStream::connect(service.http_addr)
            .await
            .expect("connect (the kernel backlog accepts)");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("half a request head");
        partial.push(stream);
    }
    assert_connections_capped(pid, service.http_addr.port(), before, 4, "12 half requests").await;
    // The first four are closed after the 1 s header deadline.
    let mut first = partial.remove(0);
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), first.read(&mut buf))
        .await
        .expect("the server ends a half request within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // /healthz gets through while the rest take their turn (3 rounds of 1 s at most).
    let health = tokio::task::spawn_blocking({
        let addr = service.http_addr;
        move || support::http_get(addr, "/healthz", &[])
    })
    .await
    .expect("the /healthz task")
    .expect("/healthz answers");
    assert_eq!(health.status, 200);
    assert!(service.is_running(), "{}", service.log_tail(30));
    drop(partial);
}
