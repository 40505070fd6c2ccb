//! From a bucket id to the counters it counts on: the same rule, the same counter identity
//! and the same limits as RLS v3 gives the descriptor with those entries, so one limit holds
//! whichever protocol its traffic comes through.

use std::sync::Arc;

use gcounter_engine::cell_key::CounterKey;

use crate::config::{BucketOrderError, LimitsConfig};
use crate::rls::plan::{self, Plan};

/// One limit a bucket counts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketCounter {
    pub counter: CounterKey,
    /// Requests per window of `counter.duration_ms`.
    pub limit: u64,
}

/// What a bucket is, against one limits config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Counted on every counter of the matched rule (several for `rate_limits`), the first
    /// one naming the bucket's group.
    Counted {
        /// Shared with the bucket's group on the board, which stores them once.
        counters: Arc<[BucketCounter]>,
        /// The rule's `shadow_mode` (or the service's): counted, always allowed.
        shadow: bool,
        /// The rule's `guarantee: never_above`: counted, always denied (token buckets let
        /// Envoy admit a share on its own before it reports, which could go above the limit).
        never_above: bool,
        /// The rule's label (its path) for logs and `/counters`.
        rule_path: Arc<str>,
    },
    /// `unlimited: true`: allowed, nothing counted.
    Unlimited,
    /// No rule counts it: the unmatched answer (`--rlqs-unmatched`).
    Unmatched(Unmatched),
}

/// Why a bucket matched no rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmatched {
    #[error("no domain {0:?} in the limits config")]
    UnknownDomain(String),
    #[error(transparent)]
    Order(#[from] BucketOrderError),
    #[error("no rule on the descriptor the entries make")]
    NoRule,
}

/// The resolution in `limits` for `domain` of the bucket with these entries.
pub fn resolve<'a>(
    limits: &LimitsConfig,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    service_shadow: bool,
) -> Resolution {
    let Some(domain_limits) = limits.domain(domain) else {
        return Resolution::Unmatched(Unmatched::UnknownDomain(domain.to_owned()));
    };
    let ordered = match domain_limits.order_bucket(entries) {
        Ok(ordered) => ordered,
        Err(error) => return Resolution::Unmatched(error.into()),
    };
    let descriptor = plan::descriptor_of(ordered);
    let plans = plan::plan(domain_limits, std::slice::from_ref(&descriptor), 1);
    match plans.into_iter().next() {
        Some(Plan::Limited(limited)) => Resolution::Counted {
            counters: limited
                .windows()
                .map(|window| BucketCounter {
                    counter: CounterKey {
                        scope: Arc::clone(&limited.scope),
                        identifier: limited.identifier.clone(),
                        duration_ms: window.duration_ms,
                    },
                    limit: u64::from(window.requests_per_unit),
                })
                .collect(),
            shadow: limited.shadow_mode || service_shadow,
            never_above: limited
                .rule
                .as_ref()
                .is_some_and(|rule| rule.is_never_above()),
            rule_path: limited
                .rule_path
                .as_deref()
                .map_or_else(|| Arc::clone(domain_limits.name()), Arc::clone),
        },
        Some(Plan::Unlimited(_)) => Resolution::Unlimited,
        Some(Plan::NoLimit) | None => Resolution::Unmatched(Unmatched::NoRule),
    }
}

#[cfg(test)]
mod tests;
