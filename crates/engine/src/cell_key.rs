//! The identity of a counter (`CounterKey`) and of one of its window cells (`CellKey`: the
//! counter and a window sequence): the vocabulary shared by the engine, the regional origin
//! and the global counters, so none of them has to know the others.
//!
//! A `CounterKey` is what a `Hit` names and what strict mode is keyed by; `CounterKeyRef` and
//! `CellKeyRef` borrow the same parts, so a lookup builds no owned key. Each key carries its
//! seeded hash, computed once: the cell table's hasher (`PrehashedKeys`) only mixes in the
//! sequence.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What every counter of one rule shares: the domain (`workspace`) and the rule's path in
/// the descriptor tree (`namespace`), behind one pointer in each key.
///
/// Every live cell, replay-queue entry and strict-mode entry holds a key: as two `Arc<str>`
/// (16 bytes each) they made a `CellKey` 72 bytes and a slot of the cell table 104; as one
/// thin `Arc<Scope>` the key is 48 bytes and the slot 80, 24 bytes less per live cell. The
/// compiled config makes one scope per rule, so a key costs no allocation for it: cloning
/// one bumps the scope's count.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope {
    /// The domain.
    pub workspace: Arc<str>,
    /// The matched rule's path in the descriptor tree.
    pub namespace: Arc<str>,
}

impl Scope {
    pub fn new(workspace: impl Into<Arc<str>>, namespace: impl Into<Arc<str>>) -> Arc<Self> {
        Arc::new(Self {
            workspace: workspace.into(),
            namespace: namespace.into(),
        })
    }
}

/// Whether two scopes name the same rule: the config's own scope, unless a reload made a new
/// one, so the pointers are compared first.
fn same_scope(a: &Arc<Scope>, b: &Arc<Scope>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// The identity of a counter cell, the same in memory, Redis and SQL (docs/design.md): its
/// counter ([`CellKey::counter`], a [`CounterKey`]) and the window's `sequence`.
///
/// `namespace` and `identifier` come from the limits layer already encoded injectively
/// (length-prefixed), so two different descriptors never share a key whatever bytes they carry.
/// The [`Scope`] is shared with the compiled config: cloning a key costs one allocation (the
/// identifier, and only when it is longer than 24 bytes), not four.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    /// The domain and the rule.
    pub scope: Arc<Scope>,
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
    /// A key with a scope of its own (decoded from a store, tests); the engine's keys share
    /// their rule's ([`CellKey::in_scope`]).
    pub fn new(
        workspace: &str,
        namespace: &str,
        identifier: &str,
        duration_ms: u64,
        sequence: u64,
    ) -> Self {
        Self::in_scope(
            Scope::new(workspace, namespace),
            identifier,
            duration_ms,
            sequence,
        )
    }

    pub fn in_scope(scope: Arc<Scope>, identifier: &str, duration_ms: u64, sequence: u64) -> Self {
        Self {
            scope,
            identifier: identifier.into(),
            duration_ms,
            sequence,
        }
    }

    /// The domain.
    pub fn workspace(&self) -> &Arc<str> {
        &self.scope.workspace
    }

    /// The matched rule's path in the descriptor tree.
    pub fn namespace(&self) -> &Arc<str> {
        &self.scope.namespace
    }

    /// Bytes this key makes a structure hold beyond its own `size_of`: the strings behind
    /// it. The scope's strings are counted in full even when shared with the config: the
    /// bound stays conservative, and a request override's namespace, built per request, is
    /// exactly the case it must not miss.
    pub fn heap_bytes(&self) -> usize {
        strings_heap_bytes(&self.scope, &self.identifier)
    }

    /// The counter this cell belongs to.
    pub fn counter(&self) -> CounterKeyRef<'_> {
        CounterKeyRef::new(&self.scope, &self.identifier, self.duration_ms)
    }

    /// The borrowed form; hashing goes through it so both forms agree.
    pub fn borrowed(&self) -> CellKeyRef<'_> {
        self.counter().cell(self.sequence)
    }
}

/// A counter's identity: a [`CellKey`] without its window sequence. Strict mode is keyed by
/// it (it outlives a window); a decision derives the current and the previous cell from it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CounterKey {
    pub scope: Arc<Scope>,
    pub identifier: compact_str::CompactString,
    pub duration_ms: u64,
}

impl Hash for CounterKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.borrowed().hash(state);
    }
}

impl CounterKey {
    /// The domain.
    pub fn workspace(&self) -> &Arc<str> {
        &self.scope.workspace
    }

    /// The matched rule's path in the descriptor tree.
    pub fn namespace(&self) -> &Arc<str> {
        &self.scope.namespace
    }

    /// Bytes this key makes a structure hold beyond its own `size_of` (as
    /// [`CellKey::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        strings_heap_bytes(&self.scope, &self.identifier)
    }

    /// The borrowed form; hashing goes through it so both forms agree.
    pub fn borrowed(&self) -> CounterKeyRef<'_> {
        CounterKeyRef::new(&self.scope, &self.identifier, self.duration_ms)
    }
}

/// A borrowed [`CounterKey`]: what a request names, without allocating an owned key.
///
/// Its hash (of every field) is computed once, when the key is made: a decision looks up two
/// cells of one counter (the current and the previous window) and strict mode's counter, and
/// hashing the strings for each was a visible share of a warm decision.
#[derive(Debug, Clone, Copy)]
pub struct CounterKeyRef<'a> {
    pub scope: &'a Arc<Scope>,
    pub identifier: &'a str,
    pub duration_ms: u64,
    hash: u64,
}

impl<'a> CounterKeyRef<'a> {
    pub fn new(scope: &'a Arc<Scope>, identifier: &'a str, duration_ms: u64) -> Self {
        Self {
            scope,
            identifier,
            duration_ms,
            hash: counter_hash(scope, identifier, duration_ms),
        }
    }

    /// The domain.
    pub fn workspace(&self) -> &'a Arc<str> {
        &self.scope.workspace
    }

    /// The matched rule's path in the descriptor tree.
    pub fn namespace(&self) -> &'a Arc<str> {
        &self.scope.namespace
    }

    /// This counter's cell `sequence` (the counter's hash is reused).
    pub fn cell(self, sequence: u64) -> CellKeyRef<'a> {
        CellKeyRef {
            counter: self,
            sequence,
        }
    }

    pub fn to_owned_key(&self) -> CounterKey {
        CounterKey {
            scope: Arc::clone(self.scope),
            identifier: self.identifier.into(),
            duration_ms: self.duration_ms,
        }
    }
}

impl PartialEq for CounterKeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.duration_ms == other.duration_ms
            && self.identifier == other.identifier
            && same_scope(self.scope, other.scope)
    }
}

impl Eq for CounterKeyRef<'_> {}

impl Hash for CounterKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl quick_cache::Equivalent<CounterKey> for CounterKeyRef<'_> {
    fn equivalent(&self, key: &CounterKey) -> bool {
        self.duration_ms == key.duration_ms
            && self.identifier == &*key.identifier
            && same_scope(self.scope, &key.scope)
    }
}

/// A borrowed [`CellKey`]: looks a warm cell up without allocating an owned key.
/// It hashes exactly like the owned key (both hash through this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellKeyRef<'a> {
    pub counter: CounterKeyRef<'a>,
    pub sequence: u64,
}

impl<'a> CellKeyRef<'a> {
    pub fn new(
        scope: &'a Arc<Scope>,
        identifier: &'a str,
        duration_ms: u64,
        sequence: u64,
    ) -> Self {
        CounterKeyRef::new(scope, identifier, duration_ms).cell(sequence)
    }

    /// The same counter's cell `sequence` (its hash is reused).
    pub fn with_sequence(self, sequence: u64) -> Self {
        self.counter.cell(sequence)
    }

    pub fn to_owned_key(&self) -> CellKey {
        CellKey {
            scope: Arc::clone(self.counter.scope),
            identifier: self.counter.identifier.into(),
            duration_ms: self.counter.duration_ms,
            sequence: self.sequence,
        }
    }
}

fn strings_heap_bytes(scope: &Scope, identifier: &compact_str::CompactString) -> usize {
    let identifier = if identifier.is_heap_allocated() {
        identifier.capacity()
    } else {
        0
    };
    scope.workspace.len() + scope.namespace.len() + identifier
}

/// Identifiers come from requests: a per-process random seed keeps anyone from choosing
/// values that collide in the cell table.
fn counter_hash(scope: &Scope, identifier: &str, duration_ms: u64) -> u64 {
    static SEED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| fastrand::u64(..));
    // One call per string, each seeded by the previous one: field boundaries cannot shift.
    // The duration, a fixed-size word, goes into the last seed (a bijection of it for a given
    // prefix) rather than through a fourth call.
    let h = xxh3_64_with_seed(scope.workspace.as_bytes(), *SEED);
    let h = xxh3_64_with_seed(scope.namespace.as_bytes(), h);
    let seed = h ^ duration_ms.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    xxh3_64_with_seed(identifier.as_bytes(), seed)
}

/// The hasher of tables keyed by [`CellKey`]: a key's hash is computed once, when its
/// [`CounterKeyRef`] is made (seeded xxh3 of its strings, see `counter_hash`), and a key
/// hashes as that value and its `sequence` (two `write_u64`), so this only mixes the two
/// words. A general-purpose hasher (quick_cache's default, foldhash) hashed them again on
/// every lookup, a visible share of the warm decision's instructions. The seed is in the counter's
/// hash, so identifiers chosen to collide still cannot be.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrehashedKeys;

impl std::hash::BuildHasher for PrehashedKeys {
    type Hasher = PrehashedHasher;

    #[inline]
    fn build_hasher(&self) -> PrehashedHasher {
        PrehashedHasher(0)
    }
}

/// See [`PrehashedKeys`].
#[derive(Debug, Clone, Copy)]
pub struct PrehashedHasher(u64);

/// An odd constant with well spread bits (2⁶⁴ / φ): a multiply by it carries a low-order
/// difference (a window's sequence + 1) into the high bits hashbrown and the shards use.
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for PrehashedHasher {
    /// A folded multiply (the 128-bit product's halves XORed, as foldhash mixes): the low
    /// half's top bits take consecutive sequences to golden-ratio steps around the circle,
    /// so a counter's windows spread over hashbrown's 7-bit tags. (The multiply's low half
    /// rotated by 32, used before, took its top bits from the product's bits 25–31, where
    /// consecutive sequences step by ~1/2 of the circle: in ~1 process in 100, by its seed,
    /// four counters' 256 windows fell on 64 or fewer of the 128 tags.)
    #[inline]
    fn write_u64(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(MIX);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    /// Only reached by a key type that writes more than its precomputed words: hashed in
    /// full (seeded by the state), never silently ignored.
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Hash for CellKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.counter.hash(state);
        state.write_u64(self.sequence);
    }
}

impl quick_cache::Equivalent<CellKey> for CellKeyRef<'_> {
    fn equivalent(&self, key: &CellKey) -> bool {
        let counter = self.counter;
        self.sequence == key.sequence
            && counter.duration_ms == key.duration_ms
            && counter.identifier == &*key.identifier
            && same_scope(counter.scope, &key.scope)
    }
}

/// For tests that need some counter: one per-second rule (namespace `1:k/` of domain `d`),
/// counted by `identifier`.
#[cfg(test)]
impl<'a> CounterKeyRef<'a> {
    pub(crate) fn for_test(identifier: &'a str) -> Self {
        static SCOPE: std::sync::LazyLock<Arc<Scope>> =
            std::sync::LazyLock::new(|| Scope::new("d", "1:k/"));
        Self::new(&SCOPE, identifier, 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn borrowed_and_owned_keys_hash_alike() {
        let key = CellKey::new("d", "1:k/", "1:v", 1_000, 7);
        let s = std::collections::hash_map::RandomState::new();
        assert_eq!(s.hash_one(&key), s.hash_one(key.borrowed()));
        assert_eq!(key.borrowed().to_owned_key(), key);
        let counter = key.counter().to_owned_key();
        assert_eq!(s.hash_one(&counter), s.hash_one(key.counter()));
        assert_eq!(counter.borrowed().cell(7).to_owned_key(), key);
        let prehashed = PrehashedKeys;
        assert_eq!(prehashed.hash_one(&key), prehashed.hash_one(key.borrowed()));
    }

    #[test]
    fn a_key_is_48_bytes() {
        // The cell table's slot, the replay queue's entry and strict mode's entry hold one.
        assert_eq!(size_of::<CellKey>(), 48);
    }

    #[test]
    fn prehashed_keys_spread_a_counters_windows_and_its_counters() {
        let prehashed = PrehashedKeys;
        let scope = Scope::new("d", "1:k/");
        // 200 groups of four counters: a weak mix shows in some groups whatever the
        // process's seed (the mix used before failed ~1 group in 100).
        for group in 0..200 {
            let mut hashes = std::collections::HashSet::new();
            let mut high_bits = std::collections::HashSet::new();
            for counter in 0..4 {
                let identifier = format!("1:{group}-{counter}");
                for sequence in 0..64 {
                    let key = CellKeyRef::new(&scope, &identifier, 1_000, sequence);
                    let hash = prehashed.hash_one(key);
                    hashes.insert(hash);
                    high_bits.insert(hash >> 57);
                }
            }
            assert_eq!(
                hashes.len(),
                4 * 64,
                "group {group}: no two cells share a hash"
            );
            // hashbrown's tag: the top 7 bits of 256 hashes take most of their 128 values.
            assert!(
                high_bits.len() > 64,
                "group {group}: {} tags",
                high_bits.len()
            );
        }
    }
}
