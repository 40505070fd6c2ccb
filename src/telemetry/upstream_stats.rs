//! envoyproxy/ratelimit's per-rule stats under the names its default Prometheus mapping gives
//! them (`src/stats/prom/default_mapper.yaml`): `ratelimit_service_rate_limit_{total_hits,
//! over_limit,near_limit,within_limit,shadow_mode}` with labels `domain`, `key1` and `key2`,
//! so dashboards written for upstream keep working next to our own `rls_*` series.
//!
//! Upstream's statsd key is `ratelimit.service.rate_limit.<domain>.<key...>.<stat>`; its mapper
//! takes `domain`, `key1` and `key2` from the first three dot-separated segments. Our rule label
//! is the same `<domain>.<key...>` string, split the same way at scrape time, so a decision
//! clones two `Arc`s and allocates nothing. The full name goes in a `rule` label too: rules
//! sharing their first three segments would otherwise make two series with one label set.
//!
//! Exposed as gauges (monotonic): upstream's Go client names the samples exactly as mapped,
//! while an OpenMetrics counter would have to end in `_total`, which dashboards do not query.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::MetricType;

use super::labels::{DecisionOutcome, SharedLabel};
use super::sharded::ShardedCounter;

/// The counts of one rule label.
#[derive(Debug, Default)]
pub struct RuleStats {
    total_hits: ShardedCounter,
    over_limit: ShardedCounter,
    near_limit: ShardedCounter,
    within_limit: ShardedCounter,
    shadow_mode: ShardedCounter,
}

type Key = (SharedLabel, SharedLabel);

/// What one limited decision did to its window, as upstream's stats count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The decision's hits (its cost).
    pub hits: u64,
    /// The limit of the window decided on.
    pub limit: u64,
    /// The window's count after an accepted decision (`limit - remaining`).
    pub used_after: u64,
    /// The count the decision saw before this hit (upstream's "limit before increase");
    /// `u64::MAX` when unknown (the penalty box decided): every hit of a denial is then over.
    pub seen: u64,
}

/// Upstream's per-rule counters. Which labels exist is decided by the caller (the per-rule
/// series cap of `Metrics::detailed_decision`), so this map is bounded by it.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    /// `Arc`s so a rule's resolved series (`RuleSeries`) keeps its own handle.
    rules: RwLock<HashMap<Key, Arc<RuleStats>>>,
    /// `NEAR_LIMIT_RATIO` in millionths (an atomic so tests and `serve` set it after building).
    near_limit_ratio_ppm: AtomicU64,
}

impl UpstreamStats {
    /// Upstream's default `NEAR_LIMIT_RATIO`.
    pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

    pub fn new() -> Self {
        let stats = Self::default();
        stats.set_near_limit_ratio(Self::DEFAULT_NEAR_LIMIT_RATIO);
        stats
    }

    /// `ratio` in `[0, 1]` (checked where it is parsed); clamped here for safety.
    pub fn set_near_limit_ratio(&self, ratio: f64) {
        // In [0, 1e6] after the clamp: the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ppm = (ratio.clamp(0.0, 1.0) * 1_000_000.0).round() as u64;
        self.near_limit_ratio_ppm.store(ppm, Ordering::Relaxed);
    }

    /// Upstream's near-limit threshold: `floor(limit * NEAR_LIMIT_RATIO)`.
    fn near_limit_threshold(&self, limit: u64) -> u64 {
        let ppm = self.near_limit_ratio_ppm.load(Ordering::Relaxed);
        let scaled = u128::from(limit) * u128::from(ppm) / 1_000_000;
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// One limited decision of `usage.hits` under `label`; the hits above the near-limit threshold count as
    /// `near_limit`, as upstream counts them.
    pub fn record(
        &self,
        domain: &Arc<str>,
        label: &Arc<str>,
        outcome: DecisionOutcome,
        usage: Usage,
    ) {
        let key = (
            SharedLabel(Arc::clone(domain)),
            SharedLabel(Arc::clone(label)),
        );
        // Counted under the read lock: no `Arc` of the rule's stats is cloned per decision
        // (its reference count would be one more cache line written by every core).
        if let Some(stats) = self
            .rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            self.count(stats, outcome, usage);
            return;
        }
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let stats = rules.entry(key).or_default();
        self.count(stats, outcome, usage);
    }

    /// The stats of `label`, created if new: what a rule's resolved series keeps, so its later
    /// decisions go to [`Self::count`] without the map.
    pub fn stats_of(&self, domain: &Arc<str>, label: &Arc<str>) -> Arc<RuleStats> {
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let key = (
            SharedLabel(Arc::clone(domain)),
            SharedLabel(Arc::clone(label)),
        );
        Arc::clone(rules.entry(key).or_default())
    }

    /// A denied decision's hits as upstream splits them (`checkOverLimitThreshold`): all
    /// over when the count was at the limit already; else only those past the limit are
    /// over, and those between the near-limit threshold and the limit are near.
    fn over_split(&self, hits: u64, limit: u64, seen: u64) -> (u64, u64) {
        if seen >= limit {
            return (hits, 0);
        }
        let after = seen.saturating_add(hits);
        let threshold = self.near_limit_threshold(limit);
        (
            after.saturating_sub(limit),
            limit - seen.max(threshold).min(limit),
        )
    }

    /// One limited decision in `stats` (see [`Self::record`]).
    pub fn count(&self, stats: &RuleStats, outcome: DecisionOutcome, usage: Usage) {
        let Usage {
            hits,
            limit,
            used_after,
            seen,
        } = usage;
        stats.total_hits.add(hits);
        match outcome {
            DecisionOutcome::WithinLimit => {
                stats.within_limit.add(hits);
                let threshold = self.near_limit_threshold(limit);
                if used_after > threshold {
                    let used_before = used_after.saturating_sub(hits);
                    stats
                        .near_limit
                        .add(used_after - used_before.max(threshold));
                }
            }
            DecisionOutcome::OverLimit => {
                let (over, near) = self.over_split(hits, limit, seen);
                stats.over_limit.add(over);
                stats.near_limit.add(near);
            }
            DecisionOutcome::ShadowOverLimit => {
                let (over, near) = self.over_split(hits, limit, seen);
                stats.over_limit.add(over);
                stats.near_limit.add(near);
                stats.shadow_mode.add(over);
            }
            DecisionOutcome::Unlimited => {}
        }
    }
}

impl UpstreamStats {
    /// Each rule's label (`domain.key_value...`, upstream's statsd key), each stat's name
    /// (`total_hits`, ...) and its count since start.
    pub fn each_count(&self, mut each: impl FnMut(&str, &'static str, u64)) {
        let rules = self.rules.read().unwrap_or_else(PoisonError::into_inner);
        for ((_, label), stats) in rules.iter() {
            for (name, _, counter) in STATS {
                let stat = name
                    .strip_prefix("ratelimit_service_rate_limit_")
                    .unwrap_or(name);
                each(&label.0, stat, counter(stats).get());
            }
        }
    }
}

/// `domain`, `key1`, `key2` as upstream's mapper cuts the statsd key, plus our `rule`.
struct UpstreamLabels<'a> {
    rule: &'a str,
}

impl EncodeLabelSet for UpstreamLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut segments = self.rule.split('.');
        let domain = segments.next().unwrap_or_default();
        let key1 = segments.next().unwrap_or_default();
        let mut labels = vec![("domain", domain), ("key1", key1)];
        if let Some(key2) = segments.next() {
            labels.push(("key2", key2));
        }
        labels.push(("rule", self.rule));
        labels.as_slice().encode(encoder)
    }
}

/// One exported stat: its name, its help, and where a rule keeps its count.
type Stat = (
    &'static str,
    &'static str,
    fn(&RuleStats) -> &ShardedCounter,
);

/// The stat of a `RuleStats` field, each part derived from the field's name so none can drift:
/// `ratelimit_service_rate_limit_<field>` as upstream's mapper names it, a help of `what` and
/// the upstream stat it mirrors, and the field itself.
macro_rules! stat {
    ($field:ident, $what:literal) => {
        (
            concat!("ratelimit_service_rate_limit_", stringify!($field)),
            concat!($what, " (upstream's ", stringify!($field), ")."),
            |s| &s.$field,
        )
    };
}

const STATS: [Stat; 5] = [
    stat!(total_hits, "Hits of a rule"),
    stat!(over_limit, "Hits over a rule's limit, shadow mode included"),
    stat!(
        near_limit,
        "Accepted hits above NEAR_LIMIT_RATIO of a rule's limit"
    ),
    stat!(within_limit, "Hits within a rule's limit"),
    stat!(
        shadow_mode,
        "Hits over a rule's limit answered OK by shadow mode"
    ),
];

impl Collector for UpstreamStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rules = self.rules.read().unwrap_or_else(PoisonError::into_inner);
        if rules.is_empty() {
            return Ok(());
        }
        for (name, help, counter) in STATS {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for ((_, label), stats) in rules.iter() {
                let labels = UpstreamLabels { rule: &label.0 };
                family
                    .encode_family(&labels)?
                    .encode_gauge(&counter(stats).get())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
