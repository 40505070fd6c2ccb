//! The loaded configuration: per domain, a descriptor tree compiled for lookup.

use std::collections::HashMap;

/// The maps every request walks (domain, then key and value per descriptor entry): foldhash,
/// seeded per process, instead of SipHash, which was a visible share of a decision.
type LookupMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

use super::glob::Glob;
use super::rule::Rule;

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
}

impl DomainLimits {
    pub(crate) fn new(name: Arc<str>, root: Level, rules: Vec<Arc<Rule>>) -> Self {
        DomainLimits { name, root, rules }
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

#[cfg(test)]
mod tests {
    use super::super::load::load_str;
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn config_is_send_and_sync() {
        assert_send_sync::<LimitsConfig>();
        assert_send_sync::<Arc<Rule>>();
    }

    /// Loads one domain `d`.
    fn domain(yaml: &str) -> DomainLimits {
        let config = match load_str("test.yaml", yaml) {
            Ok(config) => config,
            Err(e) => panic!("test config rejected:\n{e}"),
        };
        let mut domains = config.domains;
        assert_eq!(domains.len(), 1);
        domains.remove(0)
    }

    /// The `name` of the rule found for `entries`.
    fn hit(d: &DomainLimits, entries: &[(&str, &str)]) -> Option<String> {
        d.find(entries.iter().copied())
            .map(|r| r.name.as_deref().unwrap_or("<unnamed>").to_owned())
    }

    fn limit(name: &str) -> String {
        format!("rate_limit: {{unit: second, requests_per_unit: 1, name: {name}}}")
    }

    /// Names as upstream's `config_test.go` (`TestValueToMetric_*`) expects them.
    #[test]
    fn metric_keys_as_upstream_names_stats() {
        let d = domain(
            "domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: pre*
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: pre*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: s
    value: pre*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: n
    descriptors:
      - key: leaf
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        let key = |entries: &[(&str, &str)]| {
            let found = d.find_shared(entries.iter().copied());
            let (detailed, shared) =
                found.map_or((false, 0), |f| (f.rule.detailed_metric, f.shared));
            d.metric_key(entries.iter().copied(), detailed, shared)
        };
        assert_eq!(key(&[("k1", "A"), ("k2", "foo")]), "d.k1_A.k2");
        assert_eq!(
            key(&[("m1", "X"), ("m2", "Y"), ("m3", "Z")]),
            "d.m1.m2_Y.m3"
        );
        assert_eq!(key(&[("w", "prefix")]), "d.w_prefix");
        assert_eq!(key(&[("p", "prefix")]), "d.p_pre*");
        assert_eq!(key(&[("s", "prefix")]), "d.s_pre*");
        // Detailed: every entry's value, nested included.
        assert_eq!(key(&[("n", "a"), ("leaf", "b")]), "d.n_a.leaf_b");
        assert_eq!(key(&[("n", ""), ("leaf", "b")]), "d.n_.leaf_b");
    }

    #[test]
    fn exact_beats_wildcard_beats_any_value() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: path
    {}
  - key: path
    value: /foo/*
    {}
  - key: path
    value: /foo/bar
    {}
",
            limit("any"),
            limit("wild"),
            limit("exact")
        ));
        assert_eq!(hit(&d, &[("path", "/foo/bar")]).as_deref(), Some("exact"));
        assert_eq!(hit(&d, &[("path", "/foo/baz")]).as_deref(), Some("wild"));
        assert_eq!(hit(&d, &[("path", "/foo/")]).as_deref(), Some("wild"));
        assert_eq!(hit(&d, &[("path", "/other")]).as_deref(), Some("any"));
        assert_eq!(hit(&d, &[("path", "")]).as_deref(), Some("any"));
    }

    #[test]
    fn wildcards_in_config_order() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: path
    value: /api/*
    {}
  - key: path
    value: /api/v1/*
    {}
",
            limit("first"),
            limit("second")
        ));
        // Both match; the first one written wins, not the longest.
        assert_eq!(hit(&d, &[("path", "/api/v1/x")]).as_deref(), Some("first"));
    }

    #[test]
    fn wildcard_in_the_middle() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: path
    value: \"/api/*/users\"
    {}
",
            limit("users")
        ));
        assert_eq!(
            hit(&d, &[("path", "/api/v2/users")]).as_deref(),
            Some("users")
        );
        assert_eq!(hit(&d, &[("path", "/api/v2/users/7")]), None);
        assert_eq!(hit(&d, &[("path", "/api/v2/groups")]), None);
    }

    #[test]
    fn limit_applies_only_at_the_last_entry() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: a
    {}
    descriptors:
      - key: b
        {}
",
            limit("a"),
            limit("a.b")
        ));
        assert_eq!(hit(&d, &[("a", "1")]).as_deref(), Some("a"));
        assert_eq!(hit(&d, &[("a", "1"), ("b", "2")]).as_deref(), Some("a.b"));
        // The rule on `a` does not apply to a longer request.
        assert_eq!(hit(&d, &[("a", "1"), ("c", "2")]), None);
    }

    #[test]
    fn request_deeper_than_config() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: key
    value: value
    {}
",
            limit("shallow")
        ));
        assert_eq!(hit(&d, &[("key", "value")]).as_deref(), Some("shallow"));
        // Upstream's example 4: a two-entry request does not match.
        assert_eq!(hit(&d, &[("key", "value"), ("subkey", "subvalue")]), None);
    }

    #[test]
    fn intermediate_nodes_without_limit() {
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        {}
",
            limit("sub")
        ));
        assert_eq!(hit(&d, &[("key", "value")]), None);
        assert_eq!(
            hit(&d, &[("key", "value"), ("subkey", "x")]).as_deref(),
            Some("sub")
        );
        assert_eq!(hit(&d, &[("key", "other"), ("subkey", "x")]), None);
    }

    #[test]
    fn unknown_key_and_empty_request() {
        let d = domain(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    {}\n",
            limit("a")
        ));
        assert_eq!(hit(&d, &[("b", "1")]), None);
        assert_eq!(hit(&d, &[]), None);
    }

    #[test]
    fn keys_and_values_are_case_sensitive() {
        let d = domain(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    value: X\n    {}\n",
            limit("a")
        ));
        assert_eq!(hit(&d, &[("a", "X")]).as_deref(), Some("a"));
        assert_eq!(hit(&d, &[("a", "x")]), None);
        assert_eq!(hit(&d, &[("A", "X")]), None);
    }

    #[test]
    fn a_more_specific_branch_without_the_child_does_not_fall_back() {
        // Upstream picks one node per level and never backtracks.
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: user
        value: bob
        {}
  - key: tenant
    descriptors:
      - key: user
        {}
",
            limit("acme-bob"),
            limit("any-user")
        ));
        assert_eq!(
            hit(&d, &[("tenant", "acme"), ("user", "bob")]).as_deref(),
            Some("acme-bob")
        );
        assert_eq!(hit(&d, &[("tenant", "acme"), ("user", "eve")]), None);
        assert_eq!(
            hit(&d, &[("tenant", "x"), ("user", "eve")]).as_deref(),
            Some("any-user")
        );
    }

    #[test]
    fn distinct_keys_do_not_collide_like_upstream_key_value() {
        // Upstream joins key and value with `_`: these would be one entry.
        let d = domain(&format!(
            "domain: d
descriptors:
  - key: a_b
    value: c
    {}
  - key: a
    value: b_c
    {}
",
            limit("a_b=c"),
            limit("a=b_c")
        ));
        assert_eq!(hit(&d, &[("a_b", "c")]).as_deref(), Some("a_b=c"));
        assert_eq!(hit(&d, &[("a", "b_c")]).as_deref(), Some("a=b_c"));
        let rules: Vec<_> = d.rules().collect();
        assert_ne!(rules[0].namespace, rules[1].namespace);
    }

    #[test]
    fn lookup_and_dump_across_domains() {
        let config = super::super::load::load_sources(&[
            (
                "b.yaml",
                "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
            ),
            (
                "a.yaml",
                "domain: a\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: u\n    rate_limit: {unlimited: true}\n",
            ),
        ]);
        let config = match config {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        let names: Vec<&str> = config.domains().map(|d| &**d.name()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(config.domain("a").is_some());
        assert!(config.domain("c").is_none());
        assert_eq!(config.rule_count(), 3);
        assert_eq!(
            config.dump(),
            "a.k_v: unit=SECOND requests_per_unit=5, shadow_mode: false\n\
             a.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true\n\
             b.k: unit=MINUTE requests_per_unit=3, shadow_mode: false\n"
        );
    }

    #[test]
    fn empty_config() {
        let config = LimitsConfig::default();
        assert_eq!(config.rule_count(), 0);
        assert!(config.domain("x").is_none());
        assert_eq!(config.dump(), "");
    }
}
