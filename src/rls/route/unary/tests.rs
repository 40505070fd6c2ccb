use super::*;
use http_body_util::{BodyExt, StreamBody};
use tonic::body::Body;

const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

fn frame(flag: u8, message: &[u8]) -> Bytes {
    let mut framed = vec![flag];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// A body of these frames, in order (each a DATA frame).
fn body(frames: Vec<Bytes>) -> tonic::body::Body {
    let frames = frames
        .into_iter()
        .map(|data| Ok::<_, Status>(Frame::data(data)));
    Body::new(StreamBody::new(futures_util::stream::iter(frames)))
}

fn request(body: tonic::body::Body) -> http::Request<tonic::body::Body> {
    http::Request::new(body)
}

#[test]
fn a_whole_message_is_the_frame_less_its_prefix() {
    let data = frame(0, b"abc");
    assert_eq!(whole_message(&data, 3).as_deref(), Some(&b"abc"[..]));
    assert_eq!(whole_message(&frame(0, b""), 0).as_deref(), Some(&b""[..]));
    // Over the limit, compressed, short or with more after it: left to tonic.
    assert_eq!(whole_message(&data, 2), None);
    assert_eq!(whole_message(&frame(1, b"abc"), 3), None);
    assert_eq!(whole_message(&data.slice(..7), 3), None);
    assert_eq!(whole_message(&data.slice(..4), 3), None);
    let mut two = data.to_vec();
    two.extend_from_slice(&data);
    assert_eq!(whole_message(&Bytes::from(two), 3), None);
}

#[tokio::test]
async fn the_common_call_is_read_whole() {
    let read = read(
        request(Body::new(http_body_util::Full::new(frame(0, b"abc")))),
        8,
    )
    .await;
    assert!(matches!(read, Read::Whole(message) if message == b"abc"[..]));
}

#[tokio::test]
async fn any_other_call_goes_on_with_its_body_unchanged() {
    let split = frame(0, b"abcdef");
    let cases = [
        vec![split.slice(..4), split.slice(4..)],
        vec![frame(0, b"abc"), frame(0, b"def")],
        vec![frame(1, b"abc")],
        vec![frame(0, b"abcdefghi")],
        vec![],
    ];
    for frames in cases {
        let sent: Vec<u8> = frames.iter().flat_map(|data| data.to_vec()).collect();
        let Read::Other(other) = read(request(body(frames)), 8).await else {
            panic!("{sent:?} was read whole");
        };
        let collected = match other.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => panic!("{error}"),
        };
        assert_eq!(collected.to_vec(), sent);
    }
    let mut encoded = request(Body::new(http_body_util::Full::new(frame(0, b"abc"))));
    encoded
        .headers_mut()
        .insert(GRPC_ENCODING, http::HeaderValue::from_static("gzip"));
    assert!(matches!(read(encoded, 8).await, Read::Other(_)));
}

#[tokio::test]
async fn the_answer_is_framed_with_its_status_in_the_trailers() {
    let answer = Answer {
        overall_code: envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code::Ok,
        statuses: Default::default(),
        response_headers_to_add: Vec::new(),
        dynamic_metadata: None,
    };
    let response = respond(Ok(answer.clone()));
    assert_eq!(
        response.headers().get(http::header::CONTENT_TYPE),
        Some(&GRPC_CONTENT_TYPE)
    );
    let collected = match response.into_body().collect().await {
        Ok(collected) => collected,
        Err(error) => panic!("{error}"),
    };
    let status = collected
        .trailers()
        .and_then(|trailers| trailers.get(&GRPC_STATUS))
        .cloned();
    assert_eq!(status, Some(http::HeaderValue::from_static("0")));
    assert_eq!(collected.to_bytes(), frame(0, &answer.encode_to_vec()));

    let refused = respond(Err(Status::invalid_argument("no")));
    assert_eq!(
        refused.headers().get(&GRPC_STATUS),
        Some(&http::HeaderValue::from_static("3"))
    );
}

#[test]
fn a_large_answer_is_framed_too() {
    let status = crate::rls::answer::Status {
        code: 1,
        ..Default::default()
    };
    let answer = Answer {
        overall_code: envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code::Ok,
        statuses: std::iter::repeat_n(status, 200).collect(),
        response_headers_to_add: Vec::new(),
        dynamic_metadata: None,
    };
    let encoded = answer.encode_to_vec();
    assert!(encoded.len() > STACK_ANSWER_BYTES);
    assert_eq!(framed(&answer).ok(), Some(frame(0, &encoded)));
}
