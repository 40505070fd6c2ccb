//! The identity of a counter cell: the vocabulary shared by the engine, the regional origin
//! and the global counters, so none of them has to know the others.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The identity of a counter cell, the same in memory, Redis and SQL (DESIGN.md).
///
/// `namespace` and `identifier` come from the limits layer already encoded injectively
/// (length-prefixed), so two different descriptors never share a key whatever bytes they carry.
/// The `Arc<str>` parts are shared with the compiled config: cloning a key costs one allocation
/// (the identifier, and only when it is longer than 24 bytes), not four.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    /// The domain.
    pub workspace: Arc<str>,
    /// The matched rule's path in the descriptor tree.
    pub namespace: Arc<str>,
    /// The request's values for the matched entries. Up to 24 bytes live inline in the key
    /// (most identifiers: addresses, API keys), which saves an allocation per cell.
    pub identifier: compact_str::CompactString,
    pub duration_ms: u64,
    pub sequence: u64,
}

impl Hash for CellKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.borrowed().hash(state);
    }
}

impl CellKey {
    /// Bytes this key makes a structure hold beyond its own `size_of`: the strings behind
    /// it. Counted in full even when the `Arc`s are shared with the config (interned rule
    /// paths): the bound stays conservative, and a request override's namespace, built per
    /// request, is exactly the case it must not miss.
    pub fn heap_bytes(&self) -> usize {
        let identifier = if self.identifier.is_heap_allocated() {
            self.identifier.capacity()
        } else {
            0
        };
        self.workspace.len() + self.namespace.len() + identifier
    }

    /// The borrowed form; hashing goes through it so both forms agree.
    pub fn borrowed(&self) -> CellKeyRef<'_> {
        CellKeyRef::new(
            &self.workspace,
            &self.namespace,
            &self.identifier,
            self.duration_ms,
            self.sequence,
        )
    }
}

/// A borrowed [`CellKey`]: looks a warm cell up without allocating an owned key.
/// It hashes exactly like the owned key (both hash through this type).
///
/// The counter's part of the hash (everything but the sequence) is computed once, when the
/// key is made: a decision looks up two cells of one counter (the current and the previous
/// window), and hashing the strings twice was a visible share of a warm decision.
#[derive(Debug, Clone, Copy)]
pub struct CellKeyRef<'a> {
    pub workspace: &'a Arc<str>,
    pub namespace: &'a Arc<str>,
    pub identifier: &'a str,
    pub duration_ms: u64,
    pub sequence: u64,
    counter_hash: u64,
}

impl<'a> CellKeyRef<'a> {
    pub fn new(
        workspace: &'a Arc<str>,
        namespace: &'a Arc<str>,
        identifier: &'a str,
        duration_ms: u64,
        sequence: u64,
    ) -> Self {
        Self {
            workspace,
            namespace,
            identifier,
            duration_ms,
            sequence,
            counter_hash: counter_hash(workspace, namespace, identifier, duration_ms),
        }
    }

    /// The same counter's cell `sequence` (its hash is reused).
    pub fn with_sequence(self, sequence: u64) -> Self {
        Self { sequence, ..self }
    }

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

/// Identifiers come from requests: a per-process random seed keeps anyone from choosing
/// values that collide in the cell table.
fn counter_hash(workspace: &str, namespace: &str, identifier: &str, duration_ms: u64) -> u64 {
    static SEED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| fastrand::u64(..));
    // One call per field, each seeded by the previous one: field boundaries cannot shift.
    let h = xxh3_64_with_seed(workspace.as_bytes(), *SEED);
    let h = xxh3_64_with_seed(namespace.as_bytes(), h);
    let h = xxh3_64_with_seed(identifier.as_bytes(), h);
    xxh3_64_with_seed(&duration_ms.to_le_bytes(), h)
}

impl PartialEq for CellKeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.counter_hash == other.counter_hash
            && self.sequence == other.sequence
            && self.duration_ms == other.duration_ms
            && self.identifier == other.identifier
            && self.namespace == other.namespace
            && self.workspace == other.workspace
    }
}

impl Eq for CellKeyRef<'_> {}

impl Hash for CellKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.counter_hash);
        state.write_u64(self.sequence);
    }
}

impl quick_cache::Equivalent<CellKey> for CellKeyRef<'_> {
    fn equivalent(&self, key: &CellKey) -> bool {
        self.sequence == key.sequence
            && self.duration_ms == key.duration_ms
            && self.identifier == &*key.identifier
            // The config's own `Arc`s, unless a reload made new ones: compare pointers first.
            && (Arc::ptr_eq(self.namespace, &key.namespace) || **self.namespace == *key.namespace)
            && (Arc::ptr_eq(self.workspace, &key.workspace) || **self.workspace == *key.workspace)
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
