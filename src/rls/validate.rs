//! Request validation: what a client may send before anything is looked up or counted.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;

/// Bounds on one request. They keep a hostile or broken client from making the service build
/// huge keys or loop over thousands of descriptors; Envoy's own requests are far below them.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_descriptors: usize,
    pub max_entries: usize,
    /// Bytes of one descriptor key or value.
    pub max_entry_bytes: usize,
    /// Bytes of one descriptor's keys and values together: they become one cell's key
    /// (a request override's namespace and identifier), held in memory and in Redis.
    pub max_descriptor_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_descriptors: 256,
            max_entries: 64,
            max_entry_bytes: 4_096,
            max_descriptor_bytes: 16 * 1_024,
        }
    }
}

/// Why a request was refused; becomes `InvalidArgument` with this text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidRequest {
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    #[error("too many descriptors: {got} (at most {max})")]
    TooManyDescriptors { got: usize, max: usize },
    #[error("descriptor {descriptor}: too many entries: {got} (at most {max})")]
    TooManyEntries {
        descriptor: usize,
        got: usize,
        max: usize,
    },
    #[error("descriptor {descriptor}, entry {entry}: {what} is {got} bytes (at most {max})")]
    EntryTooLong {
        descriptor: usize,
        entry: usize,
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("descriptor {descriptor}: its keys and values are {got} bytes (at most {max})")]
    DescriptorTooLarge {
        descriptor: usize,
        got: usize,
        max: usize,
    },
    #[error(
        "descriptor {descriptor}: limit override has unit {unit}; expected one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR"
    )]
    BadOverrideUnit { descriptor: usize, unit: String },
}

pub fn validate(request: &RateLimitRequest, limits: &RequestLimits) -> Result<(), InvalidRequest> {
    if request.domain.is_empty() {
        return Err(InvalidRequest::EmptyDomain);
    }
    if request.descriptors.is_empty() {
        return Err(InvalidRequest::NoDescriptors);
    }
    if request.descriptors.len() > limits.max_descriptors {
        return Err(InvalidRequest::TooManyDescriptors {
            got: request.descriptors.len(),
            max: limits.max_descriptors,
        });
    }
    for (d, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.len() > limits.max_entries {
            return Err(InvalidRequest::TooManyEntries {
                descriptor: d,
                got: descriptor.entries.len(),
                max: limits.max_entries,
            });
        }
        let mut descriptor_bytes = 0usize;
        for (e, entry) in descriptor.entries.iter().enumerate() {
            descriptor_bytes = descriptor_bytes
                .saturating_add(entry.key.len())
                .saturating_add(entry.value.len());
            for (what, text) in [("key", &entry.key), ("value", &entry.value)] {
                if text.len() > limits.max_entry_bytes {
                    return Err(InvalidRequest::EntryTooLong {
                        descriptor: d,
                        entry: e,
                        what,
                        got: text.len(),
                        max: limits.max_entry_bytes,
                    });
                }
            }
        }
        if descriptor_bytes > limits.max_descriptor_bytes {
            return Err(InvalidRequest::DescriptorTooLarge {
                descriptor: d,
                got: descriptor_bytes,
                max: limits.max_descriptor_bytes,
            });
        }
        if let Some(limit) = &descriptor.limit {
            match ProtoUnit::try_from(limit.unit) {
                Ok(ProtoUnit::Unknown) => {
                    return Err(InvalidRequest::BadOverrideUnit {
                        descriptor: d,
                        unit: "UNKNOWN".into(),
                    });
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(InvalidRequest::BadOverrideUnit {
                        descriptor: d,
                        unit: limit.unit.to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
