use super::*;
use http_body_util::BodyExt;

#[tokio::test]
async fn an_answer_is_its_message_then_an_ok_status() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let mut body = GrpcBody::answer(Bytes::from_static(b"\0\0\0\0\x01a"));
    assert!(!body.is_end_stream());
    assert_eq!(body.size_hint().exact(), None);
    let data = body
        .frame()
        .await
        .and_then(Result::ok)
        .map(Frame::into_data);
    assert!(matches!(data, Some(Ok(data)) if data == b"\0\0\0\0\x01a"[..]));
    assert!(!body.is_end_stream());
    let sent = body
        .frame()
        .await
        .and_then(Result::ok)
        .map(Frame::into_trailers);
    assert!(matches!(sent, Some(Ok(sent)) if sent == trailers));
    assert!(body.is_end_stream());
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn tonics_body_passes_as_it_is() {
    let body = GrpcBody::from(tonic::body::Body::new(http_body_util::Full::new(
        Bytes::from_static(b"abc"),
    )));
    let collected = body.collect().await.map(|c| c.to_bytes()).ok();
    assert_eq!(collected.as_deref(), Some(&b"abc"[..]));
}
