//! An RLQS client's admission of one bucket, as Envoy's `rate_limit_quota` filter decides each
//! request: before the bucket's first assignment, `no_assignment_behavior`; then
//! the assignment (a blanket rule or a token bucket) until its time to live passes; then
//! `expired_assignment_behavior`. A token bucket starts full, fills continuously at
//! `tokens_per_fill ÷ fill_interval` up to `max_tokens`, and an assignment Envoy takes as
//! the same (see `envoy_keeps`) only extends its time to live (its tokens and rate stay).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::QuotaAssignmentAction;

/// What a bucket with no assignment in force does: the filter's `no_assignment_behavior`
/// before the first one, its `expired_assignment_behavior` once one has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fallback {
    /// Fail open: admit every request.
    AllowAll,
    /// Fail closed: deny every request.
    DenyAll,
}

#[derive(Debug)]
enum Rule {
    AllowAll,
    DenyAll,
    Tokens {
        tokens: f64,
        max: f64,
        per_second: f64,
        at: Instant,
    },
}

/// One bucket's admission state.
#[derive(Debug)]
pub struct Quota {
    unassigned: Fallback,
    expired: Fallback,
    assigned: Option<Assigned>,
}

#[derive(Debug)]
struct Assigned {
    strategy: RateLimitStrategy,
    rule: Rule,
    until: Instant,
}

impl Quota {
    pub fn new(unassigned: Fallback, expired: Fallback) -> Self {
        Self {
            unassigned,
            expired,
            assigned: None,
        }
    }

    /// Takes an assignment received at `now`.
    pub fn assign(&mut self, action: &QuotaAssignmentAction, now: Instant) {
        let ttl = action
            .assignment_time_to_live
            .as_ref()
            .map_or(Duration::ZERO, |d| {
                Duration::new(
                    u64::try_from(d.seconds).unwrap_or(0),
                    u32::try_from(d.nanos).unwrap_or(0),
                )
            });
        let strategy = action.rate_limit_strategy.unwrap_or_default();
        let until = now + ttl;
        if let Some(current) = self.assigned.as_mut()
            && now < current.until
            && envoy_keeps(&current.strategy, &strategy)
        {
            current.until = until;
            return;
        }
        let rule = match &strategy.strategy {
            Some(Strategy::TokenBucket(bucket)) => {
                let per_fill = bucket.tokens_per_fill.as_ref().map_or(1, |v| v.value);
                let interval = bucket
                    .fill_interval
                    .as_ref()
                    .map_or(1.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
                let max = f64::from(bucket.max_tokens);
                Rule::Tokens {
                    tokens: max,
                    max,
                    per_second: if interval > 0.0 {
                        f64::from(per_fill) / interval
                    } else {
                        0.0
                    },
                    at: now,
                }
            }
            Some(Strategy::BlanketRule(rule)) if *rule == BlanketRule::DenyAll as i32 => {
                Rule::DenyAll
            }
            // Envoy ignores `requests_per_time_unit`; the service never sends it.
            _ => Rule::AllowAll,
        };
        self.assigned = Some(Assigned {
            strategy,
            rule,
            until,
        });
    }

    /// Whether a request arriving at `now` (never earlier than the previous one) is admitted.
    pub fn admit(&mut self, now: Instant) -> bool {
        let Some(assigned) = self.assigned.as_mut() else {
            return self.unassigned == Fallback::AllowAll;
        };
        if now >= assigned.until {
            return self.expired == Fallback::AllowAll;
        }
        match &mut assigned.rule {
            Rule::AllowAll => true,
            Rule::DenyAll => false,
            Rule::Tokens {
                tokens,
                max,
                per_second,
                at,
            } => {
                let elapsed = now.saturating_duration_since(*at).as_secs_f64();
                *tokens = (*tokens + elapsed * *per_second).min(*max);
                *at = now.max(*at);
                if *tokens >= 1.0 {
                    *tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
        }
    }
}

/// Whether Envoy keeps the assignment in force (its rule and tokens) when `sent` arrives,
/// extending only its time to live: the same blanket rule, or a token bucket that matches on
/// `max_tokens`, `tokens_per_fill` and the fill interval's nanoseconds. Envoy does not compare
/// the interval's seconds, so a bucket that differs only there runs on at the old rate.
fn envoy_keeps(held: &RateLimitStrategy, sent: &RateLimitStrategy) -> bool {
    match (&held.strategy, &sent.strategy) {
        (Some(Strategy::TokenBucket(held)), Some(Strategy::TokenBucket(sent))) => {
            held.max_tokens == sent.max_tokens
                && held.tokens_per_fill == sent.tokens_per_fill
                && held.fill_interval.as_ref().map(|d| d.nanos)
                    == sent.fill_interval.as_ref().map(|d| d.nanos)
        }
        (held, sent) => held == sent,
    }
}

#[cfg(test)]
mod tests;
