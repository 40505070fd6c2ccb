//! The checks of an RLQS report: what ends the stream (`INVALID_ARGUMENT`) and what only
//! sets one bucket's usage aside.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;

use super::bucket_key::BucketKey;
use crate::rls::RequestLimits;

/// More requests than this in one usage (allowed or denied) is no real Envoy's count: a
/// billion in one reporting interval.
pub const MAX_REPORTED_REQUESTS: u64 = 1_000_000_000;
/// A reporting interval longer than a day is no real Envoy's either.
pub const MAX_TIME_ELAPSED: Duration = Duration::from_secs(86_400);

/// Why a stream is ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamFault {
    #[error("the first RateLimitQuotaUsageReports of a stream must name its domain")]
    MissingDomain,
    #[error("the stream's domain is {fixed:?}; a report named {sent:?} (a stream has one domain)")]
    DomainChanged { fixed: String, sent: String },
    #[error("a bucket_quota_usages entry has no bucket_id, or an empty one")]
    EmptyBucket,
    #[error("a bucket_id has {entries} entries; at most {max}")]
    TooManyEntries { entries: usize, max: usize },
    #[error("a bucket_id entry's key or value is {bytes} bytes; at most {max}")]
    EntryTooLong { bytes: usize, max: usize },
    #[error("a bucket_id is {bytes} bytes in all; at most {max}")]
    BucketTooLong { bytes: usize, max: usize },
    #[error("a report carries {usages} bucket usages; at most {max} per stream")]
    TooManyUsages { usages: usize, max: usize },
}

/// Why one usage is set aside (counted in `rls_rlqs_usages_total{outcome="ignored"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsageFault {
    #[error("num_requests_allowed or num_requests_denied over {MAX_REPORTED_REQUESTS}")]
    AbsurdCount,
    #[error("time_elapsed negative, over a day or not a valid duration")]
    AbsurdElapsed,
}

/// The bucket's key, its entries within the request bounds RLS v3 applies to one descriptor.
pub fn bucket_key(id: Option<&BucketId>, limits: &RequestLimits) -> Result<BucketKey, StreamFault> {
    let bucket: &HashMap<String, String> = match id {
        Some(id) if !id.bucket.is_empty() => &id.bucket,
        _ => return Err(StreamFault::EmptyBucket),
    };
    if bucket.len() > limits.max_entries {
        return Err(StreamFault::TooManyEntries {
            entries: bucket.len(),
            max: limits.max_entries,
        });
    }
    let mut total = 0usize;
    for (key, value) in bucket {
        let longest = key.len().max(value.len());
        if longest > limits.max_entry_bytes {
            return Err(StreamFault::EntryTooLong {
                bytes: longest,
                max: limits.max_entry_bytes,
            });
        }
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > limits.max_descriptor_bytes {
        return Err(StreamFault::BucketTooLong {
            bytes: total,
            max: limits.max_descriptor_bytes,
        });
    }
    BucketKey::new(bucket).ok_or(StreamFault::BucketTooLong {
        bytes: total,
        max: limits.max_descriptor_bytes,
    })
}

/// The usage's counts and interval, if believable.
pub fn usage_counts(usage: &BucketQuotaUsage) -> Result<(u64, u64, Duration), UsageFault> {
    if usage.num_requests_allowed > MAX_REPORTED_REQUESTS
        || usage.num_requests_denied > MAX_REPORTED_REQUESTS
    {
        return Err(UsageFault::AbsurdCount);
    }
    // Envoy sends whole seconds, and 0 with a new bucket's first report.
    let elapsed = match &usage.time_elapsed {
        None => Duration::ZERO,
        Some(d) => {
            let seconds = u64::try_from(d.seconds).map_err(|_| UsageFault::AbsurdElapsed)?;
            let nanos = u32::try_from(d.nanos).map_err(|_| UsageFault::AbsurdElapsed)?;
            if nanos >= 1_000_000_000 {
                return Err(UsageFault::AbsurdElapsed);
            }
            Duration::new(seconds, nanos)
        }
    };
    if elapsed > MAX_TIME_ELAPSED {
        return Err(UsageFault::AbsurdElapsed);
    }
    Ok((
        usage.num_requests_allowed,
        usage.num_requests_denied,
        elapsed,
    ))
}

#[cfg(test)]
mod tests;
