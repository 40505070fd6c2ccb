//! The identity of a counter cell: the vocabulary shared by the engine, the regional origin
//! and the global counters, so none of them has to know the others.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The identity of a counter cell, the same in memory, Redis and SQL (DESIGN.md).
///
/// `namespace` and `identifier` come from the limits layer already encoded injectively
/// (length-prefixed), so two different descriptors never share a key whatever bytes they carry.
/// The `Arc<str>` parts are shared with the compiled config: cloning a key costs one allocation
/// (the identifier), not four.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    /// The domain.
    pub workspace: Arc<str>,
    /// The matched rule's path in the descriptor tree.
    pub namespace: Arc<str>,
    /// The request's values for the matched entries.
    pub identifier: Box<str>,
    pub duration_ms: u64,
    pub sequence: u64,
}

impl Hash for CellKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.borrowed().hash(state);
    }
}

impl CellKey {
    /// The borrowed form; hashing goes through it so both forms agree.
    pub fn borrowed(&self) -> CellKeyRef<'_> {
        CellKeyRef {
            workspace: &self.workspace,
            namespace: &self.namespace,
            identifier: &self.identifier,
            duration_ms: self.duration_ms,
            sequence: self.sequence,
        }
    }
}

/// A borrowed [`CellKey`]: looks a warm cell up without allocating an owned key.
/// It hashes exactly like the owned key (both hash through this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellKeyRef<'a> {
    pub workspace: &'a Arc<str>,
    pub namespace: &'a Arc<str>,
    pub identifier: &'a str,
    pub duration_ms: u64,
    pub sequence: u64,
}

impl CellKeyRef<'_> {
    pub fn to_owned_key(&self) -> CellKey {
        CellKey {
            workspace: Arc::clone(self.workspace),
            namespace: Arc::clone(self.namespace),
            identifier: self.identifier.into(),
            duration_ms: self.duration_ms,
            sequence: self.sequence,
        }
    }
}

impl quick_cache::Equivalent<CellKey> for CellKeyRef<'_> {
    fn equivalent(&self, key: &CellKey) -> bool {
        *self == key.borrowed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn borrowed_and_owned_keys_hash_alike() {
        let key = CellKey {
            workspace: "d".into(),
            namespace: "1:k/".into(),
            identifier: "1:v".into(),
            duration_ms: 1_000,
            sequence: 7,
        };
        let s = std::collections::hash_map::RandomState::new();
        assert_eq!(s.hash_one(&key), s.hash_one(key.borrowed()));
        assert_eq!(key.borrowed().to_owned_key(), key);
    }
}
