use super::*;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, AbandonAction,
};

/// An abandon action whose bucket id is about `bytes` long.
fn action(bytes: usize) -> BucketAction {
    BucketAction {
        bucket_id: Some(BucketId {
            bucket: [("k".to_owned(), "v".repeat(bytes))].into(),
        }),
        bucket_action: Some(bucket_action::BucketAction::AbandonAction(AbandonAction {})),
    }
}

#[tokio::test]
async fn actions_go_out_in_responses_of_bounded_size() {
    let (out, mut received) = mpsc::channel(16);
    let mut outbox = Outbox::new(&out, Duration::from_secs(1), None);
    for _ in 0..20 {
        outbox.push(action(16 << 10)).await.expect("read");
    }
    outbox.flush().await.expect("read");
    drop(outbox);
    drop(out);
    let mut responses = Vec::new();
    while let Some(response) = received.recv().await {
        responses.push(response);
    }
    assert_eq!(
        responses
            .iter()
            .map(|r| r.bucket_action.len())
            .sum::<usize>(),
        20
    );
    assert!(responses.len() >= 4, "{} responses", responses.len());
    for response in &responses {
        assert!(response.encoded_len() < RESPONSE_BYTES + (17 << 10));
    }
}

#[tokio::test(start_paused = true)]
async fn an_envoy_that_reads_nothing_is_given_up_on_after_the_wait() {
    let (out, _unread) = mpsc::channel(1);
    let mut outbox = Outbox::new(&out, Duration::from_secs(60), None);
    outbox.push(action(10)).await.expect("buffered");
    outbox.flush().await.expect("the channel holds one");
    outbox.push(action(10)).await.expect("gathered");
    let started = tokio::time::Instant::now();
    assert_eq!(outbox.flush().await, Err(Unsent::Stalled));
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

#[tokio::test]
async fn a_gone_stream_is_told_apart_from_a_stalled_one() {
    let (out, unread) = mpsc::channel(1);
    drop(unread);
    let mut outbox = Outbox::new(&out, Duration::from_secs(60), None);
    outbox.push(action(10)).await.expect("gathered");
    assert_eq!(outbox.flush().await, Err(Unsent::Gone));
}
