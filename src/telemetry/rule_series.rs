//! A rule's own metric series, resolved once per compiled rule instead of once per decision.
//!
//! Counting a decision by its labels hashes them (SipHash, in `prometheus_client`'s family and
//! in the upstream stats' map) behind a read lock, and clones two `Arc`s: the lock word and the
//! reference counts are cache lines every core writes. A rule's labels (its domain and path)
//! are fixed when the config compiles, so the rule keeps the handles here: the first decision
//! of each outcome resolves its series through the family (creating it, exactly as the lookup
//! would), every later one is a load and a per-thread increment.
//!
//! The handles are resolved lazily rather than by the compiler because the config knows no
//! registry; the same compiled config could even be read by two registries (tests), so the
//! handles remember which registry they belong to and another one takes the label lookup.
//! Resolving per outcome on first use keeps the exposition unchanged: a series appears when
//! its first decision is counted, not before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::sharded::ShardedCounter;
use super::upstream_stats::RuleStats;

/// Handles of one rule's series; empty until its first decision. Part of `config::Rule`: a
/// reload compiles new rules, which resolve the same series again (counts carry over, since
/// the family holds them).
#[derive(Default)]
pub struct RuleSeries {
    resolved: OnceLock<Resolved>,
}

pub(super) struct Resolved {
    /// The registry (`Metrics::id`) the handles belong to.
    registry: u64,
    /// `rls_descriptor_decisions_total`, indexed by `DecisionOutcome as usize`.
    pub(super) decisions: [OnceLock<ShardedCounter>; 4],
    /// Upstream's per-rule stats (`upstream_stats`).
    pub(super) upstream: OnceLock<Arc<RuleStats>>,
}

impl RuleSeries {
    /// The handles for the registry `registry`, or `None` if another registry resolved them.
    pub(super) fn resolved(&self, registry: u64) -> Option<&Resolved> {
        let resolved = self.resolved.get_or_init(|| Resolved {
            registry,
            decisions: Default::default(),
            upstream: OnceLock::new(),
        });
        (resolved.registry == registry).then_some(resolved)
    }
}

/// A fresh identity per registry, for [`RuleSeries::resolved`].
pub(super) fn next_registry_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A copy starts empty: handles are resolved by whoever decides with it.
impl Clone for RuleSeries {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// Handles are a cache, not part of what a rule is.
impl PartialEq for RuleSeries {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RuleSeries {}

impl std::fmt::Debug for RuleSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleSeries")
    }
}
