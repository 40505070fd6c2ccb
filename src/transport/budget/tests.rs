use super::*;
use http_body_util::BodyExt;
use tonic::body::Body;

fn prefix(len: u32) -> Vec<u8> {
    let mut p = vec![0u8];
    p.extend_from_slice(&len.to_be_bytes());
    p
}

fn budgeted(layer: &BodyBudgetLayer, chunks: Vec<Vec<u8>>) -> BudgetedBody<Body> {
    let frames: Vec<Result<Frame<Bytes>, Status>> = chunks
        .into_iter()
        .map(|c| Ok(Frame::data(Bytes::from(c))))
        .collect();
    BudgetedBody {
        inner: Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
            frames,
        ))),
        pools: Arc::clone(&layer.pools),
        framing: Framing::default(),
        held: SmallVec::new(),
    }
}

fn available(layer: &BodyBudgetLayer) -> usize {
    layer.pools.main.left() + layer.pools.reserve.left()
}

#[tokio::test]
async fn announced_lengths_are_held_until_the_body_is_dropped() {
    // 160 KiB: 150 in the main pool, 10 in the reserve.
    let layer = BodyBudgetLayer::new(160 << 10, 1 << 20);
    // A prefix split across two frames, announcing 100 KiB; only 3 body bytes sent.
    let mut first = budgeted(
        &layer,
        vec![prefix(100 << 10)[..2].to_vec(), {
            let mut rest = prefix(100 << 10)[2..].to_vec();
            rest.extend_from_slice(b"abc");
            rest
        }],
    );
    assert!(first.frame().await.is_some_and(|f| f.is_ok()));
    assert_eq!(
        available(&layer),
        160 << 10,
        "nothing is taken before the prefix is whole"
    );
    assert!(first.frame().await.is_some_and(|f| f.is_ok()));
    assert_eq!(available(&layer), (60 << 10) - PREFIX);
    // What a metrics scrape reads.
    let buffered = layer.buffered();
    assert_eq!(buffered.budget(), 160 << 10);
    assert_eq!(buffered.held(), (100 << 10) + PREFIX as u64);

    // A second large announcement does not fit.
    let mut second = budgeted(&layer, vec![prefix(80 << 10)]);
    let status = second
        .frame()
        .await
        .and_then(Result::err)
        .expect("over the budget");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);

    // Small messages still pass, from the reserve once the main pool is spent.
    let mut third = budgeted(&layer, vec![prefix(48 << 10)]);
    assert!(third.frame().await.is_some_and(|f| f.is_ok()));
    let mut small = budgeted(&layer, vec![prefix(4 << 10)]);
    assert!(small.frame().await.is_some_and(|f| f.is_ok()));

    drop((first, second, third, small));
    assert_eq!(available(&layer), 160 << 10);
    assert_eq!(buffered.held(), 0);
}

#[tokio::test]
async fn oversized_announcements_are_left_to_tonic() {
    let layer = BodyBudgetLayer::new(64 << 10, 16 << 10);
    let mut body = budgeted(&layer, vec![prefix(1 << 30)]);
    assert!(body.frame().await.is_some_and(|f| f.is_ok()));
    assert_eq!(available(&layer), 64 << 10);
}
