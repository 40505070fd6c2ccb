//! Descriptor templates: `key=value` entries where `{key}` in a value is replaced, per
//! request, by a random number from the key space.

use std::fmt::Write;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The placeholder replaced by a key drawn from the key space.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// One descriptor: `key=value[,key=value...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    entries: Vec<(String, String)>,
}

impl std::str::FromStr for DescriptorTemplate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let entries = text
            .split(',')
            .map(|entry| {
                let (key, value) = entry
                    .split_once('=')
                    .ok_or_else(|| format!("entry {entry:?} is not key=value"))?;
                if key.is_empty() {
                    return Err(format!("entry {entry:?} has an empty key"));
                }
                Ok((key.to_owned(), value.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { entries })
    }
}

impl DescriptorTemplate {
    /// Whether any value draws from the key space.
    pub fn is_keyed(&self) -> bool {
        self.entries
            .iter()
            .any(|(_, value)| value.contains(KEY_PLACEHOLDER))
    }

    fn render(&self, key: u64, scratch: &mut String) -> RateLimitDescriptor {
        scratch.clear();
        let _ = write!(scratch, "{key}");
        RateLimitDescriptor {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.clone(),
                    value: v.replace(KEY_PLACEHOLDER, scratch),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Everything a request is made of; `build` draws the keys.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    pub domain: String,
    pub descriptors: Vec<DescriptorTemplate>,
    pub hits_addend: u32,
    /// Keys are drawn uniformly from `0..key_space`.
    pub key_space: u64,
}

impl RequestTemplate {
    /// A request with one key drawn for the whole request (so nested descriptors of one
    /// request share the key, as one client's request would).
    pub fn build(&self, rng: &mut fastrand::Rng) -> RateLimitRequest {
        let key = rng.u64(0..self.key_space.max(1));
        self.build_with_key(key)
    }

    pub fn build_with_key(&self, key: u64) -> RateLimitRequest {
        let mut scratch = String::new();
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: self
                .descriptors
                .iter()
                .map(|d| d.render(key, &mut scratch))
                .collect(),
            hits_addend: self.hits_addend,
        }
    }
}

#[cfg(test)]
impl RequestTemplate {
    /// One keyed entry, `k={key}`, one hit a request: the template the tests draw keys with.
    pub(crate) fn one_keyed_entry(key_space: u64) -> Self {
        Self {
            domain: "d".into(),
            descriptors: vec![DescriptorTemplate {
                entries: vec![("k".into(), KEY_PLACEHOLDER.into())],
            }],
            hits_addend: 1,
            key_space,
        }
    }
}

#[cfg(test)]
mod tests;
