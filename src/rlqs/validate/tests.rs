use super::*;
use envoy_types::pb::google::protobuf;

fn id(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn usage(allowed: u64, denied: u64, seconds: i64, nanos: i32) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id(&[("k", "v")])),
        time_elapsed: Some(protobuf::Duration { seconds, nanos }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

#[test]
fn a_bucket_key_is_sorted_and_bounded_as_a_descriptor() {
    let limits = RequestLimits {
        max_entries: 2,
        max_entry_bytes: 4,
        max_descriptor_bytes: 10,
        ..RequestLimits::default()
    };
    let key = bucket_key(Some(&id(&[("b", "2"), ("a", "1")])), &limits).expect("within bounds");
    assert_eq!(
        key.entries().collect::<Vec<_>>(),
        vec![("a", "1"), ("b", "2")]
    );
    assert_eq!(bucket_key(None, &limits), Err(StreamFault::EmptyBucket));
    assert_eq!(
        bucket_key(Some(&id(&[])), &limits),
        Err(StreamFault::EmptyBucket)
    );
    assert_eq!(
        bucket_key(Some(&id(&[("a", "1"), ("b", "2"), ("c", "3")])), &limits),
        Err(StreamFault::TooManyEntries { entries: 3, max: 2 })
    );
    assert_eq!(
        bucket_key(Some(&id(&[("a", "12345")])), &limits),
        Err(StreamFault::EntryTooLong { bytes: 5, max: 4 })
    );
    assert_eq!(
        bucket_key(Some(&id(&[("aaaa", "1111"), ("bb", "22")])), &limits),
        Err(StreamFault::BucketTooLong { bytes: 12, max: 10 })
    );
}

#[test]
fn believable_counts_pass_and_absurd_ones_are_set_aside() {
    assert_eq!(
        usage_counts(&usage(3, 4, 5, 0)),
        Ok((3, 4, Duration::from_secs(5)))
    );
    // Envoy's first report of a bucket
    assert_eq!(usage_counts(&usage(1, 0, 0, 0)), Ok((1, 0, Duration::ZERO)));
    let missing = BucketQuotaUsage {
        time_elapsed: None,
        ..usage(1, 0, 0, 0)
    };
    assert_eq!(usage_counts(&missing), Ok((1, 0, Duration::ZERO)));
    for absurd in [
        usage(MAX_REPORTED_REQUESTS + 1, 0, 1, 0),
        usage(0, u64::MAX, 1, 0),
    ] {
        assert_eq!(usage_counts(&absurd), Err(UsageFault::AbsurdCount));
    }
    for absurd in [
        usage(1, 0, -1, 0),
        usage(1, 0, 1, -1),
        usage(1, 0, 1, 1_000_000_000),
        usage(1, 0, 86_401, 0),
    ] {
        assert_eq!(usage_counts(&absurd), Err(UsageFault::AbsurdElapsed));
    }
}
