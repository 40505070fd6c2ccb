//! Turns the position of a YAML deserialization error into a document path.
//!
//! serde-saphyr reports line and column but not which field failed, so the
//! text is parsed a second time into a schema-free tree with positions, and
//! the error position is looked up in it. Only used on the error path.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Spanned};

/// Any YAML node; scalars are not kept, only where they are.
enum Node {
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

/// The visits of scalars, which all answer [`Node::Scalar`]: a scalar's value does not matter
/// here, only where it stands. (A `Visitor` has no common entry point for them.)
macro_rules! scalar_visits {
    ($($visit:ident($($value:ty)?)),* $(,)?) => {$(
        fn $visit<E>(self $(, _: $value)?) -> Result<Node, E> {
            Ok(Node::Scalar)
        }
    )*};
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    scalar_visits! {
        visit_bool(bool),
        visit_i64(i64),
        visit_i128(i128),
        visit_u64(u64),
        visit_u128(u128),
        visit_f64(f64),
        visit_str(&str),
        visit_bytes(&[u8]),
        visit_unit(),
        visit_none(),
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }
}

/// A position in the document that has a path.
struct Mark {
    at: (u64, u64),
    depth: usize,
    path: String,
}

/// The path (`descriptors[0].rate_limit.unit`) of what sits at `line`:`column`
/// in `yaml`; `Some("")` for the document root, `None` when the text is not
/// even YAML.
pub(crate) fn path_at(yaml: &str, line: u64, column: u64) -> Option<String> {
    let mut options = super::read::yaml_options();
    // The error may be a duplicate key: this pass must still see the tree.
    options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
    let root: Spanned<Node> = serde_saphyr::from_str_with_options(yaml, options).ok()?;
    let mut marks = Vec::new();
    collect(&root, 0, String::new(), &mut marks);

    let at = (line, column);
    // The outermost node starting exactly there: a map reported for a missing
    // field starts where its first key does.
    let exact = marks.iter().filter(|m| m.at == at).min_by_key(|m| m.depth);
    // Otherwise the last thing that started before.
    let before = || {
        marks
            .iter()
            .filter(|m| m.at < at)
            .max_by_key(|m| (m.at, std::cmp::Reverse(m.depth)))
    };
    exact.or_else(before).map(|m| m.path.clone())
}

fn collect(node: &Spanned<Node>, depth: usize, path: String, marks: &mut Vec<Mark>) {
    match &node.value {
        Node::Map(entries) => {
            for (key, value) in entries {
                let child = if path.is_empty() {
                    key.value.clone()
                } else {
                    format!("{path}.{}", key.value)
                };
                marks.push(Mark {
                    at: position(key),
                    depth: depth + 1,
                    path: child.clone(),
                });
                collect(value, depth + 1, child, marks);
            }
        }
        Node::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                collect(item, depth + 1, format!("{path}[{i}]"), marks);
            }
        }
        Node::Scalar => {}
    }
    marks.push(Mark {
        at: position(node),
        depth,
        path,
    });
}

fn position<T>(spanned: &Spanned<T>) -> (u64, u64) {
    (spanned.referenced.line(), spanned.referenced.column())
}

#[cfg(test)]
mod tests;
