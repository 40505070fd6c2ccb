//! Hot reload of the limits config while the service runs: a valid change takes effect
//! within seconds, an invalid one is rejected, counted, and the running config stays.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::Service;
use support::grpc::{self, RlsClient, descriptor, limit_of, request};

/// Debounce (250 ms) plus a loaded 2-core machine.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);
/// The descriptor `limits` limits: reload/k=v.
const RELOAD: (&str, &[(&str, &str)]) = ("reload", &[("k", "v")]);

fn limits(requests_per_unit: u32) -> String {
    format!(
        "domain: reload
descriptors:
  - key: k
    value: v
    rate_limit:
      unit: minute
      requests_per_unit: {requests_per_unit}
"
    )
}

/// Polls `probe` until it returns `want`, for at most [`RELOAD_TIMEOUT`]; the last value.
async fn wait_for<T, F, Fut>(want: T, mut probe: F) -> Result<Duration, T>
where
    T: PartialEq,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let start = Instant::now();
    loop {
        let got = probe().await;
        if got == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= RELOAD_TIMEOUT {
            return Err(got);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn a_valid_change_applies_and_an_invalid_one_keeps_the_running_config() {
    let (_dir, path) = support::limits_file(&limits(2));
    let service = Service::start(&path, &[]);
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client.clone(), RELOAD.0, RELOAD.1).await, Some(2));
    assert_eq!(
        service.config_reloads("ok"),
        1.0,
        "the initial load counts as one"
    );

    support::replace_file(&path, &limits(5));
    service
        .await_limit(
            &client,
            RELOAD,
            Some(5),
            RELOAD_TIMEOUT,
            "the file changed to 5",
        )
        .await;
    assert!(
        service.rlconfig().contains("requests_per_unit=5"),
        "{}",
        service.rlconfig()
    );
    assert!(service.config_reloads("ok") >= 2.0, "{}", service.metrics());

    // The new limit is enforced, not only reported.
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(3));
    let codes = accepted_calls(client.clone(), 6).await;
    assert_eq!(
        codes,
        [true, true, true, true, true, false],
        "accepted per call under limit 5"
    );

    // Invalid YAML: rejected, counted, the running config (5) stays and is served.
    support::replace_file(
        &path,
        "domain: reload\ndescriptors:\n  - key: k\n    rate_limit: [\n",
    );
    if let Err(last) = wait_for(true, || async { service.config_reloads("error") >= 1.0 }).await {
        panic!(
            "no rejected reload counted ({last}) {RELOAD_TIMEOUT:?} after writing invalid YAML\n{}\n--- service log ---\n{}",
            service.metrics(),
            service.log_tail(30)
        );
    }
    assert_eq!(limit_of(client.clone(), RELOAD.0, RELOAD.1).await, Some(5));
    assert!(
        service.rlconfig().contains("requests_per_unit=5"),
        "{}",
        service.rlconfig()
    );
    let health = service.admin_get("/healthz");
    assert_eq!(health.status, 200, "{}", health.body_text());

    // A valid config afterwards is picked up again: the watcher survived the bad one.
    support::replace_file(&path, &limits(9));
    let after = "a valid config followed an invalid one";
    service
        .await_limit(&client, RELOAD, Some(9), RELOAD_TIMEOUT, after)
        .await;
}

/// `n` consuming calls on reload/k=v: whether each was accepted.
async fn accepted_calls(mut client: RlsClient, n: usize) -> Vec<bool> {
    let mut accepted = Vec::with_capacity(n);
    for _ in 0..n {
        let r = grpc::should_rate_limit(
            &mut client,
            request("reload", vec![descriptor(&[("k", "v")])]),
        )
        .await;
        accepted.push(r.overall_code == grpc::Code::Ok as i32);
    }
    accepted
}

#[tokio::test]
async fn a_file_added_to_a_config_directory_serves_its_domain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| support::replace_file(&dir.path().join(name), text);
    write(
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    let service = Service::start(dir.path(), &[]);
    let client = grpc::rls_client(service.grpc_addr).await;
    assert_eq!(limit_of(client.clone(), "b", &[("k", "x")]).await, None);

    write(
        "b.yaml",
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n",
    );
    let b = ("b", &[("k", "x")][..]);
    service
        .await_limit(&client, b, Some(7), RELOAD_TIMEOUT, "b.yaml appeared")
        .await;
    assert_eq!(limit_of(client.clone(), "a", &[("k", "x")]).await, Some(1));

    // Removing the file removes its domain.
    std::fs::remove_file(dir.path().join("b.yaml")).expect("remove b.yaml");
    service
        .await_limit(&client, b, None, RELOAD_TIMEOUT, "b.yaml was removed")
        .await;
}

/// Reading the config (a user's `cat`, the service's own reload) is not a change: it must not
/// reload, or each reload's read would trigger the next, forever. The watcher logs each batch
/// of reads it refuses (at debug): the test waits for that line after its own reads, so it
/// knows the watcher saw them, and then finds no reload counted.
#[tokio::test]
async fn reading_the_config_does_not_reload_it() {
    const REFUSED: &str = "config read, not reloading";
    let (_dir, path) = support::limits_file(&limits(2));
    let service = Service::start(&path, &["--log-level", "info,gcounter_rls::config=debug"]);
    let refused = || {
        std::fs::read_to_string(&service.log_path)
            .unwrap_or_default()
            .matches(REFUSED)
            .count()
    };
    // One real change first: its reload reads the file, which must not chain into more.
    support::replace_file(&path, &limits(3));
    let client = grpc::rls_client(service.grpc_addr).await;
    service
        .await_limit(&client, RELOAD, Some(3), RELOAD_TIMEOUT, "the change to 3")
        .await;
    // The reload's own read, refused.
    service.wait_until(RELOAD_TIMEOUT, "the reload's own read refused", || {
        (refused() >= 1)
            .then_some(())
            .ok_or_else(|| "no refusal logged".to_owned())
    });
    let after_change = service.config_reloads("ok");
    let refused_before = refused();
    for _ in 0..5 {
        std::fs::read_to_string(&path).expect("read the limits file");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    service.wait_until(RELOAD_TIMEOUT, "the test's reads refused", || {
        (refused() > refused_before)
            .then_some(())
            .ok_or_else(|| format!("{} refusals logged", refused()))
    });
    service.assert_eq_logged(
        "reads of the file reloaded the config",
        service.config_reloads("ok"),
        after_change,
    );
}

/// Thirty saves in quick succession while requests flow: the last one ends up running,
/// no reload fails (no half-written file is read), and no request fails meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_edits_under_load_ends_with_the_last_and_fails_no_request() {
    const EDITS: u32 = 30;
    // Far above what the load sends in a minute, so every answer is OK whatever runs.
    const BASE: u32 = 10_000;
    let (_dir, path) = support::limits_file(&limits(BASE));
    let service = Service::start(&path, &[]);
    let client = grpc::rls_client(service.grpc_addr).await;
    let load = support::load::in_background(&service, 100.0, Duration::from_secs(4), |_| {
        request(RELOAD.0, vec![descriptor(RELOAD.1)])
    })
    .await;
    for n in 1..=EDITS {
        support::replace_file(&path, &limits(BASE + n));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    service
        .await_limit(
            &client,
            RELOAD,
            Some(BASE + EDITS),
            RELOAD_TIMEOUT,
            "the last of the edits",
        )
        .await;
    let sent = load.await.expect("the load task");
    support::load::assert_no_grpc_errors(&sent, "requests during the edits");
    let over: Vec<_> = sent
        .iter()
        .filter_map(|s| s.first_status())
        .filter(|status| status.code != grpc::Code::Ok as i32)
        .collect();
    assert!(over.is_empty(), "answers other than OK: {over:?}");
    service.assert_eq_logged("a reload failed", service.config_reloads("error"), 0.0);
    assert!(
        service.config_reloads("ok") >= 2.0,
        "the edits were reloaded"
    );
}

/// A `*.yaml` with no end (a symlink to /dev/zero) or that blocks on open (a FIFO) appears in a
/// config directory: the reload is refused at once, naming the file, without reading without
/// end or blocking the reload task; the running config stays, later changes still apply, and
/// SIGTERM still stops the process.
#[tokio::test]
async fn a_config_file_with_no_end_or_a_fifo_is_refused_and_the_service_still_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("limits.yaml");
    support::replace_file(&path, &limits(2));
    let mut service = Service::start(dir.path(), &["--max-config-bytes", "1000000"]);
    let client = grpc::rls_client(service.grpc_addr).await;
    let rss_before = service.rss_kib();

    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).expect("symlink");
    if let Err(last) = wait_for(true, || async { service.config_reloads("error") >= 1.0 }).await {
        panic!(
            "no rejected reload counted ({last}) after zero.yaml appeared\n--- service log ---\n{}",
            service.log_tail(30)
        );
    }
    assert!(
        service
            .log_tail(30)
            .contains("not a regular file (a character device)"),
        "the rejection names the problem\n{}",
        service.log_tail(30)
    );
    std::fs::remove_file(dir.path().join("zero.yaml")).expect("remove zero.yaml");

    let fifo = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.as_ref().is_ok_and(|s| s.success()), "mkfifo: {made:?}");
    if let Err(last) = wait_for(true, || async { service.config_reloads("error") >= 2.0 }).await {
        panic!(
            "no rejected reload counted ({last}) after fifo.yaml appeared: is the reload task \
             blocked on the FIFO?\n--- service log ---\n{}",
            service.log_tail(30)
        );
    }
    assert_eq!(limit_of(client.clone(), RELOAD.0, RELOAD.1).await, Some(2));
    std::fs::remove_file(&fifo).expect("remove fifo.yaml");

    // The reload task is alive: a valid change still applies.
    support::replace_file(&path, &limits(4));
    let after = "a valid change followed the refused files";
    service
        .await_limit(&client, RELOAD, Some(4), RELOAD_TIMEOUT, after)
        .await;
    let grown = service.rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB while refusing the files"
    );

    // A bigger file than --max-config-bytes is refused too, naming the setting.
    support::replace_file(
        &dir.path().join("big.yaml"),
        &format!("# {}\n", "x".repeat(1_000_000)),
    );
    if let Err(last) = wait_for(true, || async { service.config_reloads("error") >= 3.0 }).await {
        panic!("no rejected reload counted ({last}) for a file over --max-config-bytes");
    }
    assert!(
        service.log_tail(30).contains("--max-config-bytes"),
        "{}",
        service.log_tail(30)
    );

    service.terminate_cleanly(Duration::from_secs(15));
}
