//! A read-only view of a domain's compiled tree, for what explains a decision and what lints
//! a config against Envoy's (`crate::explain`): every node with its key, value pattern, rule
//! and place, and the walk of one descriptor with how each entry matched and where it stopped.
//!
//! The walk is the one [`DomainLimits::find_shared`] takes (the exact value, then the first
//! wildcard in config order, then the value-less node); it is not on the request path, so it
//! may allocate and sort what it shows.

use std::sync::Arc;

use super::{DomainLimits, KeyNodes, Level, Node};
use crate::config::{Place, Rule};

/// How a node's `value` matches a request's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValuePattern<'c> {
    /// No `value`: any value.
    Any,
    Exact(&'c str),
    /// A pattern with `*`.
    Wildcard(&'c str),
}

/// One node of the tree: a descriptor of the limits config.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'c> {
    key: &'c str,
    value: ValuePattern<'c>,
    node: &'c Node,
}

impl<'c> NodeView<'c> {
    pub fn key(&self) -> &'c str {
        self.key
    }

    pub fn value(&self) -> ValuePattern<'c> {
        self.value
    }

    /// The rule declared on this node, if any.
    pub fn rule(&self) -> Option<&'c Arc<Rule>> {
        self.node.rule.as_ref()
    }

    /// `share_threshold: true`: every value of the wildcard counts on one counter.
    pub fn shared(&self) -> bool {
        self.node.shared
    }

    pub fn place(&self) -> &'c Place {
        &self.node.place
    }

    /// The nested descriptors, in the order they are declared.
    pub fn children(&self) -> Vec<NodeView<'c>> {
        self.node.children.views()
    }

    /// `key` or `key=value`, as the config writes it.
    pub fn label(&self) -> String {
        match self.value {
            ValuePattern::Any => self.key.to_owned(),
            ValuePattern::Exact(value) | ValuePattern::Wildcard(value) => {
                format!("{}={value}", self.key)
            }
        }
    }
}

/// How one entry of a descriptor matched its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The node's `value` is the entry's value.
    Exact,
    /// The entry's value matched the node's wildcard (the first one, in config order, that
    /// matches).
    Wildcard,
    /// The node has no `value`: any value matches (no exact value nor wildcard did).
    AnyValue,
}

/// One entry's step down the tree.
#[derive(Debug, Clone, Copy)]
pub struct Step<'c> {
    pub node: NodeView<'c>,
    pub how: MatchKind,
}

/// The walk of one descriptor's entries: the nodes they matched, and why it ended.
#[derive(Debug, Clone)]
pub struct Trace<'c> {
    /// One per entry matched, in order; fewer than the entries when the walk stopped.
    pub steps: Vec<Step<'c>>,
    pub end: TraceEnd<'c>,
}

/// Why a walk ended.
#[derive(Debug, Clone)]
pub enum TraceEnd<'c> {
    /// The last entry's node has a rule: it applies.
    Rule(&'c Arc<Rule>),
    /// The last entry's node has no rule (its nested descriptors may have some).
    NoRuleAtLast,
    /// Entry `index` has no node at its level: `candidates` are that level's nodes.
    NoNode {
        index: usize,
        candidates: Vec<NodeView<'c>>,
    },
    /// Entry `index` comes after a node without nested descriptors: the descriptor is deeper
    /// than the tree.
    TooDeep { index: usize },
    /// The descriptor has no entries.
    Empty,
}

impl DomainLimits {
    /// The top-level descriptors, in the order they are declared.
    pub fn top_level(&self) -> Vec<NodeView<'_>> {
        self.root.views()
    }

    /// Walks `entries` down the tree as [`DomainLimits::find_shared`] does, keeping every
    /// step and the reason it ended.
    pub fn trace<'e, I>(&self, entries: I) -> Trace<'_>
    where
        I: IntoIterator<Item = (&'e str, &'e str)>,
    {
        let mut steps = Vec::new();
        let mut level = &self.root;
        let mut entries = entries.into_iter().enumerate().peekable();
        if entries.peek().is_none() {
            return Trace {
                steps,
                end: TraceEnd::Empty,
            };
        }
        while let Some((index, (key, value))) = entries.next() {
            let Some((node, how)) = level.matched(key, value) else {
                return Trace {
                    steps,
                    end: TraceEnd::NoNode {
                        index,
                        candidates: level.views(),
                    },
                };
            };
            steps.push(Step { node, how });
            if entries.peek().is_none() {
                let end = match node.rule() {
                    Some(rule) => TraceEnd::Rule(rule),
                    None => TraceEnd::NoRuleAtLast,
                };
                return Trace { steps, end };
            }
            if node.node.children.is_empty() {
                return Trace {
                    steps,
                    end: TraceEnd::TooDeep { index: index + 1 },
                };
            }
            level = &node.node.children;
        }
        // Not reached: the loop returns on its last entry.
        Trace {
            steps,
            end: TraceEnd::Empty,
        }
    }
}

impl Level {
    /// Every node of the level, sorted by where it is declared (file, then line).
    fn views(&self) -> Vec<NodeView<'_>> {
        let mut views: Vec<NodeView<'_>> = self
            .keys
            .iter()
            .flat_map(|(key, nodes)| nodes.views(key))
            .collect();
        views.sort_by(|a, b| {
            (&a.node.place.file, a.node.place.line).cmp(&(&b.node.place.file, b.node.place.line))
        });
        views
    }

    /// The node an entry matches and how, as [`Level::lookup`] finds it.
    fn matched(&self, key: &str, value: &str) -> Option<(NodeView<'_>, MatchKind)> {
        let (stored_key, nodes) = self.keys.get_key_value(key)?;
        if let Some((exact, node)) = nodes.exact.get_key_value(value) {
            let view = NodeView {
                key: stored_key,
                value: ValuePattern::Exact(exact),
                node,
            };
            return Some((view, MatchKind::Exact));
        }
        if let Some(w) = nodes.wildcards.iter().find(|w| w.glob.matches(value)) {
            let view = NodeView {
                key: stored_key,
                value: ValuePattern::Wildcard(&w.pattern),
                node: &w.node,
            };
            return Some((view, MatchKind::Wildcard));
        }
        nodes.any_value.as_ref().map(|node| {
            let view = NodeView {
                key: stored_key,
                value: ValuePattern::Any,
                node,
            };
            (view, MatchKind::AnyValue)
        })
    }
}

impl KeyNodes {
    fn views<'c>(&'c self, key: &'c str) -> impl Iterator<Item = NodeView<'c>> {
        let exact = self.exact.iter().map(move |(value, node)| NodeView {
            key,
            value: ValuePattern::Exact(value),
            node,
        });
        let wildcards = self.wildcards.iter().map(move |w| NodeView {
            key,
            value: ValuePattern::Wildcard(&w.pattern),
            node: &w.node,
        });
        let any = self.any_value.iter().map(move |node| NodeView {
            key,
            value: ValuePattern::Any,
            node,
        });
        exact.chain(wildcards).chain(any)
    }
}

#[cfg(test)]
mod tests;
