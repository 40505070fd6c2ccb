//! Which counter a descriptor counts on, for the admin port's counter inspection: the same
//! matching and identity as a decision (`plan`), without deciding.

use std::sync::Arc;

use super::RateLimiter;
use super::plan::{self, Plan};
use gcounter_engine::InspectedCounter;
use gcounter_engine::cell_key::CounterKey;

/// What a descriptor is, when it is not a counted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCounted {
    UnknownDomain,
    NoRule,
    Unlimited,
}

impl RateLimiter {
    /// The counter `entries` count on in `domain` under the loaded limits (the rule's, as a
    /// request without an override would be counted).
    pub fn inspect_counter(
        &self,
        domain: &str,
        entries: &[(String, String)],
    ) -> Result<InspectedCounter, NotCounted> {
        let limits = self.limits.load();
        let domain = limits.domain(domain).ok_or(NotCounted::UnknownDomain)?;
        let descriptor = plan::descriptor_of(
            entries
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        );
        let plans = plan::plan(domain, std::slice::from_ref(&descriptor), 0);
        match plans.into_iter().next() {
            Some(Plan::Limited(limited)) => {
                let Some(rule) = limited.rule else {
                    return Err(NotCounted::NoRule);
                };
                Ok(InspectedCounter {
                    counter: CounterKey {
                        scope: limited.scope.into_owned(),
                        identifier: limited.identifier,
                        duration_ms: limited.duration_ms,
                    },
                    limit: u64::from(limited.requests_per_unit),
                    penalty_ms: rule.penalty_ms,
                    rule_path: Arc::clone(&rule.path),
                    rule: rule.dump_line(),
                })
            }
            Some(Plan::Unlimited(_)) => Err(NotCounted::Unlimited),
            Some(Plan::NoLimit) | None => Err(NotCounted::NoRule),
        }
    }
}
