//! From a request descriptor to what the engine must decide: the matched rule (or the
//! request's own override), the counter identity and the cost.

use std::borrow::Cow;
use std::fmt::Write;
use std::sync::Arc;

use compact_str::CompactString;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use smallvec::SmallVec;

use gcounter_engine::Hit;
use gcounter_engine::cell_key::{CounterKeyRef, Scope};

use super::units;
use crate::config::{DomainLimits, Rule, RuleLimit};

/// A descriptor of `entries` (key, value) in order, for what plans a descriptor that no
/// request sent: counter inspection, an RLQS bucket.
pub(crate) fn descriptor_of<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .into_iter()
            .map(|(key, value)| Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// What to do with one descriptor. What comes from the config is borrowed from the
/// request's snapshot of it (no reference count of a shared rule is written per request);
/// [`Plan::into_owned`] holds it instead, for a request that must wait and so outlives
/// the borrow.
#[derive(Debug)]
pub enum Plan<'c> {
    /// No rule matched, or the rule was replaced: OK with no `current_limit`.
    NoLimit,
    /// `unlimited: true`: OK, nothing counted.
    Unlimited(Cow<'c, Arc<Rule>>),
    Limited(Limited<'c>),
}

impl Plan<'_> {
    /// The same plan holding what it borrowed from the config: a request that waits on
    /// the engine keeps its plans across the wait instead of planning again.
    pub fn into_owned(self) -> Plan<'static> {
        match self {
            Plan::NoLimit => Plan::NoLimit,
            Plan::Unlimited(rule) => Plan::Unlimited(Cow::Owned(rule.into_owned())),
            Plan::Limited(limited) => Plan::Limited(limited.into_owned()),
        }
    }

    /// The matched rule, if any (none for a request override).
    fn rule(&self) -> Option<&Arc<Rule>> {
        match self {
            Plan::NoLimit => None,
            Plan::Unlimited(rule) => Some(rule),
            Plan::Limited(limited) => limited.rule.as_deref(),
        }
    }
}

/// Plans' borrows, owned: each `Arc` shared with the config, not copied.
fn owned<T: ?Sized>(borrowed: Cow<'_, Arc<T>>) -> Cow<'static, Arc<T>> {
    Cow::Owned(borrowed.into_owned())
}

/// The plans of one request: inline up to [`INLINE_PLANS`] descriptors (Envoy's requests
/// rarely carry more), so a warm request allocates no list of them.
pub type Plans<'c> = SmallVec<[Plan<'c>; INLINE_PLANS]>;

/// Descriptors a request may have before its per-descriptor lists go to the heap.
pub const INLINE_PLANS: usize = 4;

/// A descriptor that will be counted. What comes from the config is borrowed from it, as
/// in [`Plan`].
#[derive(Debug)]
pub struct Limited<'c> {
    /// The rule's scope (its domain and namespace), or a request override's own (built per
    /// request).
    pub scope: Cow<'c, Arc<Scope>>,
    /// Inline up to 24 bytes: most identifiers (an address, an API key) cost no allocation.
    pub identifier: CompactString,
    pub duration_ms: u64,
    pub requests_per_unit: u32,
    pub unit: crate::config::Unit,
    pub shadow_mode: bool,
    /// The rule's `quota_mode`; never for a request override (as upstream).
    pub quota_mode: bool,
    /// The rule's label for metrics and logs (its path, or for `detailed_metric` and
    /// `value_to_metric` rules a name with request values); `None` for a request override.
    pub rule_path: Option<Cow<'c, Arc<str>>>,
    /// The matched rule; `None` for a request override.
    pub rule: Option<Cow<'c, Arc<Rule>>>,
    pub cost: u64,
    /// Envoy's `is_negative_hits`: give `cost` back (a refund) instead of consuming it.
    pub refund: bool,
}

/// One limit of a limited descriptor: its window and how many hits it allows in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitWindow {
    pub duration_ms: u64,
    pub requests_per_unit: u32,
    pub unit: crate::config::Unit,
}

impl Limited<'_> {
    /// See [`Plan::into_owned`].
    pub fn into_owned(self) -> Limited<'static> {
        Limited {
            scope: owned(self.scope),
            rule_path: self.rule_path.map(owned),
            rule: self.rule.map(owned),
            identifier: self.identifier,
            duration_ms: self.duration_ms,
            requests_per_unit: self.requests_per_unit,
            unit: self.unit,
            shadow_mode: self.shadow_mode,
            quota_mode: self.quota_mode,
            cost: self.cost,
            refund: self.refund,
        }
    }

    /// The engine's hit of this descriptor on one of its limits.
    pub fn hit(&self, window: LimitWindow) -> Hit<'_> {
        Hit {
            counter: CounterKeyRef::new(&self.scope, &self.identifier, window.duration_ms),
            limit: u64::from(window.requests_per_unit),
            cost: self.cost,
            // A request override has no rule: never_below, as upstream.
            exact: self.rule.as_ref().is_some_and(|rule| rule.is_never_above()),
        }
    }

    /// The rule's `name` (`current_limit.name`); none for a request override.
    pub fn name(&self) -> Option<&Arc<str>> {
        self.rule.as_ref().and_then(|rule| rule.name.as_ref())
    }

    /// The descriptor's first (or only) limit.
    pub fn window(&self) -> LimitWindow {
        LimitWindow {
            duration_ms: self.duration_ms,
            requests_per_unit: self.requests_per_unit,
            unit: self.unit,
        }
    }

    /// Whether the rule has several limits (`rate_limits`).
    pub fn has_more_limits(&self) -> bool {
        self.rule
            .as_ref()
            .is_some_and(|rule| !rule.more_limits.is_empty())
    }

    /// Every limit of the descriptor, the first one first, then the rule's other limits in
    /// config order (the fixed order every request consumes them in).
    pub fn windows(&self) -> impl Iterator<Item = LimitWindow> + '_ {
        let more = self.rule.iter().flat_map(|rule| rule.more_limits.iter());
        std::iter::once(self.window()).chain(more.filter_map(|limit| match *limit {
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                unit_multiplier,
            } => Some(LimitWindow {
                duration_ms: crate::config::window_ms(unit, unit_multiplier)?,
                requests_per_unit,
                unit,
            }),
            RuleLimit::Unlimited => None,
        }))
    }
}

/// Namespaces of request overrides start with `!`, which no config namespace does (they
/// start with a length digit), so an override never shares a counter with a config rule.
const OVERRIDE_NAMESPACE: &str = "!override/";

/// Plan every descriptor of a request, then drop the limits that another matched limit
/// `replaces` (as envoyproxy/ratelimit does: an unlimited rule stays unlimited even when it
/// is named in a `replaces`, and still replaces others).
pub fn plan<'c>(
    domain: &'c DomainLimits,
    descriptors: &[RateLimitDescriptor],
    request_hits_addend: u32,
) -> Plans<'c> {
    let mut plans: Plans<'c> = descriptors
        .iter()
        .map(|d| plan_one(domain, d, request_hits_addend))
        .collect();

    // Names, not borrows of `plans`, which the loop below rewrites; only for the rare
    // request whose rules replace others.
    let replaced: SmallVec<[Arc<str>; INLINE_PLANS]> = plans
        .iter()
        .filter_map(Plan::rule)
        .flat_map(|rule| rule.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return plans;
    }
    for plan in &mut plans {
        let is_replaced = match plan {
            Plan::Limited(limited) => limited.name().is_some_and(|name| replaced.contains(name)),
            Plan::NoLimit | Plan::Unlimited(_) => false,
        };
        if is_replaced {
            *plan = Plan::NoLimit;
        }
    }
    plans
}

fn plan_one<'c>(
    domain: &'c DomainLimits,
    descriptor: &RateLimitDescriptor,
    request_hits_addend: u32,
) -> Plan<'c> {
    let cost = cost(descriptor, request_hits_addend);
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    let found = domain.find_shared(entries);
    let rule = found.map(|f| f.rule);

    if let Some(limit) = &descriptor.limit {
        // Validation has rejected UNKNOWN units; stay total anyway.
        let Some(unit) = units::from_proto(limit.unit) else {
            return Plan::NoLimit;
        };
        return Plan::Limited(Limited {
            scope: override_scope(domain, rule, descriptor),
            // As upstream: an override counts the request's own values.
            identifier: identifier(descriptor, 0),
            duration_ms: unit.seconds().saturating_mul(1_000),
            requests_per_unit: limit.requests_per_unit,
            unit,
            // As envoyproxy/ratelimit: an override is never in shadow or quota mode.
            shadow_mode: false,
            quota_mode: false,
            rule_path: None,
            rule: None,
            cost,
            refund: descriptor.is_negative_hits,
        });
    }

    let Some(found) = found else {
        return Plan::NoLimit;
    };
    let rule = found.rule;
    match (&rule.limit, rule.duration_ms()) {
        (
            RuleLimit::Limited {
                requests_per_unit,
                unit,
                ..
            },
            Some(duration_ms),
        ) => Plan::Limited(Limited {
            scope: Cow::Borrowed(&rule.scope),
            identifier: identifier(descriptor, found.shared),
            duration_ms,
            requests_per_unit: *requests_per_unit,
            unit: *unit,
            shadow_mode: rule.shadow_mode,
            quota_mode: rule.quota_mode,
            rule_path: Some(metric_label(domain, rule, descriptor, found.shared)),
            rule: Some(Cow::Borrowed(rule)),
            cost,
            refund: descriptor.is_negative_hits,
        }),
        _ => Plan::Unlimited(Cow::Borrowed(rule)),
    }
}

/// The counter of a request override: the matched rule's, as upstream's (whose cache key is
/// the descriptor's entries, whoever sets the limit), so moving a limit from the config to
/// route metadata keeps its count. The window is the override's unit, part of the counter's
/// identity, so an override of another unit never reads a count of a different window. No
/// rule matched: a namespace under `!override/`, which no config namespace can start with.
fn override_scope<'c>(
    domain: &DomainLimits,
    rule: Option<&'c Arc<Rule>>,
    descriptor: &RateLimitDescriptor,
) -> Cow<'c, Arc<Scope>> {
    if let Some(rule) = rule {
        return Cow::Borrowed(&rule.scope);
    }
    let mut namespace = String::from(OVERRIDE_NAMESPACE);
    for entry in &descriptor.entries {
        let _ = write!(namespace, "{}:{}/", entry.key.len(), entry.key);
    }
    Cow::Owned(Scope::new(Arc::clone(domain.name()), namespace))
}

/// The metric label of a matched rule: its path, or, for `detailed_metric` and
/// `value_to_metric` rules, the name upstream gives the descriptor's stats (request values
/// in it; the caller caps their series per rule).
fn metric_label<'c>(
    domain: &DomainLimits,
    rule: &'c Rule,
    descriptor: &RateLimitDescriptor,
    shared: u64,
) -> Cow<'c, Arc<str>> {
    if !rule.detailed_metric && !rule.value_to_metric {
        return Cow::Borrowed(&rule.path);
    }
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    Cow::Owned(
        domain
            .metric_key(entries, rule.detailed_metric, shared)
            .into(),
    )
}

/// The per-descriptor `hits_addend` wins (0 checks without consuming); otherwise the
/// request's, where 0 means 1. With `is_negative_hits` it is the amount to refund (see
/// [`Limited::refund`]).
fn cost(descriptor: &RateLimitDescriptor, request_hits_addend: u32) -> u64 {
    match &descriptor.hits_addend {
        Some(hits) => hits.value,
        None => u64::from(request_hits_addend.max(1)),
    }
}

/// The request's values, each length-prefixed: injective, so no two value lists share a
/// counter whatever bytes they hold (`["a:b"]` vs `["a", "b"]` differ). An entry matched by a
/// `share_threshold` wildcard (bit `i` of `shared`) is written `*`, which no length prefix
/// starts with: every value of that wildcard shares the counter, and the namespace names
/// the wildcard.
fn identifier(descriptor: &RateLimitDescriptor, shared: u64) -> CompactString {
    let mut len = 0;
    identifier_pieces(descriptor, shared, |piece| len += piece.len());
    // Most identifiers (an address, an API key) fit inline: written on the stack and made
    // into an inline `CompactString` at once (its `push_str` checks inline or heap per call).
    if len <= INLINE_IDENTIFIER {
        let mut bytes = [0u8; INLINE_IDENTIFIER];
        let mut at = 0;
        identifier_pieces(descriptor, shared, |piece| {
            if let Some(to) = bytes.get_mut(at..at + piece.len()) {
                to.copy_from_slice(piece.as_bytes());
            }
            at += piece.len();
        });
        // Whole pieces of `str`, so UTF-8; `None` only if the length above were wrong.
        if let Some(Ok(text)) = bytes.get(..at).map(std::str::from_utf8) {
            return CompactString::from(text);
        }
    }
    let mut identifier = CompactString::with_capacity(len);
    identifier_pieces(descriptor, shared, |piece| identifier.push_str(piece));
    identifier
}

/// What a `CompactString` holds inline.
const INLINE_IDENTIFIER: usize = 24;

/// The identifier's pieces in order: per entry its value's length in decimal, `:` and the
/// value, or `*` for a shared entry.
fn identifier_pieces(descriptor: &RateLimitDescriptor, shared: u64, mut piece: impl FnMut(&str)) {
    for (i, entry) in descriptor.entries.iter().enumerate() {
        if i < 64 && shared & (1 << i) != 0 {
            piece("*");
            continue;
        }
        let mut digits = [0u8; 20];
        piece(decimal(&mut digits, entry.value.len()));
        piece(":");
        piece(&entry.value);
    }
}

/// `n` in decimal, written into `digits`.
fn decimal(digits: &mut [u8; 20], mut n: usize) -> &str {
    let mut start = digits.len();
    loop {
        start -= 1;
        if let Some(digit) = digits.get_mut(start) {
            *digit = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || start == 0 {
            break;
        }
    }
    // ASCII digits.
    digits
        .get(start..)
        .and_then(|ascii| std::str::from_utf8(ascii).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
