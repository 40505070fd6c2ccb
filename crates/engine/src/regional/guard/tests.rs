use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

#[derive(Clone, Copy, Debug)]
enum Act {
    Answer(u64),
    Fail,
    Hang(Duration),
    Garbage,
    /// One `Unavailable`, then answers with the number.
    FailOnce(u64),
}

/// Does what it is told and counts the calls that reached it.
struct Scripted {
    act: Mutex<Act>,
    calls: AtomicUsize,
}

impl Scripted {
    fn new(act: Act) -> Arc<Self> {
        Arc::new(Self {
            act: Mutex::new(act),
            calls: AtomicUsize::new(0),
        })
    }

    fn set(&self, act: Act) {
        *self.act.lock().unwrap_or_else(|e| e.into_inner()) = act;
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn run<T: Send + 'static>(
        &self,
        value: impl FnOnce(u64) -> T + Send + 'static,
    ) -> OriginFuture<'_, T> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let act = {
            let mut act = self.act.lock().unwrap_or_else(|e| e.into_inner());
            let now = *act;
            if let Act::FailOnce(n) = now {
                *act = Act::Answer(n);
                Act::Fail
            } else {
                now
            }
        };
        Box::pin(async move {
            match act {
                Act::Answer(n) => Ok(value(n)),
                Act::Fail => Err(OriginError::Unavailable("scripted".into())),
                Act::Hang(d) => {
                    tokio::time::sleep(d).await;
                    Ok(value(0))
                }
                Act::Garbage => Err(OriginError::InvalidValue("scripted".into())),
                Act::FailOnce(n) => Ok(value(n)),
            }
        })
    }
}

impl RegionalOrigin for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn read<'a>(&'a self, _key: &'a CellKey) -> OriginFuture<'a, CellRead> {
        self.run(|n| CellRead {
            total: PnCount::hits(n),
            own: PnCount::default(),
        })
    }

    fn replay<'a>(&'a self, batch: &'a [(CellKey, PnCount)]) -> OriginFuture<'a, Vec<PnCount>> {
        let len = batch.len();
        self.run(move |n| vec![PnCount::hits(n); len])
    }
}

fn key() -> CellKey {
    CellKey {
        scope: crate::cell_key::Scope::new("d", "1:k/"),
        identifier: "1:v".into(),
        duration_ms: 1_000,
        sequence: 1,
    }
}

fn guarded(act: Act) -> (Arc<Scripted>, GuardedOrigin<Scripted>) {
    let inner = Scripted::new(act);
    let guard = GuardedOrigin::new(Arc::clone(&inner), GuardSettings::default());
    (inner, guard)
}

/// `times` reads, each of which must fail as `expected` says.
async fn failed_reads(
    guard: &GuardedOrigin<Scripted>,
    times: usize,
    expected: fn(&OriginError) -> bool,
) {
    for _ in 0..times {
        let read = guard.read(&key()).await;
        assert!(read.as_ref().is_err_and(expected), "{read:?}");
    }
}

/// A guard over an origin that answers after `hang`, its circuit opened by the default
/// five reads timing out.
async fn opened_by_timeouts(hang: Duration) -> (Arc<Scripted>, GuardedOrigin<Scripted>) {
    let (inner, guard) = guarded(Act::Hang(hang));
    failed_reads(&guard, 5, |e| matches!(e, OriginError::Timeout(_))).await;
    assert_eq!(guard.circuit_state(), CircuitState::Open);
    (inner, guard)
}

/// Opens the circuit with the default five failures.
async fn trip(inner: &Scripted, guard: &GuardedOrigin<Scripted>) {
    inner.set(Act::Fail);
    failed_reads(guard, 5, |e| matches!(e, OriginError::Unavailable(_))).await;
    assert_eq!(guard.circuit_state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn slow_calls_time_out() {
    let (_inner, guard) = guarded(Act::Hang(Duration::from_secs(5)));
    let start = Instant::now();
    let read = guard.read(&key()).await;
    assert!(matches!(read, Err(OriginError::Timeout(d)) if d == Duration::from_millis(50)));
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert!(start.elapsed() < Duration::from_millis(60));

    let start = Instant::now();
    let replay = guard.replay(&[(key(), PnCount::hits(1))]).await;
    assert!(matches!(replay, Err(OriginError::Timeout(d)) if d == Duration::from_secs(1)));
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert!(start.elapsed() < Duration::from_millis(1_010));
}

#[tokio::test(start_paused = true)]
async fn answers_pass_through() {
    let (_inner, guard) = guarded(Act::Answer(7));
    assert_eq!(guard.read(&key()).await.ok().map(|r| r.total.hits), Some(7));
    assert_eq!(
        guard
            .replay(&[(key(), PnCount::hits(1)), (key(), PnCount::hits(2))])
            .await
            .ok(),
        Some(vec![PnCount::hits(7); 2])
    );
    assert_eq!(guard.name(), "scripted");
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn n_consecutive_failures_open_the_circuit_and_calls_then_fail_fast() {
    let (inner, guard) = guarded(Act::Fail);
    failed_reads(&guard, 4, |_| true).await;
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
    assert!(guard.replay(&[(key(), PnCount::hits(1))]).await.is_err());
    assert_eq!(guard.circuit_state(), CircuitState::Open);
    assert_eq!(inner.calls(), 5);

    inner.set(Act::Answer(1));
    for _ in 0..20 {
        assert!(matches!(
            guard.read(&key()).await,
            Err(OriginError::CircuitOpen)
        ));
        assert!(matches!(
            guard.replay(&[(key(), PnCount::hits(1))]).await,
            Err(OriginError::CircuitOpen)
        ));
    }
    assert_eq!(inner.calls(), 5, "no call reached the origin while open");
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_failure_count() {
    let (inner, guard) = guarded(Act::Fail);
    failed_reads(&guard, 4, |_| true).await;
    inner.set(Act::Answer(1));
    assert!(guard.read(&key()).await.is_ok());
    inner.set(Act::Fail);
    failed_reads(&guard, 4, |_| true).await;
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn timeouts_count_as_failures() {
    let (inner, _guard) = opened_by_timeouts(Duration::from_secs(5)).await;
    assert_eq!(inner.calls(), 5);
}

#[tokio::test(start_paused = true)]
async fn invalid_values_do_not_open_the_circuit() {
    let (inner, guard) = guarded(Act::Garbage);
    failed_reads(&guard, 20, |e| matches!(e, OriginError::InvalidValue(_))).await;
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
    assert_eq!(inner.calls(), 20);
}

#[tokio::test(start_paused = true)]
async fn half_open_lets_one_probe_through_and_its_success_closes() {
    let (inner, guard) = guarded(Act::Fail);
    trip(&inner, &guard).await;
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(guard.circuit_state(), CircuitState::Open);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(guard.circuit_state(), CircuitState::HalfOpen);

    // The probe is slow; a call arriving meanwhile fails fast instead of piling on.
    inner.set(Act::Hang(Duration::from_millis(10)));
    let probe_key = key();
    let (probe, other) = tokio::join!(guard.read(&probe_key), async {
        tokio::task::yield_now().await;
        guard.read(&key()).await
    });
    assert_eq!(probe.ok().map(|r| r.total.hits), Some(0));
    assert!(matches!(other, Err(OriginError::CircuitOpen)));
    assert_eq!(inner.calls(), 6, "only the probe reached the origin");
    assert_eq!(guard.circuit_state(), CircuitState::Closed);

    // Recovered: calls flow, and it takes a fresh run of failures to open again.
    inner.set(Act::Answer(3));
    for _ in 0..10 {
        assert_eq!(guard.read(&key()).await.ok().map(|r| r.total.hits), Some(3));
    }
    inner.set(Act::Fail);
    failed_reads(&guard, 4, |_| true).await;
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_longer_up_to_the_cap() {
    let (inner, guard) = guarded(Act::Fail);
    trip(&inner, &guard).await;
    // Cool-downs double from 1 s and stop at 10 s.
    for cooldown_ms in [1_000, 2_000, 4_000, 8_000, 10_000, 10_000] {
        tokio::time::advance(Duration::from_millis(cooldown_ms - 1)).await;
        assert_eq!(
            guard.circuit_state(),
            CircuitState::Open,
            "{cooldown_ms} ms"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            guard.circuit_state(),
            CircuitState::HalfOpen,
            "{cooldown_ms} ms"
        );
        let before = inner.calls();
        assert!(matches!(
            guard.read(&key()).await,
            Err(OriginError::Unavailable(_))
        ));
        // A probe that fails at once is tried a second time, right away.
        assert_eq!(inner.calls(), before + 2, "one probe per cool-down");
        assert_eq!(guard.circuit_state(), CircuitState::Open);
    }
    // Once the cause is gone, the next probe closes the circuit.
    tokio::time::advance(Duration::from_secs(10)).await;
    inner.set(Act::Answer(1));
    assert_eq!(guard.read(&key()).await.ok().map(|r| r.total.hits), Some(1));
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_the_probe_slot() {
    let (inner, guard) = guarded(Act::Fail);
    trip(&inner, &guard).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    inner.set(Act::Hang(Duration::from_secs(60)));
    // The caller gives up on the probe before the guard's own timeout.
    let gave_up = tokio::time::timeout(Duration::from_millis(10), guard.read(&key())).await;
    assert!(gave_up.is_err());
    assert_eq!(guard.circuit_state(), CircuitState::HalfOpen);
    inner.set(Act::Answer(2));
    assert_eq!(guard.read(&key()).await.ok().map(|r| r.total.hits), Some(2));
    assert_eq!(guard.circuit_state(), CircuitState::Closed);
}

/// Redis slowed to 200 ms answers every replay within its 1 s timeout.
/// Those slow successes must not close the circuit, or every cold read pays the 50 ms read
/// timeout for the whole slow period.
#[tokio::test(start_paused = true)]
async fn slow_successes_keep_the_circuit_open_for_reads() {
    let (inner, guard) = opened_by_timeouts(Duration::from_millis(200)).await;
    let mut read_attempts = 0;
    for _ in 0..100 {
        tokio::time::advance(Duration::from_millis(100)).await;
        // The replay loop: each replay answers, slowly.
        let replay = guard.replay(&[(key(), PnCount::hits(1))]).await;
        assert!(
            matches!(replay, Ok(_) | Err(OriginError::CircuitOpen)),
            "{replay:?}"
        );
        let before = inner.calls();
        let _ = guard.read(&key()).await;
        read_attempts += inner.calls() - before;
    }
    assert_ne!(
        guard.circuit_state(),
        CircuitState::Closed,
        "slow answers must not close the circuit"
    );
    assert!(
        read_attempts <= 2,
        "cold reads must not wait on a slow origin: {read_attempts} reached it in 10 s"
    );
}

/// After an outage the origin answers again, but the first call on it
/// fails at once (the connection to reopen). The circuit must close within one cool-down
/// (the README's cap, 10 s) of the origin's return, not after a second one.
#[tokio::test(start_paused = true)]
async fn recovery_takes_at_most_one_capped_cool_down() {
    let (inner, guard) = guarded(Act::Fail);
    trip(&inner, &guard).await;
    // A long outage: the cool-down reaches its 10 s cap.
    for _ in 0..6 {
        tokio::time::advance(Duration::from_secs(10)).await;
        let _ = guard.read(&key()).await;
    }
    assert_eq!(guard.circuit_state(), CircuitState::Open);
    // The origin is back; its next answer is a dropped connection, then it works.
    let back = Instant::now();
    inner.set(Act::FailOnce(3));
    let closed_at = loop {
        tokio::time::advance(Duration::from_millis(100)).await;
        let _ = guard.read(&key()).await;
        if guard.circuit_state() == CircuitState::Closed {
            break back.elapsed();
        }
        assert!(back.elapsed() < Duration::from_secs(60), "never closed");
    };
    assert!(
        closed_at <= Duration::from_millis(10_100),
        "closed {closed_at:?} after the origin came back; the README promises at most 10 s"
    );
}

/// SIGTERM soon after an outage: the origin answers again but the circuit is still open.
/// The final replay must reach it anyway, or the last accepted counts are lost.
#[tokio::test(start_paused = true)]
async fn the_final_replay_goes_through_an_open_circuit() {
    let (inner, guard) = guarded(Act::Fail);
    trip(&inner, &guard).await;
    inner.set(Act::Answer(9));
    assert!(matches!(
        guard.replay(&[(key(), PnCount::hits(1))]).await,
        Err(OriginError::CircuitOpen)
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    let last = guard
        .replay_final(&[(key(), PnCount::hits(1))], deadline)
        .await;
    assert_eq!(last.ok(), Some(vec![PnCount::hits(9)]));
    assert_eq!(guard.circuit_state(), CircuitState::Closed);

    // A dead origin: the final replay gives up at its deadline, not later.
    inner.set(Act::Hang(Duration::from_secs(60)));
    let started = Instant::now();
    let deadline = started + Duration::from_millis(300);
    assert!(
        guard
            .replay_final(&[(key(), PnCount::hits(1))], deadline)
            .await
            .is_err()
    );
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn wraps_a_dyn_origin() {
    let inner: Arc<dyn RegionalOrigin> = Scripted::new(Act::Answer(4));
    let guard: Arc<dyn RegionalOrigin> =
        Arc::new(GuardedOrigin::new(inner, GuardSettings::default()));
    assert_eq!(guard.read(&key()).await.ok().map(|r| r.total.hits), Some(4));
}
