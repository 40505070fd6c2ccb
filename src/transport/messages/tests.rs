use super::*;
use crate::transport::BodyBudgetLayer;
use crate::transport::budget::Class;
use http_body_util::BodyExt;
use std::time::Duration;
use tonic::body::Body;

const TIMEOUT: Duration = Duration::from_secs(5);

fn prefix(len: u32) -> Vec<u8> {
    let mut p = vec![0u8];
    p.extend_from_slice(&len.to_be_bytes());
    p
}

fn message(len: usize) -> Vec<u8> {
    let mut m = prefix(u32::try_from(len).expect("small"));
    m.extend((0..len).map(|i| i as u8));
    m
}

/// A body whose frames the test sends one by one; it stays open while `frames` lives.
fn channel_body() -> (tokio::sync::mpsc::UnboundedSender<Vec<u8>>, Body) {
    let (frames, received) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let stream = futures_util::stream::unfold(received, |mut received| async move {
        let chunk = received.recv().await?;
        Some((Ok::<_, Status>(Frame::data(Bytes::from(chunk))), received))
    });
    (frames, Body::new(http_body_util::StreamBody::new(stream)))
}

fn listed_body(chunks: Vec<Vec<u8>>) -> Body {
    frames_body(chunks.into_iter().map(Bytes::from).collect())
}

fn frames_body(chunks: Vec<Bytes>) -> Body {
    let frames: Vec<Result<Frame<Bytes>, Status>> =
        chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
    Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )))
}

fn layer(max_bytes: usize, max_message: usize) -> BodyBudgetLayer {
    BodyBudgetLayer::new(max_bytes, max_message, TIMEOUT).for_connection()
}

fn body(layer: &BodyBudgetLayer, inner: Body) -> BudgetedBody<Body> {
    layer.wrap(inner, Class::Calls)
}

async fn next_data(body: &mut BudgetedBody<Body>) -> Result<Bytes, Status> {
    match body.frame().await {
        Some(Ok(frame)) => Ok(frame.into_data().expect("a data frame")),
        Some(Err(status)) => Err(status),
        None => panic!("the body ended"),
    }
}

#[tokio::test]
async fn a_frame_of_whole_messages_goes_through_untouched_and_free() {
    let layer = layer(1 << 20, 64 << 10);
    let mut frame = message(100);
    frame.extend(message(30));
    let sent = Bytes::from(frame);
    let pointer = sent.as_ptr();
    let mut body = body(&layer, frames_body(vec![sent]));
    let data = next_data(&mut body).await.expect("whole messages");
    assert_eq!(data.len(), 140);
    assert_eq!(data.as_ptr(), pointer, "the frame itself, not a copy");
    assert_eq!(body.charged(), 0, "whole messages need no budget");
    assert_eq!(layer.buffered().held(), 0);
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn an_announcement_alone_holds_what_arrived_not_what_it_announces() {
    let layer = layer(1 << 20, 256 << 10);
    let (frames, inner) = channel_body();
    let mut body = body(&layer, inner);
    frames.send(prefix(200 << 10)).expect("open");
    let read = tokio::time::timeout(Duration::from_millis(50), body.frame()).await;
    assert!(
        read.is_err(),
        "nothing is handed on before the message is whole"
    );
    assert!(
        body.charged() <= 16 << 10,
        "a 5-byte prefix announcing 200 KiB holds {} bytes",
        body.charged()
    );
    assert_eq!(layer.buffered().held(), body.charged() as u64);
}

#[tokio::test]
async fn a_split_message_is_handed_on_whole_and_its_bytes_given_back() {
    let layer = layer(1 << 20, 256 << 10);
    let whole = message(40_000);
    let (first, rest) = whole.split_at(3);
    let (second, third) = rest.split_at(20_000);
    let mut after = message(7);
    let mut last = third.to_vec();
    last.extend_from_slice(&after);
    let mut body = body(
        &layer,
        listed_body(vec![first.to_vec(), second.to_vec(), last]),
    );
    let data = next_data(&mut body).await.expect("the message");
    assert_eq!(&data[..], &whole[..], "the message, whole and unchanged");
    assert_eq!(body.charged(), 0, "handed on: nothing held");
    assert_eq!(layer.buffered().held(), 0);
    let data = next_data(&mut body).await.expect("the next message");
    assert_eq!(&data[..], &after[..]);
    after.clear();
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn whole_messages_go_before_the_one_a_frame_only_begins() {
    let layer = layer(1 << 20, 256 << 10);
    let mut frame = message(10);
    let split = message(100);
    frame.extend_from_slice(&split[..50]);
    let mut body = body(&layer, listed_body(vec![frame, split[50..].to_vec()]));
    assert_eq!(next_data(&mut body).await.expect("first").len(), 15);
    assert!(body.charged() > 0, "the begun message is held");
    assert_eq!(&next_data(&mut body).await.expect("second")[..], &split[..]);
    assert_eq!(body.charged(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_message_that_stops_arriving_is_cut_and_its_bytes_given_back() {
    let layer = layer(1 << 20, 256 << 10);
    let (frames, inner) = channel_body();
    let mut body = body(&layer, inner);
    let mut begun = prefix(100_000);
    begun.extend(vec![7u8; 20_000]);
    frames.send(begun).expect("open");
    let started = tokio::time::Instant::now();
    let status = next_data(&mut body).await.expect_err("cut");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(started.elapsed(), TIMEOUT);
    assert_eq!(body.charged(), 0);
    assert_eq!(layer.buffered().held(), 0);
    assert!(body.frame().await.is_none(), "nothing after the error");
    drop(frames);
}

#[tokio::test]
async fn an_announcement_over_the_limit_is_refused_on_its_prefix() {
    let layer = layer(1 << 20, 16 << 10);
    let mut body = body(&layer, listed_body(vec![prefix(1 << 30)]));
    let status = next_data(&mut body).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.message().contains("16384"), "{status:?}");
    assert_eq!(layer.buffered().held(), 0);
}

#[tokio::test]
async fn a_body_that_ends_inside_a_message_is_an_invalid_argument() {
    let layer = layer(1 << 20, 16 << 10);
    let whole = message(1_000);
    let mut body = body(&layer, listed_body(vec![whole[..500].to_vec()]));
    let status = next_data(&mut body).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(layer.buffered().held(), 0);
}

/// A client's reset after a whole message is no end of the request: tonic would read
/// `CANCELLED` as one and decide the message; `ABORTED` ends the call undecided.
#[tokio::test]
async fn a_clients_reset_is_no_end_of_the_request() {
    let layer = layer(1 << 20, 1 << 10);
    let reset = Status::from_error(Box::new(h2::Error::from(h2::Reason::CANCEL)));
    assert_eq!(
        reset.code(),
        tonic::Code::Cancelled,
        "tonic's mapping of the reset"
    );
    let frames = vec![Ok(Frame::data(Bytes::from(message(8)))), Err(reset)];
    let inner = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )));
    let mut body = body(&layer, inner);
    assert_eq!(next_data(&mut body).await.map(|m| m.len()).ok(), Some(13));
    let ended = next_data(&mut body).await.expect_err("the reset");
    assert_eq!(ended.code(), tonic::Code::Aborted, "{ended:?}");
    assert!(body.frame().await.is_none(), "nothing after it");
}
