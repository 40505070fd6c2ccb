//! The Redis key of a cell: the name of the cell's hash, which holds one PN-counter component
//! per process: the field `<process>` (its cumulative hits of the cell, as before refunds
//! existed, so older hashes read unchanged) and `r:<process>` (its cumulative refunds); see the
//! parent module.
//!
//! `{prefix}{<tag>}:<len>:<workspace><len>:<namespace><len>:<identifier>:<duration_ms>:<sequence>`
//!
//! - `<tag>` is xxh3-64 (seed 0) of the identity without the sequence, as 16 lowercase hex
//!   digits. It is the Redis Cluster hash tag: every cell of one counter lands in one slot, and
//!   every process and version computes the same key. Golden-tested below: changing it splits
//!   the region's counts during a rolling deploy.
//! - Lengths are byte lengths, so the key is injective: a parser recovers every field.
//! - The prefix may not contain `{` or `}`, so the tag is the first `{…}` Redis sees.

use std::fmt::Write as _;

use xxhash_rust::xxh3::xxh3_64;

use gcounter_engine::cell_key::CellKey;

/// Placeholder written before the tag is known; replaced in place (same length).
const TAG_PLACEHOLDER: &str = "0000000000000000";

/// The Redis key of `key`'s hash under `prefix`.
pub fn redis_key(prefix: &str, key: &CellKey) -> String {
    let mut out = String::with_capacity(
        prefix.len()
            + 19
            + key.workspace().len()
            + key.namespace().len()
            + key.identifier.len()
            + 3 * 20
            + 2 * 20,
    );
    out.push_str(prefix);
    out.push('{');
    let tag_at = out.len();
    out.push_str(TAG_PLACEHOLDER);
    out.push_str("}:");
    let identity_at = out.len();
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "{}:{}{}:{}{}:{}:{}",
        key.workspace().len(),
        key.workspace(),
        key.namespace().len(),
        key.namespace(),
        key.identifier.len(),
        key.identifier,
        key.duration_ms,
    );
    let tag = xxh3_64(out.as_bytes().get(identity_at..).unwrap_or_default());
    out.replace_range(
        tag_at..tag_at + TAG_PLACEHOLDER.len(),
        &format!("{tag:016x}"),
    );
    let _ = write!(out, ":{}", key.sequence);
    out
}

#[cfg(test)]
mod tests;
