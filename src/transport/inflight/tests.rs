use super::*;
use crate::test_support::FnService;
use std::convert::Infallible;
use std::time::Duration;

type Answered = std::future::Ready<Result<u32, Infallible>>;

/// A service that answers at once, counting its calls in `called`.
fn echo(called: &Arc<AtomicUsize>) -> FnService<impl Fn(u32) -> Answered + Clone> {
    let called = Arc::clone(called);
    FnService(move |n| {
        called.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(n))
    })
}

fn answered(result: Result<u32, BoxError>) -> Option<u32> {
    result.ok()
}

#[tokio::test]
async fn a_permit_is_held_until_the_future_is_dropped() {
    let layer = InflightLimitLayer::new(2);
    let called = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo(&called));
    let first = service.call(1);
    let second = service.call(2);
    assert_eq!(layer.available(), 0);
    assert_eq!(called.load(Ordering::SeqCst), 2);

    // A third request waits while both are held, its service not called.
    let mut third = Box::pin(service.call(3));
    let waited = tokio::time::timeout(Duration::from_millis(50), &mut third).await;
    assert!(waited.is_err(), "over the cap, a request waits");
    assert_eq!(
        called.load(Ordering::SeqCst),
        2,
        "nor is its service called"
    );

    assert_eq!(answered(first.await), Some(1));
    // The first answer was consumed: its permit came back.
    let woken = tokio::time::timeout(Duration::from_secs(5), &mut third).await;
    assert_eq!(
        woken.ok().and_then(answered),
        Some(3),
        "a release wakes the waiter"
    );
    drop(second);
    assert_eq!(
        layer.available(),
        1,
        "the third future holds the permit it took"
    );
    drop(third);
    assert_eq!(
        layer.available(),
        2,
        "an answered future gives its permit back when dropped"
    );
    assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_dropped_waiter_passes_its_wake_up_on() {
    let layer = InflightLimitLayer::new(1);
    let called = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo(&called));
    let held = service.call(0);
    let mut gone = Box::pin(service.call(1));
    let mut stays = Box::pin(service.call(2));
    for waiting in [&mut gone, &mut stays] {
        let pending = tokio::time::timeout(Duration::from_millis(20), waiting).await;
        assert!(pending.is_err());
    }
    assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 2);
    drop(gone);
    drop(held);
    let woken = tokio::time::timeout(Duration::from_secs(5), stays).await;
    assert_eq!(woken.ok().and_then(answered), Some(2));
    assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 0);
    assert_eq!(layer.available(), 1);
}

/// Many tasks through a cap of 3: never more than 3 inside, and every one answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_under_contention() {
    let layer = InflightLimitLayer::new(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let service = {
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        layer.layer(FnService(move |()| {
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            async move {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        }))
    };
    let tasks: Vec<_> = (0..64).map(|_| tokio::spawn(service.call(()))).collect();
    for task in tasks {
        assert!(matches!(task.await, Ok(Ok(()))));
    }
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert_eq!(layer.available(), 3);
    assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 0);
}
