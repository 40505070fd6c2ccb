use super::*;
use std::convert::Infallible;
use std::time::Duration;
use tower::ServiceExt;

type Answered = std::future::Ready<Result<u32, Infallible>>;

/// A service that answers at once.
fn echo() -> tower::util::ServiceFn<fn(u32) -> Answered> {
    tower::service_fn(|n| std::future::ready(Ok(n)))
}

#[tokio::test]
async fn a_permit_is_held_until_the_future_is_dropped() {
    let layer = InflightLimitLayer::new(2);
    let mut a = layer.layer(echo());
    let mut b = layer.layer(echo());
    let first = a.ready().await.map(|s| s.call(1)).ok();
    let second = b.ready().await.map(|s| s.call(2)).ok();
    assert_eq!(layer.available(), 0);

    // A third service waits while both are held.
    let mut c = layer.layer(echo());
    let third = tokio::time::timeout(Duration::from_millis(50), c.ready()).await;
    assert!(third.is_err(), "over the cap, a service is not ready");

    match first {
        Some(first) => assert_eq!(first.await, Ok(1)),
        None => panic!("the first service was ready"),
    }
    // The first answer was consumed: its permit came back.
    let ready = tokio::time::timeout(Duration::from_secs(5), c.ready()).await;
    assert!(ready.is_ok_and(|r| r.is_ok()), "a release wakes the waiter");
    drop(second);
    assert_eq!(layer.available(), 1, "c holds the permit it took");
    drop(c);
    assert_eq!(
        layer.available(),
        2,
        "a service dropped ready gives its permit back"
    );
}

#[tokio::test]
async fn a_dropped_waiter_passes_its_wake_up_on() {
    let layer = InflightLimitLayer::new(1);
    let mut holder = layer.layer(echo());
    let held = holder.ready().await.map(|s| s.call(0)).ok();
    let mut gone = layer.layer(echo());
    let mut stays = layer.layer(echo());
    for service in [&mut gone, &mut stays] {
        let pending = tokio::time::timeout(Duration::from_millis(20), service.ready()).await;
        assert!(pending.is_err());
    }
    drop(gone);
    drop(held);
    let ready = tokio::time::timeout(Duration::from_secs(5), stays.ready()).await;
    assert!(ready.is_ok_and(|r| r.is_ok()));
    assert_eq!(layer.permits.waiting.load(Ordering::SeqCst), 0);
}

/// Many tasks through a cap of 3: never more than 3 inside, and every one answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_under_contention() {
    let layer = InflightLimitLayer::new(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            let service = layer.layer(tower::service_fn(move |()| {
                let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                async move {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(())
                }
            }));
            tokio::spawn(service.oneshot(()))
        })
        .collect();
    for task in tasks {
        assert!(matches!(task.await, Ok(Ok(()))));
    }
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert_eq!(layer.available(), 3);
}
