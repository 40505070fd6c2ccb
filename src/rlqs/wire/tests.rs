use super::*;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use tonic::Code;

fn framed_with(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut framed = vec![flag];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed
}

fn report(domain: &str) -> Vec<u8> {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("k".to_owned(), "v".to_owned())].into(),
            }),
            time_elapsed: None,
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    }
    .encode_to_vec()
}

fn body(frames: Vec<Vec<u8>>) -> tonic::body::Body {
    let frames: Vec<Result<Frame<Bytes>, Status>> = frames
        .into_iter()
        .map(|f| Ok(Frame::data(Bytes::from(f))))
        .collect();
    tonic::body::Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )))
}

async fn read_all(frames: Vec<Vec<u8>>) -> Vec<Result<RateLimitQuotaUsageReports, Status>> {
    Reports::new(body(frames), None, 4_096).collect().await
}

fn gzipped(message: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(message).expect("compressed in memory");
    encoder.finish().expect("compressed in memory")
}

#[tokio::test]
async fn a_compressed_report_is_decompressed_within_the_bound() {
    let mut frame = framed_with(1, &gzipped(&report("a")));
    frame.extend(framed_with(0, &report("b")));
    let read: Vec<_> = Reports::new(body(vec![frame]), Some(Compression::Gzip), 4_096)
        .collect()
        .await;
    let domains: Vec<String> = read
        .into_iter()
        .map(|r| r.expect("a report").domain)
        .collect();
    assert_eq!(domains, ["a", "b"]);

    // A report of 1 MiB, a few KiB compressed: refused on what it inflates to.
    let big = report(&"d".repeat(1 << 20));
    let read: Vec<_> = Reports::new(
        body(vec![framed_with(1, &gzipped(&big))]),
        Some(Compression::Gzip),
        4_096,
    )
    .collect()
    .await;
    let status = read
        .into_iter()
        .next()
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
}

#[tokio::test]
async fn reports_are_decoded_from_whole_messages_several_to_a_frame() {
    let mut frame = framed_with(0, &report("a"));
    frame.extend(framed_with(0, &report("b")));
    let read = read_all(vec![frame, framed_with(0, &report("c"))]).await;
    let domains: Vec<String> = read
        .into_iter()
        .map(|r| r.expect("a report").domain)
        .collect();
    assert_eq!(domains, ["a", "b", "c"]);
}

#[tokio::test]
async fn bytes_that_are_not_a_report_end_the_stream_with_invalid_argument() {
    let read = read_all(vec![
        framed_with(0, b"\xff\xff\xff\xff"),
        framed_with(0, &report("x")),
    ])
    .await;
    assert_eq!(read.len(), 1, "nothing after the error");
    let status = read
        .into_iter()
        .next()
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn a_domain_that_is_not_utf8_is_an_invalid_argument() {
    // Field 1 (domain), length-delimited, two bytes that are no UTF-8.
    let read = read_all(vec![framed_with(0, &[0x0a, 0x02, 0xc3, 0x28])]).await;
    let status = read
        .into_iter()
        .next()
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn a_compressed_flag_without_an_encoding_is_an_invalid_argument() {
    let read = read_all(vec![framed_with(1, &report("a"))]).await;
    let status = read
        .into_iter()
        .next()
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("grpc-encoding"), "{status:?}");
    let read = read_all(vec![framed_with(7, &report("a"))]).await;
    let status = read
        .into_iter()
        .next()
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn an_error_of_the_body_is_the_streams_status() {
    let frames = vec![
        Ok(Frame::data(Bytes::from(framed_with(0, &report("a"))))),
        Err(Status::resource_exhausted("the budget")),
    ];
    let inner = tonic::body::Body::new(http_body_util::StreamBody::new(
        futures_util::stream::iter(frames),
    ));
    let read: Vec<_> = Reports::new(inner, None, 4_096).collect().await;
    assert_eq!(read.len(), 2);
    let status = read
        .into_iter()
        .nth(1)
        .and_then(Result::err)
        .expect("refused");
    assert_eq!(status.code(), Code::ResourceExhausted);
}

/// The trailers' status and message of a finished response body, with its data.
async fn finish(responses: Responses) -> (Bytes, http::HeaderMap) {
    let collected = responses.collect().await.expect("the body ends");
    let trailers = collected.trailers().cloned().expect("trailers");
    (collected.to_bytes(), trailers)
}

#[tokio::test]
async fn responses_end_with_the_status_the_stream_ended_with() {
    let (out, responses) = stream(1);
    let task = tokio::spawn(async move {
        out.responses
            .send(RateLimitQuotaResponse::default())
            .await
            .expect("read");
        out.end_with(Status::resource_exhausted("too many"));
    });
    let (data, trailers) = finish(responses).await;
    task.await.expect("sent");
    assert_eq!(&data[..], &[0, 0, 0, 0, 0], "one empty response, framed");
    assert_eq!(
        trailers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"8"[..])
    );
    assert_eq!(
        trailers.get("grpc-message").map(|v| v.as_bytes()),
        Some(&b"too%20many"[..])
    );
}

#[tokio::test]
async fn a_stream_that_just_stops_ends_ok() {
    let (out, responses) = stream(1);
    drop(out);
    let (_, trailers) = finish(responses).await;
    assert_eq!(
        trailers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..])
    );
}
