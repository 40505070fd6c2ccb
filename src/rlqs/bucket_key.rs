//! A bucket's identity, stored once: the entries of its `BucketId`, sorted by key, in one
//! string with their boundaries.
//!
//! A stream keeps each bucket under this key and rebuilds the `BucketId` only to send an
//! action; the same id as a `HashMap` of `String`s, a sorted `Vec` of pairs for lookup and
//! a copy in every action held three copies of every byte of it, two allocations per entry
//! (64–75 KiB a bucket at the largest id allowed, 16 KiB). Clones share the text: a tick
//! walks every bucket without copying one.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;

/// A bucket's sorted entries (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BucketKey(Arc<Entries>);

#[derive(Debug, PartialEq, Eq, Hash)]
struct Entries {
    /// Every key and value, in order, one after the other.
    text: Box<str>,
    /// Where each key and each value ends in `text`: two per entry.
    ends: Box<[u32]>,
}

/// Bytes one key holds beyond its text and boundaries: the `Arc`'s counts and the two
/// allocations' headers.
const KEY_OVERHEAD: usize = 64;

impl BucketKey {
    /// The key of `bucket`'s entries (their order in the map does not matter). `None` if
    /// they do not fit in 4 GiB, which validation has refused long before.
    pub fn new(bucket: &HashMap<String, String>) -> Option<Self> {
        let mut sorted: Vec<(&String, &String)> = bucket.iter().collect();
        sorted.sort_unstable();
        let mut text = String::with_capacity(sorted.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(sorted.len() * 2);
        for (key, value) in sorted {
            text.push_str(key);
            ends.push(u32::try_from(text.len()).ok()?);
            text.push_str(value);
            ends.push(u32::try_from(text.len()).ok()?);
        }
        Some(Self(Arc::new(Entries {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        })))
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        let text = &self.0.text;
        let mut start = 0usize;
        self.0.ends.chunks_exact(2).map(move |ends| {
            let (key_end, value_end) = match ends {
                [k, v] => (*k as usize, *v as usize),
                _ => (start, start),
            };
            let key = text.get(start..key_end).unwrap_or_default();
            let value = text.get(key_end..value_end).unwrap_or_default();
            start = value_end;
            (key, value)
        })
    }

    /// The `BucketId` Envoy sent, for an action about this bucket.
    pub fn id(&self) -> BucketId {
        BucketId {
            bucket: self
                .entries()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
        }
    }

    /// Bytes the key holds, counted against `--rlqs-max-bucket-bytes` (shared by its clones).
    pub fn heap_bytes(&self) -> usize {
        self.0.text.len() + self.0.ends.len() * size_of::<u32>() + KEY_OVERHEAD
    }
}

#[cfg(test)]
mod tests;
