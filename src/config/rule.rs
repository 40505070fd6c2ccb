//! A rate-limit rule: what a matched descriptor is limited to.

use std::fmt::Write as _;
use std::sync::Arc;

use gcounter_engine::cell_key::Scope;

use super::place::Place;
use super::unit::Unit;
use crate::telemetry::RuleSeries;

/// The limit of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleLimit {
    /// Always OK; never counted (`unlimited: true`).
    Unlimited,
    /// At most `requests_per_unit` per window of `unit × unit_multiplier`;
    /// `requests_per_unit: 0` is always over.
    Limited {
        requests_per_unit: u32,
        unit: Unit,
        /// At least 1 (validated at load).
        unit_multiplier: u32,
    },
}

/// A rule declared by a descriptor with a `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Injective encoding of the descriptor path from the domain root to this
    /// rule: per node `{len}:{key}`, then `={len}:{value}` if it has a value
    /// pattern, then `/` (lengths in bytes), e.g. `6:tenant=2:a*/4:path/`.
    /// Distinct rules never share a counter, whatever their keys hold. With the domain,
    /// the scope of every counter of the rule (one allocation shared by all their keys).
    pub scope: Arc<Scope>,
    /// The limit (`rate_limit`), or the first of `rate_limits`.
    pub limit: RuleLimit,
    /// The other limits of `rate_limits` (our extension), in config order; empty for
    /// `rate_limit`. Each is `Limited` with a window of its own, so each counts on its own
    /// counter (the duration is part of the counter identity).
    pub more_limits: Box<[RuleLimit]>,
    pub name: Option<Arc<str>>,
    /// Names of the rules this one replaces.
    pub replaces: Box<[Arc<str>]>,
    pub shadow_mode: bool,
    /// A quota: over its limit, the request is OVER_LIMIT only if every quota descriptor of
    /// the request is over (upstream's `quota_mode`).
    pub quota_mode: bool,
    /// The descriptor's `metadata` (a mapping), merged into the response's dynamic metadata
    /// when this rule passes. Kept as JSON: the config knows no protobuf.
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    pub detailed_metric: bool,
    /// A descriptor on this rule's path has `value_to_metric: true`: its metric name carries
    /// request values (see `DomainLimits::metric_key`).
    pub value_to_metric: bool,
    /// `penalty` (our extension): a client over this limit stays denied this many ms; 0 for
    /// none.
    pub penalty_ms: u64,
    /// `guarantee` (our extension), for every limit of the rule: `never_above` is decided
    /// exactly and never shared out as RLQS token buckets.
    pub guarantee: super::Guarantee,
    /// Human-readable path as upstream's stats key (`domain.key_value.key2`);
    /// not injective, for logs and metrics only.
    pub path: Arc<str>,
    /// The rule's metric series under `path`, resolved on its first decision (no label
    /// lookup per decision).
    pub series: RuleSeries,
    /// Where its descriptor is declared.
    pub place: Place,
}

impl RuleLimit {
    /// Window length in milliseconds (`u64::MAX` past it); `None` when unlimited.
    pub fn window_ms(&self) -> Option<u64> {
        match *self {
            RuleLimit::Unlimited => None,
            RuleLimit::Limited {
                unit,
                unit_multiplier,
                ..
            } => window_ms(unit, unit_multiplier).or(Some(u64::MAX)),
        }
    }
}

impl Rule {
    /// The rule's namespace (see [`Rule::scope`]).
    pub fn namespace(&self) -> &Arc<str> {
        &self.scope.namespace
    }

    /// Window length in milliseconds of the rule's first limit; `None` when unlimited.
    pub fn duration_ms(&self) -> Option<u64> {
        self.limit.window_ms()
    }

    /// What operators see the rule as: its `name`, or its path when it has none.
    pub fn label(&self) -> &Arc<str> {
        self.name.as_ref().unwrap_or(&self.path)
    }

    pub fn is_unlimited(&self) -> bool {
        matches!(self.limit, RuleLimit::Unlimited)
    }

    /// Every limit of the rule: `limit`, then `more_limits`.
    pub fn limits(&self) -> impl Iterator<Item = &RuleLimit> {
        std::iter::once(&self.limit).chain(self.more_limits.iter())
    }

    /// One line of `/rlconfig`, in upstream's format plus our extras.
    pub(crate) fn dump_line(&self) -> String {
        let mut line = match self.limit {
            RuleLimit::Unlimited => format!(
                "{}: unit=UNKNOWN requests_per_unit=0, shadow_mode: {}, unlimited: true",
                self.path, self.shadow_mode
            ),
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier,
            } => {
                let mut line = format!(
                    "{}: unit={} requests_per_unit={}, shadow_mode: {}",
                    self.path,
                    unit.as_proto_name(),
                    requests_per_unit,
                    self.shadow_mode
                );
                if unit_multiplier != 1 {
                    line.push_str(&format!(", unit_multiplier: {unit_multiplier}"));
                }
                line
            }
        };
        for limit in &self.more_limits {
            if let RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier,
            } = limit
            {
                line.push_str(&format!(
                    ", and unit={} requests_per_unit={requests_per_unit}",
                    unit.as_proto_name()
                ));
                if *unit_multiplier != 1 {
                    line.push_str(&format!(" unit_multiplier: {unit_multiplier}"));
                }
            }
        }
        if let Some(name) = &self.name {
            line.push_str(&format!(", name: {name}"));
        }
        if !self.replaces.is_empty() {
            line.push_str(&format!(", replaces: {}", self.replaces.join(",")));
        }
        if self.quota_mode {
            line.push_str(", quota_mode: true");
        }
        if self.detailed_metric {
            line.push_str(", detailed_metric: true");
        }
        if self.penalty_ms > 0 {
            let penalty = std::time::Duration::from_millis(self.penalty_ms);
            line.push_str(&format!(
                ", penalty: {}",
                humantime::format_duration(penalty)
            ));
        }
        if self.guarantee == super::Guarantee::NeverAbove {
            line.push_str(", guarantee: never_above");
        }
        line
    }

    /// Whether the rule never admits above its limit (`guarantee: never_above`).
    pub fn is_never_above(&self) -> bool {
        self.guarantee == super::Guarantee::NeverAbove
    }
}

/// `unit × multiplier` in milliseconds, `None` on overflow.
pub(crate) fn window_ms(unit: Unit, multiplier: u32) -> Option<u64> {
    unit.seconds()
        .checked_mul(u64::from(multiplier))?
        .checked_mul(1000)
}

/// Appends one node of a rule's path: `{len}:{key}` then `={len}:{value}` if
/// the node has a value pattern, then `/`. Lengths are in bytes, so the
/// reader always knows where a key or value ends and the encoding of a path
/// is injective.
pub(crate) fn push_namespace_segment(namespace: &mut String, key: &str, value: Option<&str>) {
    // Writing to a String cannot fail.
    let _ = write!(namespace, "{}:{}", key.len(), key);
    if let Some(value) = value {
        let _ = write!(namespace, "={}:{}", value.len(), value);
    }
    namespace.push('/');
}

#[cfg(test)]
mod tests;
