use super::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

#[test]
fn a_frame_is_read_back_and_a_short_or_compressed_one_is_refused() {
    let reply = RateLimitResponse {
        overall_code: Code::Ok as i32,
        ..Default::default()
    };
    let framed = frame(&reply);
    let message = unframe(&framed).expect("a frame this module wrote");
    assert_eq!(RateLimitResponse::decode(message), Ok(reply));
    assert_eq!(unframe(&framed[..framed.len() - 1]), None);
    assert_eq!(unframe(&[0, 0, 0]), None);
    let mut compressed = framed.to_vec();
    compressed[0] = 1;
    assert_eq!(unframe(&compressed), None);
}
