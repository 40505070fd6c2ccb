use super::*;
use redis::cluster_routing::Slot;

/// Reads a key back into its cell; `None` if it is not a well-formed key of `prefix`.
fn parse(prefix: &str, text: &str) -> Option<CellKey> {
    fn field<'t>(rest: &mut &'t str) -> Option<&'t str> {
        let (len, tail) = rest.split_once(':')?;
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let len: usize = len.parse().ok()?;
        let value = tail.get(..len)?;
        *rest = &tail[len..];
        Some(value)
    }
    let rest = text.strip_prefix(prefix)?.strip_prefix('{')?;
    let (tag, rest) = rest.split_at_checked(16)?;
    let mut rest = rest.strip_prefix("}:")?;
    let workspace = field(&mut rest)?;
    let namespace = field(&mut rest)?;
    let identifier = field(&mut rest)?;
    let (duration, sequence) = rest.strip_prefix(':')?.split_once(':')?;
    let key = CellKey::new(
        workspace,
        namespace,
        identifier,
        duration.parse().ok()?,
        sequence.parse().ok()?,
    );
    (redis_key(prefix, &key) == text && tag.len() == 16).then_some(key)
}

const NASTY: &[&str] = &[
    "",
    ":",
    "::",
    "0",
    "1",
    "1:",
    "1:a",
    "10:",
    "a:",
    ":a",
    "{",
    "}",
    "{}",
    "{x}",
    "}{",
    "a{b}c",
    "é",
    "日本",
    "\0",
    "\n",
    "%",
    "0000000000000000",
    "1:k/2:v",
];

#[test]
fn every_key_parses_back_to_its_cell() {
    let mut seen = std::collections::HashMap::new();
    for prefix in ["", "rl:", "a:b:"] {
        for workspace in NASTY {
            for namespace in NASTY {
                for identifier in NASTY {
                    for (duration_ms, sequence) in [(0, 0), (1, 11), (11, 1), (1_000, 7)] {
                        let key =
                            CellKey::new(workspace, namespace, identifier, duration_ms, sequence);
                        let text = redis_key(prefix, &key);
                        assert_eq!(parse(prefix, &text).as_ref(), Some(&key), "{text:?}");
                        if let Some(other) = seen.insert(text.clone(), (prefix, key.clone())) {
                            assert_eq!(other, (prefix, key), "two cells share {text:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn field_boundaries_cannot_be_shifted() {
    let a = redis_key("p:", &CellKey::new("ab", "c", "", 1, 1));
    let b = redis_key("p:", &CellKey::new("a", "bc", "", 1, 1));
    let c = redis_key("p:", &CellKey::new("a", "b", "c", 1, 1));
    let d = redis_key("p:", &CellKey::new("a", "b", "c:1", 1, 1));
    let e = redis_key("p:", &CellKey::new("a", "b", "c", 11, 1));
    let all = [&a, &b, &c, &d, &e];
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            assert_ne!(x, y);
        }
    }
}

#[test]
fn the_layout_is_stable() {
    // Pinned: every process and version of the service must compute this exact key. The
    // tag agrees with the reference tool: `printf '1:d4:1:k/3:1:v:60000' | xxhsum -H3`.
    let key = CellKey::new("d", "1:k/", "1:v", 60_000, 28_000_000);
    let text = redis_key("rl:", &key);
    let tag = format!("{:016x}", xxh3_64(b"1:d4:1:k/3:1:v:60000"));
    assert_eq!(text, format!("rl:{{{tag}}}:1:d4:1:k/3:1:v:60000:28000000"));
    assert_eq!(tag, "9cac212a85d5949b");
}

#[test]
fn redis_cluster_hashes_on_the_tag_so_a_counter_stays_in_one_slot() {
    let key = CellKey::new("d", "{ns}", "{id}", 1_000, 1);
    let text = redis_key("rl:", &key);
    let open = text.find('{').unwrap_or(usize::MAX);
    let close = text.find('}').unwrap_or(usize::MAX);
    assert_eq!(
        (open, close),
        (3, 20),
        "the tag is the first {{…}} in {text:?}"
    );
    let tag = &text[open + 1..close];
    assert_eq!(Slot::for_key(&text), Slot::for_key(tag));
    for sequence in [0, 2, 99, u64::MAX] {
        let other = redis_key(
            "rl:",
            &CellKey {
                sequence,
                ..key.clone()
            },
        );
        assert_eq!(Slot::for_key(&other), Slot::for_key(&text));
        assert!(other.contains(tag));
    }
    let other_duration = redis_key(
        "rl:",
        &CellKey {
            duration_ms: 2_000,
            ..key.clone()
        },
    );
    assert!(
        !other_duration.contains(tag),
        "another duration is another counter"
    );
}
