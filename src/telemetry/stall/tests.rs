use super::*;

/// The stall histogram's samples: (all of them, those later than 16 ms).
fn samples(metrics: &Metrics) -> (u64, u64) {
    let text = metrics.encode();
    let bucket = |le: &str| -> u64 {
        let prefix = format!("rls_runtime_stall_seconds_bucket{{le=\"{le}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|count| count.split_whitespace().next())
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("no bucket {le} in\n{text}"))
    };
    let all = bucket("+Inf");
    (all, all - bucket("0.016"))
}

/// A runtime thread held past the probe's deadline shows as one late sample; the
/// following ones are on time again. Paused time: the clock only moves when told.
#[tokio::test(start_paused = true)]
async fn a_held_thread_is_recorded_as_one_late_wake_up() {
    let metrics = Arc::new(Metrics::new());
    let probe = tokio::spawn(probe(Duration::from_millis(10), Arc::clone(&metrics)));
    // wake-ups at 0, 10 and 20 ms, on time
    tokio::time::sleep(Duration::from_millis(25)).await;
    assert_eq!(samples(&metrics), (3, 0));
    // the deadline at 30 ms passes while the probe cannot run: the clock jumps 40 ms
    // within this task's turn, as a 40 ms turn would
    tokio::time::advance(Duration::from_millis(40)).await;
    tokio::task::yield_now().await;
    assert_eq!(samples(&metrics), (4, 1));
    // then on time again, from the late wake-up on (no burst of catch-up ticks)
    tokio::time::sleep(Duration::from_millis(31)).await;
    assert_eq!(samples(&metrics), (7, 1));
    probe.abort();
}

#[test]
fn an_early_wake_up_is_not_late() {
    let now = Instant::now();
    assert_eq!(
        lateness(now + Duration::from_millis(1), now),
        Duration::ZERO
    );
    assert_eq!(
        lateness(now, now + Duration::from_millis(3)),
        Duration::from_millis(3)
    );
}
