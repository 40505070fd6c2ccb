use super::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

fn request_with(entries: usize, bytes: usize) -> RateLimitRequest {
    let entry = Entry {
        key: "k".repeat(bytes / 2),
        value: "v".repeat(bytes / 2),
    };
    RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![entry; entries],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

#[test]
fn a_descriptor_is_bounded_in_bytes_not_only_per_entry() {
    let limits = RequestLimits::default();
    // 4 entries of 4 KiB (each within the per-entry bound): 16 KiB, the most allowed
    assert_eq!(validate(&request_with(4, 4_096), &limits), Ok(()));
    assert_eq!(
        validate(&request_with(5, 4_096), &limits),
        Err(InvalidRequest::DescriptorTooLarge {
            descriptor: 0,
            got: 5 * 4_096,
            max: 16 * 1_024,
        })
    );
}
