//! `--workers 1` (a current-thread runtime, the fastest on one core): the process serves
//! gRPC and the admin port side by side, counts concurrent requests exactly, and stops
//! cleanly on SIGTERM.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{self, Code, hit};
use support::rls::Rls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_counts_concurrent_requests_exactly_and_stops_cleanly() {
    const LIMIT: u64 = 20;
    const SENT: usize = 60;
    let rule = support::one_rule("one", "user", "day", 1, LIMIT);
    let mut rls = Rls::start(&rule, &["--workers", "1"]).await;
    support::avoid_window_boundary(Duration::from_secs(86_400), Duration::from_secs(60));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..SENT {
        let mut client = rls.client.clone();
        calls.spawn(
            async move { grpc::should_rate_limit(&mut client, hit("one", "user", "u")).await },
        );
    }
    let health = tokio::task::spawn_blocking({
        let addr = rls.service.http_addr;
        move || support::http_get(addr, "/healthz", &[])
    });
    let mut admitted = 0;
    while let Some(call) = calls.join_next().await {
        let response = call.expect("a call task");
        if response.overall_code == Code::Ok as i32 {
            admitted += 1;
        } else {
            assert_eq!(
                response.overall_code,
                Code::OverLimit as i32,
                "{response:?}"
            );
        }
    }
    assert_eq!(
        admitted, LIMIT,
        "{SENT} concurrent requests on a limit of {LIMIT}"
    );
    let health = health
        .await
        .expect("the /healthz task")
        .expect("/healthz answers during the requests");
    assert_eq!(health.status, 200);
    let over = rls.one("one", &[("user", "u")]).await;
    assert_eq!(grpc::code(&over), Code::OverLimit);
    rls.service.terminate_cleanly(Duration::from_secs(10));
}
