use super::*;
use crate::test_support::FnService;
use std::convert::Infallible;

/// A request answered after `delay`, through `layer`.
async fn answer_after(layer: RequestDeadlineLayer, delay: Duration) -> Result<(), BoxError> {
    let service = FnService(move |_: http::Request<()>| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(())
    });
    layer.layer(service).call(http::Request::new(())).await
}

/// Cut at the server's deadline: answered `CANCELLED`.
fn expired(result: Result<(), BoxError>) -> bool {
    result.is_err_and(|error| error.downcast_ref::<TimeoutExpired>().is_some())
}

/// Cut at the client's deadline: an error that makes hyper reset the stream with `CANCEL`.
fn cancelled(result: Result<(), BoxError>) -> bool {
    result.is_err_and(|error| {
        error
            .downcast_ref::<ClientDeadlineExpired>()
            .is_some_and(|expired| {
                let reset = std::error::Error::source(expired)
                    .and_then(|source| source.downcast_ref::<h2::Error>())
                    .and_then(h2::Error::reason);
                reset == Some(h2::Reason::CANCEL)
            })
    })
}

#[tokio::test(start_paused = true)]
async fn a_request_past_the_deadline_is_cut() {
    let layer = RequestDeadlineLayer::new(Duration::from_secs(1));
    let ms = Duration::from_millis;
    assert!(answer_after(layer, ms(900)).await.is_ok());
    assert!(expired(answer_after(layer, ms(1_100)).await));
}

/// A request with `grpc-timeout: header` answered after `delay`.
async fn answer_with_timeout_after(
    layer: RequestDeadlineLayer,
    header: &'static str,
    delay: Duration,
) -> Result<(), BoxError> {
    let service = FnService(move |_: http::Request<()>| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(())
    });
    let mut request = http::Request::new(());
    request
        .headers_mut()
        .insert(GRPC_TIMEOUT, http::HeaderValue::from_static(header));
    layer.layer(service).call(request).await
}

#[tokio::test(start_paused = true)]
async fn the_clients_shorter_deadline_applies() {
    let layer = RequestDeadlineLayer::new(Duration::from_secs(1));
    let ms = Duration::from_millis;
    assert!(
        answer_with_timeout_after(layer, "20m", ms(15))
            .await
            .is_ok()
    );
    assert!(cancelled(
        answer_with_timeout_after(layer, "20m", ms(25)).await
    ));
    assert!(cancelled(
        answer_with_timeout_after(layer, "20000u", ms(25)).await
    ));
    // A longer one does not extend the server's.
    assert!(expired(
        answer_with_timeout_after(layer, "1M", ms(1_100)).await
    ));
    // A malformed one is ignored: the server's deadline.
    for malformed in ["", "m", "20", "20x", "123456789m", "-5m", "2 m", "20mm"] {
        assert!(
            answer_with_timeout_after(layer, malformed, ms(900))
                .await
                .is_ok(),
            "{malformed:?}"
        );
        assert!(
            expired(answer_with_timeout_after(layer, malformed, ms(1_100)).await),
            "{malformed:?}"
        );
    }
}

#[test]
fn grpc_timeout_units() {
    let parse = |value: &'static str| {
        let mut headers = http::HeaderMap::new();
        headers.insert(GRPC_TIMEOUT, http::HeaderValue::from_static(value));
        client_timeout(&headers)
    };
    assert_eq!(parse("2H"), Some(Duration::from_secs(7_200)));
    assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
    assert_eq!(parse("4S"), Some(Duration::from_secs(4)));
    assert_eq!(parse("5m"), Some(Duration::from_millis(5)));
    assert_eq!(parse("6u"), Some(Duration::from_micros(6)));
    assert_eq!(parse("7n"), Some(Duration::from_nanos(7)));
    assert_eq!(
        parse("99999999H"),
        Some(Duration::from_secs(99_999_999 * 3_600))
    );
    assert_eq!(client_timeout(&http::HeaderMap::new()), None);
}

#[tokio::test(start_paused = true)]
async fn an_answer_ready_at_once_makes_no_timer() {
    let layer = RequestDeadlineLayer::new(Duration::from_secs(1));
    let mut future = Box::pin(
        layer
            .layer(FnService(|_: http::Request<()>| {
                std::future::ready(Ok::<_, Infallible>(()))
            }))
            .call(http::Request::new(())),
    );
    let polled = futures_util::poll!(future.as_mut());
    assert!(matches!(polled, Poll::Ready(Ok(()))));
    assert!(future.sleep.is_none());
}
