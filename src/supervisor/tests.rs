use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A task that runs until its stage is told to stop, as a server or a loop does.
fn run_until_stopped(supervisor: &mut Supervisor, stage: Stage, name: &'static str) {
    let stop = supervisor.stop_signal(stage);
    supervisor.spawn(stage, name, async move {
        stop.cancelled().await;
        Ok(())
    });
}

/// A task that ends `ms` milliseconds after it starts, the way `end` says.
fn ends_after(
    supervisor: &mut Supervisor,
    stage: Stage,
    name: &'static str,
    ms: u64,
    end: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
) {
    supervisor.spawn(stage, name, async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        end()
    });
}

/// Shutdown within a second, with no task failed or aborted.
async fn shuts_down_cleanly(supervisor: Supervisor) {
    let report = supervisor.shutdown(Duration::from_secs(1)).await;
    assert!(
        report.failed.is_empty() && report.aborted.is_empty(),
        "{report:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_ends_or_panics_early_is_reported_by_name() {
    let mut supervisor = Supervisor::new();
    run_until_stopped(&mut supervisor, Stage::Background, "steady");
    ends_after(&mut supervisor, Stage::Background, "panics", 10, || {
        panic!("boom")
    });
    ends_after(&mut supervisor, Stage::Serving, "returns", 20, || {
        anyhow::bail!("listener closed")
    });
    let first = supervisor.next_failure().await;
    assert_eq!((first.name, first.reason.as_str()), ("panics", "panicked"));
    let second = supervisor.next_failure().await;
    assert_eq!(second.name, "returns");
    assert!(second.reason.contains("listener closed"), "{second:?}");
    let next = tokio::time::timeout(Duration::from_secs(60), supervisor.next_failure()).await;
    assert!(next.is_err(), "the steady task is not a failure");
    shuts_down_cleanly(supervisor).await;
}

/// A background task that ends before shutdown fails health (here: a flag standing for
/// it), while one that keeps running does not; shutdown still completes.
#[tokio::test(start_paused = true)]
async fn a_task_that_ends_before_shutdown_fails_health() {
    let mut supervisor = Supervisor::new();
    run_until_stopped(&mut supervisor, Stage::Background, "global counters");
    ends_after(
        &mut supervisor,
        Stage::Background,
        "replay and reaping",
        10,
        || Ok(()),
    );
    let healthy = AtomicBool::new(true);
    let mut failed = Vec::new();
    let shutdown = tokio::time::sleep(Duration::from_secs(1));
    supervisor
        .until(shutdown, |failure| {
            failed.push(failure.name);
            healthy.store(false, Ordering::SeqCst);
            async {}
        })
        .await;
    assert!(!healthy.load(Ordering::SeqCst), "health must fail");
    assert_eq!(failed, vec!["replay and reaping"]);
    shuts_down_cleanly(supervisor).await;
}

/// All tasks running: `until` returns at shutdown and health is untouched.
#[tokio::test(start_paused = true)]
async fn no_task_ends_health_stays() {
    let mut supervisor = Supervisor::new();
    run_until_stopped(&mut supervisor, Stage::Serving, "server");
    let mut failures = 0;
    supervisor
        .until(tokio::time::sleep(Duration::from_secs(1)), |_| {
            failures += 1;
            async {}
        })
        .await;
    assert_eq!(failures, 0);
    shuts_down_cleanly(supervisor).await;
}

#[tokio::test(start_paused = true)]
async fn background_finishes_only_after_serving_drained() {
    let mut supervisor = Supervisor::new();
    let drained = Arc::new(AtomicBool::new(false));
    let (serving_stop, background_stop) = (
        supervisor.stop_signal(Stage::Serving),
        supervisor.stop_signal(Stage::Background),
    );
    let flag = Arc::clone(&drained);
    supervisor.spawn(Stage::Serving, "server", async move {
        serving_stop.cancelled().await;
        // In-flight requests take a while after the stop.
        tokio::time::sleep(Duration::from_millis(300)).await;
        flag.store(true, Ordering::SeqCst);
        Ok(())
    });
    let flag = Arc::clone(&drained);
    supervisor.spawn(Stage::Background, "replay", async move {
        background_stop.cancelled().await;
        anyhow::ensure!(
            flag.load(Ordering::SeqCst),
            "final work started before the drain ended"
        );
        Ok(())
    });
    let report = supervisor.shutdown(Duration::from_secs(5)).await;
    assert!(report.failed.is_empty(), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_drain_is_aborted_at_the_timeout() {
    let mut supervisor = Supervisor::new();
    supervisor.spawn(Stage::Serving, "stuck", std::future::pending());
    run_until_stopped(&mut supervisor, Stage::Background, "replay");
    let started = tokio::time::Instant::now();
    let report = supervisor.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.aborted, vec!["stuck"]);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(started.elapsed() < Duration::from_secs(3));
}
