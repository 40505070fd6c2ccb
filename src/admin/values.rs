//! How counter inspection shows request values: a descriptor value may be a secret (an API
//! key, a session token), and `/counters` and `/counters/top` are read by people and tools
//! that should not learn it. Unless the operator asks for the values
//! (`--inspection-show-values`), each is replaced by a keyed hash.
//!
//! The hash is SipHash-1-3 (std's `RandomState`) under a key drawn from the operating system
//! once per process: 64 bits, written `hash:` and 16 hex digits. The same value hashes the
//! same within one process, so a `/counters/top` row can be matched with a `/counters`
//! answer; without the key nobody can test guesses against it, and the key dies with the
//! process (hashes of two processes or two runs do not compare).

use std::hash::{BuildHasher, RandomState};

/// What `/counters` and `/counters/top` write where a request value would go.
#[derive(Debug, Clone)]
pub enum ValueDisplay {
    /// The values as sent (`--inspection-show-values`).
    Shown,
    /// A keyed hash of each value.
    Hashed(RandomState),
}

impl ValueDisplay {
    /// Values hashed under a fresh random key (the default).
    pub fn hashed() -> Self {
        Self::Hashed(RandomState::new())
    }

    /// The answers' `values` field: `shown` or `hashed`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Shown => "shown",
            Self::Hashed(_) => "hashed",
        }
    }

    /// `text` (a value, or an identifier made of values) as the answer shows it.
    pub fn show(&self, text: &str) -> String {
        match self {
            Self::Shown => text.to_owned(),
            Self::Hashed(key) => format!("hash:{:016x}", key.hash_one(text)),
        }
    }
}

#[cfg(test)]
mod tests;
