//! The order of a quota bucket's entries.
//!
//! An RLQS bucket id is a map (`{tenant: acme, user: alice}`): its entries have no order, but
//! a descriptor's do, and the tree of a domain is keyed by that order. The order is taken
//! from the tree: the entries are the descriptor of the one path from the root that uses
//! every entry once (each level matched by one entry's key and value, as a request's
//! descriptor is matched) and ends on a node with a rule. No such path: the bucket matches
//! no rule. Two such paths are ambiguous, and refused rather than guessed: a guess could
//! count a request on another rule's counter.

use super::{DomainLimits, Level};

/// Nodes a search may visit before it gives up: a config is bounded, but a tree whose every
/// level holds many of a bucket's keys could make the search try many orders.
const MAX_VISITS: usize = 10_000;

/// Why a bucket's entries have no order in a domain's tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketOrderError {
    #[error("the bucket id has no entries")]
    Empty,
    #[error("no descriptor path with a rule uses exactly the entries {keys:?}")]
    NoMatch { keys: Vec<String> },
    #[error(
        "the entries match two descriptor paths, {first:?} and {second:?}: the order is ambiguous"
    )]
    Ambiguous {
        first: Vec<String>,
        second: Vec<String>,
    },
    #[error("the entries {keys:?} match too many partial descriptor paths to order them")]
    TooComplex { keys: Vec<String> },
}

/// The search for the paths that use every entry.
struct Search<'b> {
    entries: Vec<(&'b str, &'b str)>,
    used: Vec<bool>,
    path: Vec<usize>,
    found: Vec<Vec<usize>>,
    visits: usize,
}

impl<'b> Search<'b> {
    /// Extends `path` from `level`; stops once two complete paths are found or the visits
    /// run out.
    fn walk(&mut self, level: &Level) {
        for i in 0..self.entries.len() {
            if self.found.len() > 1 || self.visits >= MAX_VISITS {
                return;
            }
            if self.used.get(i).copied().unwrap_or(true) {
                continue;
            }
            let Some(&(key, value)) = self.entries.get(i) else {
                continue;
            };
            let Some(node) = level.lookup(key, value) else {
                continue;
            };
            self.visits += 1;
            self.set_used(i, true);
            self.path.push(i);
            if self.path.len() == self.entries.len() {
                if node.rule.is_some() {
                    self.found.push(self.path.clone());
                }
            } else if !node.children.is_empty() {
                self.walk(&node.children);
            }
            self.path.pop();
            self.set_used(i, false);
        }
    }

    fn set_used(&mut self, i: usize, used: bool) {
        if let Some(slot) = self.used.get_mut(i) {
            *slot = used;
        }
    }

    fn keys(&self, path: &[usize]) -> Vec<String> {
        path.iter()
            .filter_map(|&i| self.entries.get(i).map(|(key, _)| (*key).to_owned()))
            .collect()
    }
}

impl DomainLimits {
    /// The bucket's `(key, value)` entries in the order the domain's tree gives them (see the
    /// module doc), ready to be matched as a descriptor's.
    pub fn order_bucket<'b>(
        &self,
        bucket: impl IntoIterator<Item = (&'b str, &'b str)>,
    ) -> Result<Vec<(&'b str, &'b str)>, BucketOrderError> {
        let mut entries: Vec<(&'b str, &'b str)> = bucket.into_iter().collect();
        if entries.is_empty() {
            return Err(BucketOrderError::Empty);
        }
        // Sorted so that the search and its errors do not depend on the map's order.
        entries.sort_unstable();
        let mut search = Search {
            used: vec![false; entries.len()],
            path: Vec::with_capacity(entries.len()),
            found: Vec::new(),
            visits: 0,
            entries,
        };
        search.walk(&self.root);
        let all: Vec<usize> = (0..search.entries.len()).collect();
        match search.found.as_slice() {
            [only] => Ok(only
                .iter()
                .filter_map(|&i| search.entries.get(i).copied())
                .collect()),
            [first, second, ..] => Err(BucketOrderError::Ambiguous {
                first: search.keys(first),
                second: search.keys(second),
            }),
            [] if search.visits >= MAX_VISITS => Err(BucketOrderError::TooComplex {
                keys: search.keys(&all),
            }),
            [] => Err(BucketOrderError::NoMatch {
                keys: search.keys(&all),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
