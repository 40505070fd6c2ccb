//! Counts carried over at the switch from envoyproxy/ratelimit: its Redis keys read (never
//! written) the first time a counter is seen, and seeded into the region's count by the
//! engine's `CarryOverOrigin` (bounds and layers in its module doc).
//!
//! Upstream's key of a counter's window, from its `cache_key.go`: `CACHE_KEY_PREFIX`, the
//! domain, `_`, then per descriptor entry its key, `_`, its value (a `share_threshold`
//! wildcard's pattern instead of the request's value), `_`, and last the window's start in
//! Unix seconds, `now / divider × divider` (divider: the unit in seconds). The value is an
//! integer (INCRBY). Per-second limits may live in a Redis of their own (`REDIS_PERSECOND`).
//! Our cell identity carries all of it: the namespace holds each entry's key (and the
//! config's value pattern), the identifier each request value or `*` for a shared entry.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use gcounter_engine::cell_key::CellKey;
use gcounter_engine::recorder::Recorder;
use gcounter_engine::regional::{
    CarryOverOrigin, CarrySettings, CarrySource, OriginFuture, RegionalOrigin,
};
use gcounter_redis::{CountReader, RedisSettings};

/// `--carry-over-*`, checked.
#[derive(Clone)]
pub struct CarryOverGroup {
    /// The replaced service's Redis, and the one of its per-second limits if apart.
    pub redis: RedisSettings,
    pub per_second: Option<RedisSettings>,
    /// Upstream's `CACHE_KEY_PREFIX`.
    pub key_prefix: String,
    pub read_timeout: Duration,
    pub max_reads_per_second: u32,
}

impl std::fmt::Debug for CarryOverGroup {
    // The URLs may hold passwords: not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CarryOverGroup")
            .field("key_prefix", &self.key_prefix)
            .field("read_timeout", &self.read_timeout)
            .field("max_reads_per_second", &self.max_reads_per_second)
            .finish_non_exhaustive()
    }
}

impl CarryOverGroup {
    /// The settings from the flags; `None` when --carry-over-from-redis is unset.
    pub fn from_flags(
        url: Option<&str>,
        per_second_url: Option<&str>,
        key_prefix: &str,
        read_timeout: Duration,
        max_reads_per_second: u32,
    ) -> anyhow::Result<Option<Self>> {
        let Some(url) = url else {
            return Ok(None);
        };
        let redis = one_node(url).context("invalid --carry-over-from-redis")?;
        let per_second = per_second_url
            .map(|url| one_node(url).context("invalid --carry-over-per-second-redis"))
            .transpose()?;
        Ok(Some(Self {
            redis,
            per_second,
            key_prefix: key_prefix.to_owned(),
            read_timeout,
            max_reads_per_second,
        }))
    }

    /// `origin` seeding cold cells from the replaced service's Redis, switched now.
    pub fn wrap(
        &self,
        origin: Arc<dyn RegionalOrigin>,
        recorder: Arc<dyn Recorder>,
    ) -> anyhow::Result<Arc<dyn RegionalOrigin>> {
        let source = UpstreamCounts {
            prefix: self.key_prefix.clone(),
            main: CountReader::connect(self.redis.clone())
                .context("invalid --carry-over-from-redis")?,
            per_second: self
                .per_second
                .clone()
                .map(CountReader::connect)
                .transpose()
                .context("invalid --carry-over-per-second-redis")?,
        };
        let switched_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        tracing::info!(
            key_prefix = %self.key_prefix,
            per_second_apart = self.per_second.is_some(),
            "carrying counts over from the replaced service's Redis, for windows begun by now"
        );
        Ok(Arc::new(CarryOverOrigin::new(
            origin,
            Arc::new(source),
            CarrySettings {
                switched_at_ms,
                read_timeout: self.read_timeout,
                max_reads_per_second: self.max_reads_per_second,
            },
            recorder,
        )))
    }
}

fn one_node(url: &str) -> anyhow::Result<RedisSettings> {
    let settings = RedisSettings {
        urls: vec![url.to_owned()],
        ..RedisSettings::default()
    };
    settings.check()?;
    Ok(settings)
}

/// The replaced service's counts, read from its Redis.
pub struct UpstreamCounts {
    prefix: String,
    main: CountReader,
    per_second: Option<CountReader>,
}

impl CarrySource for UpstreamCounts {
    fn count<'a>(&'a self, key: &'a CellKey) -> OriginFuture<'a, Option<u64>> {
        Box::pin(async move {
            let Some(name) = upstream_key(&self.prefix, key) else {
                return Ok(None);
            };
            let reader = match &self.per_second {
                Some(per_second) if key.duration_ms == 1_000 => per_second,
                _ => &self.main,
            };
            reader.count(&name).await
        })
    }
}

/// Upstream's units in seconds (`UnitToDivider`): a window of another length (our
/// `unit_multiplier`) has no upstream key.
const UPSTREAM_DIVIDERS: [u64; 7] = [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000];

/// What namespaces of request overrides without a matching rule start with (`rls::plan`).
const OVERRIDE_NAMESPACE: &str = "!override/";

/// Upstream's key of `key`'s window under `prefix`; `None` for a cell upstream could not have
/// counted (a window that is not one of its units) or an identity that does not decode.
pub fn upstream_key(prefix: &str, key: &CellKey) -> Option<String> {
    let divider = key.duration_ms.checked_div(1_000)?;
    if divider.checked_mul(1_000)? != key.duration_ms || !UPSTREAM_DIVIDERS.contains(&divider) {
        return None;
    }
    let window_start = key.sequence.checked_mul(divider)?;
    let mut out = String::with_capacity(prefix.len() + key.workspace().len() + 64);
    out.push_str(prefix);
    out.push_str(key.workspace());
    out.push('_');
    let (mut path, values_in_path) = match key.namespace().strip_prefix(OVERRIDE_NAMESPACE) {
        Some(rest) => (rest, false),
        None => (&**key.namespace(), true),
    };
    let mut identifier: &str = &key.identifier;
    while !path.is_empty() {
        let (entry_key, rest) = length_prefixed(path)?;
        let (pattern, rest) = match rest.strip_prefix('=') {
            Some(rest) if values_in_path => {
                let (pattern, rest) = length_prefixed(rest)?;
                (Some(pattern), rest)
            }
            _ => (None, rest),
        };
        path = rest.strip_prefix('/')?;
        let value = match identifier.strip_prefix('*') {
            Some(rest) => {
                identifier = rest;
                pattern?
            }
            None => {
                let (value, rest) = length_prefixed(identifier)?;
                identifier = rest;
                value
            }
        };
        out.push_str(entry_key);
        out.push('_');
        out.push_str(value);
        out.push('_');
    }
    if !identifier.is_empty() {
        return None;
    }
    out.push_str(&window_start.to_string());
    Some(out)
}

/// `{len}:{text}` at the start of `s`: the text and what follows it.
fn length_prefixed(s: &str) -> Option<(&str, &str)> {
    let (len, rest) = s.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

#[cfg(test)]
mod tests;
