//! A descriptor shape walked down a domain's tree: the rules it can reach, or, when it
//! reaches none, the deepest place it got to and why it stopped there.

use std::net::IpAddr;

use super::shapes::{EntryShape, ValueShape};
use crate::config::{DomainLimits, Glob, NodeView, ValuePattern};

/// Where a shape's walk stopped short of a rule.
#[derive(Debug, Clone)]
pub enum Miss<'c> {
    /// Entry `index` has no node of its key at its level (`parent`: the node above).
    NoKey {
        index: usize,
        parent: Option<NodeView<'c>>,
        level: Vec<NodeView<'c>>,
    },
    /// Entry `index`'s value matches none of the nodes of its key.
    NoValue {
        index: usize,
        same_key: Vec<NodeView<'c>>,
    },
    /// The last entry's node has no rule; `children` are its nested descriptors.
    NoRuleAtLast {
        node: NodeView<'c>,
        children: Vec<NodeView<'c>>,
    },
    /// Entry `index` is past a node without nested descriptors.
    TooDeep { index: usize, node: NodeView<'c> },
}

impl Miss<'_> {
    /// How far the walk got: deeper misses explain more.
    fn depth(&self) -> usize {
        match self {
            Miss::NoKey { index, .. } | Miss::NoValue { index, .. } => *index,
            Miss::NoRuleAtLast { .. } => usize::MAX - 1,
            Miss::TooDeep { index, .. } => *index,
        }
    }
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct Reach<'c> {
    /// Nodes with a rule the shape ends on.
    pub rules: Vec<NodeView<'c>>,
    /// The deepest miss, when no rule is reached.
    pub miss: Option<Miss<'c>>,
}

/// Walks `entries` (in this order) down `domain`'s tree.
pub fn walk<'c>(domain: &'c DomainLimits, entries: &[&EntryShape]) -> Reach<'c> {
    let mut reach = Reach::default();
    step(domain.top_level(), None, entries, 0, &mut reach);
    if !reach.rules.is_empty() {
        reach.miss = None;
    }
    reach
}

fn step<'c>(
    level: Vec<NodeView<'c>>,
    parent: Option<NodeView<'c>>,
    entries: &[&EntryShape],
    index: usize,
    reach: &mut Reach<'c>,
) {
    let Some(entry) = entries.get(index) else {
        return;
    };
    let same_key: Vec<NodeView<'c>> = level
        .iter()
        .filter(|n| n.key() == entry.key)
        .copied()
        .collect();
    if same_key.is_empty() {
        record(
            reach,
            Miss::NoKey {
                index,
                parent,
                level,
            },
        );
        return;
    }
    let matched = matching(&same_key, &entry.value);
    if matched.is_empty() {
        record(reach, Miss::NoValue { index, same_key });
        return;
    }
    let last = index + 1 == entries.len();
    for node in matched {
        if last {
            if node.rule().is_some() {
                reach.rules.push(node);
            } else {
                let children = node.children();
                record(reach, Miss::NoRuleAtLast { node, children });
            }
            continue;
        }
        let children = node.children();
        if children.is_empty() {
            record(
                reach,
                Miss::TooDeep {
                    index: index + 1,
                    node,
                },
            );
            continue;
        }
        step(children, Some(node), entries, index + 1, reach);
    }
}

fn record<'c>(reach: &mut Reach<'c>, miss: Miss<'c>) {
    if reach.miss.as_ref().is_none_or(|m| miss.depth() > m.depth()) {
        reach.miss = Some(miss);
    }
}

/// The nodes of one key a value of `shape` can match.
fn matching<'c>(nodes: &[NodeView<'c>], shape: &ValueShape) -> Vec<NodeView<'c>> {
    match shape {
        // As a request matches: the exact value, else the first wildcard, else no value.
        ValueShape::Known(value) => {
            let exact = nodes
                .iter()
                .find(|n| matches!(n.value(), ValuePattern::Exact(v) if v == value));
            let wildcard = || {
                nodes.iter().find(|n| match n.value() {
                    ValuePattern::Wildcard(pattern) => glob_matches(pattern, value),
                    _ => false,
                })
            };
            let any = || nodes.iter().find(|n| n.value() == ValuePattern::Any);
            exact
                .or_else(wildcard)
                .or_else(any)
                .copied()
                .into_iter()
                .collect()
        }
        ValueShape::Any(_) => nodes.to_vec(),
        ValueShape::Masked(v4, v6) => nodes
            .iter()
            .filter(|n| match n.value() {
                ValuePattern::Exact(value) => is_masked(value, *v4, *v6),
                ValuePattern::Wildcard(_) | ValuePattern::Any => true,
            })
            .copied()
            .collect(),
    }
}

/// Whether `value` is what `masked_remote_address` writes for some address: a network
/// address with the action's prefix length.
pub fn is_masked(value: &str, v4: u8, v6: u8) -> bool {
    let Some((address, len)) = value.split_once('/') else {
        return false;
    };
    let (Ok(address), Ok(len)) = (address.parse::<IpAddr>(), len.parse::<u8>()) else {
        return false;
    };
    let want = if address.is_ipv4() { v4 } else { v6 };
    len == want && crate::envoy_config::evaluate::masked(address, v4, v6) == value
}

/// A wildcard match, as a request's value is matched.
fn glob_matches(pattern: &str, value: &str) -> bool {
    Glob::new(pattern).is_some_and(|glob| glob.matches(value))
}

#[cfg(test)]
mod tests;
