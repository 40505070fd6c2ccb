//! An Envoy config as a YAML tree that keeps every node's line, read with bounds.
//!
//! Envoy's own schema is far larger than what this project reads, so the file is not mapped
//! onto types: the parts that matter are looked up by field, each with its line for the
//! messages. Field names follow protobuf's JSON mapping: Envoy accepts `rate_limits` and
//! `rateLimits` alike (an Istio patch is often written in the second form), and so does
//! [`Node::get`].

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::config::{Place, read_text};

/// The largest Envoy config read, in bytes: a generated bootstrap with thousands of routes
/// stays far below.
pub const MAX_ENVOY_CONFIG_BYTES: u64 = 64 * 1024 * 1024;

/// YAML nesting accepted: an Envoy route's header matcher sits about 25 levels down (30 in a
/// config dump); the parser refuses deeper input instead of recursing without bound.
const MAX_DEPTH: usize = 48;

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    /// A scalar as written (numbers and booleans as their text).
    Scalar(String),
    Null,
}

/// A value and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub line: Option<usize>,
    /// For a scalar the parser read as a number or a boolean: its bytes in the text, so that
    /// it is kept as written (`1.10`, `0755`, `y`).
    inferred: Option<(u64, u64)>,
}

/// A whole file: its tree and its name for messages.
#[derive(Debug, Clone)]
pub struct Document {
    pub file: Arc<str>,
    pub root: Node,
}

/// Why an Envoy config was not read.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        source: crate::config::ReadError,
    },
    #[error("{file}: not YAML: {message}")]
    Parse { file: String, message: String },
}

impl Document {
    /// Reads and parses `path`, at most [`MAX_ENVOY_CONFIG_BYTES`].
    pub fn read(path: &Path) -> Result<Self, YamlError> {
        let file = path.display().to_string();
        let text = read_text(path, MAX_ENVOY_CONFIG_BYTES).map_err(|source| YamlError::Read {
            file: file.clone(),
            source,
        })?;
        Self::parse(&file, &text)
    }

    /// Parses `text`; `file` only names it.
    pub fn parse(file: &str, text: &str) -> Result<Self, YamlError> {
        let mut options = serde_saphyr::Options::default();
        let mut budget = options.budget.take().unwrap_or_default();
        budget.max_depth = MAX_DEPTH;
        options.budget = Some(budget);
        // `y`, `on` and the like stay strings, as in Envoy's YAML.
        options.strict_booleans = true;
        let root: Spanned<Node> =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| YamlError::Parse {
                file: file.to_owned(),
                message: e.to_string(),
            })?;
        let mut root = with_line(root);
        as_written(&mut root, text);
        Ok(Self {
            file: file.into(),
            root,
        })
    }

    /// The place of `node` in this file.
    pub fn place(&self, node: &Node) -> Place {
        Place::new(Arc::clone(&self.file), node.line)
    }
}

fn with_line(spanned: Spanned<Node>) -> Node {
    let line = match spanned.referenced.line() {
        0 => None,
        line => usize::try_from(line).ok(),
    };
    let span = spanned.referenced.span();
    let inferred = match (spanned.value.inferred, span.byte_offset(), span.byte_len()) {
        (Some(_), Some(offset), Some(len)) => Some((offset, len)),
        _ => None,
    };
    Node {
        line: spanned.value.line.or(line),
        value: spanned.value.value,
        inferred,
    }
}

/// Puts back the text of the scalars the parser typed (numbers, booleans): Envoy's fields
/// that matter here are strings, and a value such as `1.10` must not become `1.1`.
fn as_written(node: &mut Node, text: &str) {
    if let Some((offset, len)) = node.inferred.take() {
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(offset.saturating_add(len)).ok());
        if let Some(raw) = range.and_then(|(start, end)| text.get(start..end)) {
            node.value = Value::Scalar(raw.trim().to_owned());
        }
    }
    match &mut node.value {
        Value::Map(entries) => entries.iter_mut().for_each(|(_, n)| as_written(n, text)),
        Value::Seq(items) => items.iter_mut().for_each(|n| as_written(n, text)),
        Value::Scalar(_) | Value::Null => {}
    }
}

/// `rate_limits` → `rateLimits`: protobuf's JSON name of a field.
pub fn camel_case(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl Node {
    /// A node of `value` on `line`.
    pub fn with(value: Value, line: Option<usize>) -> Self {
        Self {
            value,
            line,
            inferred: None,
        }
    }

    fn text_node(text: String) -> Self {
        Self::with(Value::Scalar(text), None)
    }

    /// The field `name` of a mapping (in either of protobuf's spellings).
    pub fn get(&self, name: &str) -> Option<&Node> {
        let Value::Map(entries) = &self.value else {
            return None;
        };
        let camel = camel_case(name);
        entries
            .iter()
            .find(|(key, _)| key == name || *key == camel)
            .map(|(_, node)| node)
    }

    /// The entries of a mapping (none for anything else).
    pub fn entries(&self) -> &[(String, Node)] {
        match &self.value {
            Value::Map(entries) => entries,
            _ => &[],
        }
    }

    /// The items of a sequence (none for anything else).
    pub fn items(&self) -> &[Node] {
        match &self.value {
            Value::Seq(items) => items,
            _ => &[],
        }
    }

    /// A scalar's text.
    pub fn text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(text) => Some(text),
            _ => None,
        }
    }

    /// The field `name` as text.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Node::text)
    }

    /// The field `name` as a boolean (`true`/`false`), or a protobuf `BoolValue` (`{value:
    /// true}`).
    pub fn bool(&self, name: &str) -> Option<bool> {
        let node = self.get(name)?;
        let text = node.text().or_else(|| node.str("value"))?;
        match text {
            "true" | "True" | "TRUE" => Some(true),
            "false" | "False" | "FALSE" => Some(false),
            _ => None,
        }
    }

    /// The field `name` as an unsigned number, or a protobuf `UInt32Value`/`UInt64Value`
    /// (`{value: 5}`).
    pub fn u64(&self, name: &str) -> Option<u64> {
        let node = self.get(name)?;
        node.text()
            .or_else(|| node.str("value"))
            .and_then(|text| text.parse().ok())
    }

    /// The names of a mapping's fields that are not in `known` (snake_case; the camelCase
    /// spelling is accepted too).
    pub fn unknown_fields<'n>(&'n self, known: &[&str]) -> Vec<&'n str> {
        self.entries()
            .iter()
            .map(|(key, _)| key.as_str())
            .filter(|key| !known.iter().any(|k| k == key || camel_case(k) == *key))
            .collect()
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

/// A scalar the parser typed: its text is taken from the source afterwards.
fn scalar(text: String) -> Node {
    Node {
        value: Value::Scalar(text),
        line: None,
        inferred: Some((0, 0)),
    }
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(scalar(v.to_string()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::text_node(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::text_node(v))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::text_node(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::with(Value::Null, None))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::with(Value::Null, None))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(with_line(item));
        }
        Ok(Node::with(Value::Seq(items), None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = with_line(map.next_value::<Spanned<Node>>()?);
            // A mapping value starts on its key's line: that is the line worth showing.
            let line = match key.referenced.line() {
                0 => value.line,
                line => usize::try_from(line).ok(),
            };
            entries.push((key.value, Node { line, ..value }));
        }
        Ok(Node::with(Value::Map(entries), None))
    }
}

#[cfg(test)]
mod tests;
