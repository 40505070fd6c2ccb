use super::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use prost::Message;

/// Through the stack or straight into the buffer, the bytes are prost's.
#[test]
fn answers_small_and_large_encode_to_prosts_bytes() {
    for descriptors in [0, 1, 4, 64] {
        let response = RateLimitResponse {
            overall_code: 1,
            statuses: (0..descriptors)
                .map(|i| DescriptorStatus {
                    code: 1,
                    limit_remaining: i,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        if descriptors == 64 {
            assert!(
                response.encoded_len() > STACK_ANSWER_BYTES,
                "both paths covered"
            );
        }
        let mut written = bytes::BytesMut::from(&b"before"[..]);
        encode_via_stack(&response, &mut written).expect("encodes");
        let mut expected = b"before".to_vec();
        expected.extend(response.encode_to_vec());
        assert_eq!(
            written.as_ref(),
            expected.as_slice(),
            "{descriptors} descriptors"
        );
    }
}
