use super::*;
use http_body_util::BodyExt;
use tonic::body::Body;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A body that sent `sent` bytes of a message announcing 256 KiB and waits for the rest.
fn begun(sent: usize) -> Body {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(256u32 << 10).to_be_bytes());
    frame.extend(vec![1u8; sent]);
    let first = futures_util::stream::iter([Ok::<_, Status>(http_body::Frame::data(
        bytes::Bytes::from(frame),
    ))]);
    Body::new(http_body_util::StreamBody::new(
        first.chain(futures_util::stream::pending()),
    ))
}

/// Polls `body` until it asks for more (`Ok`) or is refused (`Err`).
async fn feed(body: &mut BudgetedBody<Body>) -> Result<(), Status> {
    match tokio::time::timeout(std::time::Duration::from_millis(20), body.frame()).await {
        Err(_) => Ok(()),
        Ok(Some(Err(status))) => Err(status),
        Ok(other) => panic!("a partial message was handed on: {other:?}"),
    }
}

use futures_util::StreamExt;

#[tokio::test]
async fn one_connection_holds_at_most_its_share() {
    // 16 MiB: 8 for calls, a connection's share 1 MiB.
    let server = BodyBudgetLayer::new(16 << 20, 256 << 10, TIMEOUT);
    let greedy = server.for_connection();
    let mut held = Vec::new();
    let refusal = loop {
        let mut body = greedy.wrap(begun(200 << 10), Class::Calls);
        match feed(&mut body).await {
            Ok(()) => held.push(body),
            Err(status) => break status,
        }
        assert!(held.len() < 100, "no share stopped the connection");
    };
    assert_eq!(refusal.code(), tonic::Code::ResourceExhausted);
    assert!(refusal.message().contains("share"), "{refusal:?}");
    let share = (8usize << 20) / CONNECTION_SHARE;
    assert!(server.buffered().held() <= share as u64);

    // Another connection still gets its own.
    let other = server.for_connection();
    let mut body = other.wrap(begun(200 << 10), Class::Calls);
    feed(&mut body).await.expect("another connection's share");
    drop(held);
    drop(body);
    assert_eq!(server.buffered().held(), 0);
}

#[tokio::test]
async fn long_lived_streams_cannot_spend_what_calls_need() {
    let server =
        BodyBudgetLayer::new(4 << 20, 256 << 10, TIMEOUT).with_stream_paths(&["/streams.Service/"]);
    // Many connections of streams, each within its share, spend the streams' pool.
    let mut held = Vec::new();
    let refusal = loop {
        let connection = server.for_connection();
        let mut body = connection.wrap(begun(200 << 10), Class::Streams);
        match feed(&mut body).await {
            Ok(()) => held.push(body),
            Err(status) => break status,
        }
        assert!(held.len() < 100, "no pool stopped the streams");
    };
    assert!(refusal.message().contains("--max-buffered-request-bytes"));
    // Calls take from their own half.
    let mut call = server.for_connection().wrap(begun(200 << 10), Class::Calls);
    feed(&mut call).await.expect("the calls' pool is untouched");
}

#[test]
fn calls_are_classed_by_their_path() {
    let server =
        BodyBudgetLayer::new(4 << 20, 256 << 10, TIMEOUT).with_stream_paths(&["/streams.Service/"]);
    assert_eq!(
        server.pools.class_of("/streams.Service/Stream"),
        Class::Streams
    );
    assert_eq!(server.pools.class_of("/calls.Service/Call"), Class::Calls);
}

#[tokio::test]
async fn the_metric_reads_what_bodies_hold() {
    let server = BodyBudgetLayer::new(1 << 20, 256 << 10, TIMEOUT);
    let buffered = server.buffered();
    assert_eq!(buffered.budget(), 1 << 20);
    let mut body = server.for_connection().wrap(begun(1_000), Class::Calls);
    feed(&mut body).await.expect("within the budget");
    assert!(buffered.held() >= 1_005);
    drop(body);
    assert_eq!(buffered.held(), 0);
}
