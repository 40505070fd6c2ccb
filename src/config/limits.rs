//! The loaded configuration: per domain, a descriptor tree compiled for lookup.

use std::collections::HashMap;

/// The maps every request walks (domain, then key and value per descriptor entry): foldhash,
/// seeded per process, instead of SipHash, which was a visible share of a decision.
type LookupMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

use super::glob::Glob;
use super::place::Place;
use super::rule::Rule;
pub use bucket::BucketOrderError;

/// Every domain of a configuration. Immutable once loaded; share it in an
/// `Arc` and swap the whole value on reload.
#[derive(Debug, Default)]
pub struct LimitsConfig {
    /// Sorted by name.
    domains: Vec<DomainLimits>,
    by_name: LookupMap<Arc<str>, usize>,
}

impl LimitsConfig {
    /// `domains` must have distinct names (the loader checks).
    pub(crate) fn new(mut domains: Vec<DomainLimits>) -> Self {
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        let by_name = domains
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), i))
            .collect();
        LimitsConfig { domains, by_name }
    }

    pub fn domain(&self, name: &str) -> Option<&DomainLimits> {
        self.by_name.get(name).and_then(|&i| self.domains.get(i))
    }

    /// All domains, sorted by name.
    pub fn domains(&self) -> impl Iterator<Item = &DomainLimits> {
        self.domains.iter()
    }

    pub fn rule_count(&self) -> usize {
        self.domains.iter().map(|d| d.rules.len()).sum()
    }

    /// Text for `GET /rlconfig`: one sorted line per rule, each ending in a
    /// newline, in upstream's format (`domain.key_value.key2: unit=SECOND
    /// requests_per_unit=500, shadow_mode: false`) plus our extras.
    pub fn dump(&self) -> String {
        let mut lines: Vec<String> = self
            .domains
            .iter()
            .flat_map(|d| d.rules.iter().map(|r| r.dump_line()))
            .collect();
        lines.sort();
        let mut out = String::new();
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// The rules of one domain.
#[derive(Debug)]
pub struct DomainLimits {
    name: Arc<str>,
    root: Level,
    /// In config order.
    rules: Vec<Arc<Rule>>,
    /// Where `domain:` is declared: one place per file of a merged domain.
    places: Vec<Place>,
}

impl DomainLimits {
    pub(crate) fn new(name: Arc<str>, root: Level, rules: Vec<Arc<Rule>>, place: Place) -> Self {
        DomainLimits {
            name,
            root,
            rules,
            places: vec![place],
        }
    }

    /// Where the domain is declared (several files when merged), in load order.
    pub fn places(&self) -> &[Place] {
        &self.places
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Adds the descriptors and rules of another file's declaration of this domain (upstream's
    /// `MERGE_DOMAIN_CONFIG`). The loader has checked that their top-level descriptors differ;
    /// its wildcards come after ours, as upstream matches them in load order.
    pub(crate) fn merge(&mut self, other: DomainLimits) {
        self.root.absorb(other.root);
        self.rules.extend(other.rules);
        self.places.extend(other.places);
    }

    /// Every rule of the domain, in config order.
    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules.iter()
    }

    /// The rule for a request descriptor, by envoyproxy/ratelimit's algorithm.
    ///
    /// `entries` are the descriptor's `(key, value)` pairs in order. At each
    /// level the exact `key`+`value` node wins, then the first wildcard value
    /// of that key in config order, then the value-less `key` node. The rule
    /// applies only if it sits on the node matched by the last entry; a
    /// request deeper than the tree matches nothing.
    pub fn find<'e, I>(&self, entries: I) -> Option<&Arc<Rule>>
    where
        I: ExactSizeIterator<Item = (&'e str, &'e str)>,
    {
        self.find_shared(entries).map(|found| found.rule)
    }

    /// [`DomainLimits::find`], with the entries matched by a `share_threshold` wildcard.
    pub fn find_shared<'e, I>(&self, entries: I) -> Option<Found<'_>>
    where
        I: ExactSizeIterator<Item = (&'e str, &'e str)>,
    {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        let mut shared = 0u64;
        for (i, (key, value)) in entries.enumerate() {
            let node = level.lookup(key, value)?;
            // A tree is at most 16 levels deep (the YAML depth cap), far below 64.
            if node.shared && i < 64 {
                shared |= 1 << i;
            }
            if i == last {
                return node.rule.as_ref().map(|rule| Found { rule, shared });
            }
            if node.children.is_empty() {
                return None;
            }
            level = &node.children;
        }
        // Only if the iterator yielded fewer items than it announced.
        None
    }
}

impl DomainLimits {
    /// The metric name of a matched descriptor, as envoyproxy/ratelimit names its stats.
    ///
    /// `detailed` (the rule's `detailed_metric`): `domain.key_value` per entry, the request's
    /// values; an entry matched by a `share_threshold` wildcard writes the pattern instead
    /// (and then entries with an empty value write their key alone). Otherwise, per entry,
    /// `key_value` with: a wildcard's pattern (`share_threshold`), the request's value
    /// (`value_to_metric` on that node, or an exact value), the pattern (other wildcards), or
    /// the key alone (a value-less node without `value_to_metric`). Request values make
    /// these names unbounded: callers cap their series per rule.
    pub fn metric_key<'e, I>(&self, entries: I, detailed: bool, shared: u64) -> String
    where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let mut name = String::from(&*self.name);
        let mut level = Some(&self.root);
        for (key, value) in entries {
            let matched = level.and_then(|l| l.lookup_how(key, value));
            let shared_pattern = match matched {
                Some((node, Matched::Wildcard(pattern))) if node.shared => Some(pattern),
                _ => None,
            };
            let segment = if detailed {
                match shared_pattern {
                    Some(pattern) => Some(pattern),
                    None if shared != 0 && value.is_empty() => None,
                    None => Some(value),
                }
            } else {
                match matched {
                    Some((_, Matched::Exact)) => Some(value),
                    Some((node, Matched::Wildcard(pattern))) => {
                        if node.value_to_metric && !node.shared {
                            Some(value)
                        } else {
                            Some(pattern)
                        }
                    }
                    Some((node, Matched::AnyValue)) => node.value_to_metric.then_some(value),
                    None => None,
                }
            };
            name.push('.');
            name.push_str(key);
            match segment {
                // `detailed` always writes `_value` without sharing, even for an empty value.
                Some(segment) if detailed || !segment.is_empty() => {
                    name.push('_');
                    name.push_str(segment);
                }
                _ => {}
            }
            level = matched.map(|(node, _)| &node.children);
        }
        name
    }
}

/// A matched rule.
#[derive(Debug, Clone, Copy)]
pub struct Found<'c> {
    pub rule: &'c Arc<Rule>,
    /// Bit `i` is set when entry `i` was matched by a `share_threshold` wildcard: its
    /// counter stands for every value of that wildcard, not the request's value.
    pub shared: u64,
}

/// The descriptors of one level, by key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    keys: LookupMap<Box<str>, KeyNodes>,
}

/// The descriptors of one level that share a key.
#[derive(Debug, Default)]
struct KeyNodes {
    exact: LookupMap<Box<str>, Node>,
    /// In config order: the first match wins.
    wildcards: Vec<Wildcard>,
    any_value: Option<Node>,
}

/// A wildcard value node, with its pattern as written (upstream's metric names use it).
#[derive(Debug)]
struct Wildcard {
    glob: Glob,
    pattern: Box<str>,
    node: Node,
}

/// How a request entry matched a node.
#[derive(Debug, Clone, Copy)]
enum Matched<'c> {
    Exact,
    Wildcard(&'c str),
    AnyValue,
}

#[derive(Debug, Default)]
pub(crate) struct Node {
    pub rule: Option<Arc<Rule>>,
    pub children: Level,
    /// `share_threshold: true` (only on a wildcard node).
    pub shared: bool,
    /// `value_to_metric: true`: metric names carry the request's value at this level.
    pub value_to_metric: bool,
    /// Where the descriptor is declared.
    pub place: Place,
}

/// What a descriptor's `value` compiles to.
pub(crate) enum ValueMatch {
    /// No `value` (or an empty one, as upstream): any value.
    Any,
    Exact(Box<str>),
    Wildcard(Glob, Box<str>),
}

impl Level {
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds a node; the caller has already rejected duplicates.
    pub(crate) fn insert(&mut self, key: &str, value: ValueMatch, node: Node) {
        let nodes = self.keys.entry(key.into()).or_default();
        match value {
            ValueMatch::Any => nodes.any_value = Some(node),
            ValueMatch::Exact(value) => {
                nodes.exact.insert(value, node);
            }
            ValueMatch::Wildcard(glob, pattern) => nodes.wildcards.push(Wildcard {
                glob,
                pattern,
                node,
            }),
        }
    }

    /// Moves `other`'s nodes into this level; a node already here (which the loader rules
    /// out) keeps the first one.
    fn absorb(&mut self, other: Level) {
        for (key, theirs) in other.keys {
            let ours = self.keys.entry(key).or_default();
            for (value, node) in theirs.exact {
                ours.exact.entry(value).or_insert(node);
            }
            ours.wildcards.extend(theirs.wildcards);
            if ours.any_value.is_none() {
                ours.any_value = theirs.any_value;
            }
        }
    }

    fn lookup(&self, key: &str, value: &str) -> Option<&Node> {
        self.lookup_how(key, value).map(|(node, _)| node)
    }

    fn lookup_how(&self, key: &str, value: &str) -> Option<(&Node, Matched<'_>)> {
        let nodes = self.keys.get(key)?;
        if let Some(node) = nodes.exact.get(value) {
            return Some((node, Matched::Exact));
        }
        if let Some(w) = nodes.wildcards.iter().find(|w| w.glob.matches(value)) {
            return Some((&w.node, Matched::Wildcard(&w.pattern)));
        }
        nodes
            .any_value
            .as_ref()
            .map(|node| (node, Matched::AnyValue))
    }
}

mod bucket;
#[cfg(test)]
mod tests;
pub(crate) mod tree;
pub(crate) mod yaml;
