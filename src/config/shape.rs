//! The shape of a limits file, checked field by field before it is read into the model, so
//! that every misplaced field and every value of the wrong type is reported (the model's
//! reader stops at the first), each with its line, the type expected and the value found.
//!
//! Values are held to what upstream's YAML decoder (go-yaml into its Go types) accepts: a
//! number of requests is an unquoted whole number (`"10"` is a string there, and refused), a
//! switch is a boolean; strings take any scalar, as upstream's do.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::error::ConfigError;
use super::read::yaml_options;

/// A YAML value as the parser typed it, with its line.
#[derive(Debug)]
struct Node {
    value: Value,
    line: Option<usize>,
}

#[derive(Debug)]
enum Value {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    /// A string: quoted, or plain text the parser did not read as another type.
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
    Null,
}

/// What a field holds.
#[derive(Clone, Copy)]
enum Expected {
    Text,
    Count,
    Switch,
    Descriptors,
    RateLimit,
    RateLimits,
    Replaces,
    Mapping,
}

impl Expected {
    fn describe(self) -> &'static str {
        match self {
            Expected::Text => "a string",
            Expected::Count => "a whole number from 0 to 4294967295",
            Expected::Switch => "true or false",
            Expected::Descriptors | Expected::RateLimits | Expected::Replaces => "a list",
            Expected::RateLimit | Expected::Mapping => "a mapping",
        }
    }
}

const FILE_FIELDS: &[(&str, Expected)] = &[
    ("domain", Expected::Text),
    ("descriptors", Expected::Descriptors),
];

const DESCRIPTOR_FIELDS: &[(&str, Expected)] = &[
    ("key", Expected::Text),
    ("value", Expected::Text),
    ("rate_limit", Expected::RateLimit),
    ("rate_limits", Expected::RateLimits),
    ("descriptors", Expected::Descriptors),
    ("shadow_mode", Expected::Switch),
    ("detailed_metric", Expected::Switch),
    ("quota_mode", Expected::Switch),
    ("share_threshold", Expected::Switch),
    ("metadata", Expected::Mapping),
    ("value_to_metric", Expected::Switch),
];

const RATE_LIMIT_FIELDS: &[(&str, Expected)] = &[
    ("unit", Expected::Text),
    ("requests_per_unit", Expected::Count),
    ("unlimited", Expected::Switch),
    ("name", Expected::Text),
    ("replaces", Expected::Replaces),
    ("unit_multiplier", Expected::Count),
    ("penalty", Expected::Text),
    ("guarantee", Expected::Text),
];

const REPLACES_FIELDS: &[(&str, Expected)] = &[("name", Expected::Text)];

/// Every shape problem of `text` (`file` names it). `None` when the text is not a YAML
/// document this check can read (a syntax error, several documents): the model's reader
/// says why.
pub(crate) fn problems(file: &str, text: &str) -> Option<Vec<ConfigError>> {
    let root: Option<Spanned<Node>> =
        serde_saphyr::from_str_with_options(text, yaml_options()).ok()?;
    let mut found = Vec::new();
    if let Some(root) = root {
        let root = with_line(root);
        let mut check = Check {
            file,
            found: &mut found,
        };
        // Another root (a list, a scalar) is the model reader's to refuse.
        if let Value::Map(_) = &root.value {
            check.fields(&root, "", FILE_FIELDS);
        }
    }
    Some(found)
}

struct Check<'a> {
    file: &'a str,
    found: &'a mut Vec<ConfigError>,
}

impl Check<'_> {
    fn refuse(&mut self, node: &Node, place: &str, problem: impl Into<String>) {
        self.found
            .push(ConfigError::new(self.file, node.line, place, problem));
    }

    /// A mapping whose fields are `known`, each checked.
    fn fields(&mut self, node: &Node, place: &str, known: &[(&str, Expected)]) {
        let Value::Map(entries) = &node.value else {
            return;
        };
        for (key, value) in entries {
            let here = if place.is_empty() {
                key.clone()
            } else {
                format!("{place}.{key}")
            };
            match known.iter().find(|(name, _)| name == key) {
                Some((_, expected)) => self.value(value, &here, *expected),
                None => {
                    let names: Vec<String> =
                        known.iter().map(|(name, _)| format!("`{name}`")).collect();
                    self.refuse(
                        value,
                        &here,
                        format!(
                            "unknown field `{key}`, expected one of {}",
                            names.join(", ")
                        ),
                    );
                }
            }
        }
    }

    fn value(&mut self, node: &Node, place: &str, expected: Expected) {
        let fits = match (&node.value, expected) {
            // An absent value is no value: the model's checks say whether it is needed.
            (Value::Null, _) => true,
            (Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_), Expected::Text) => {
                true
            }
            (Value::Int(n), Expected::Count) => (0..=i128::from(u32::MAX)).contains(n),
            (Value::Bool(_), Expected::Switch) => true,
            (Value::Map(_), Expected::RateLimit | Expected::Mapping) => true,
            (Value::Seq(_), Expected::Descriptors | Expected::RateLimits | Expected::Replaces) => {
                true
            }
            _ => false,
        };
        if !fits {
            let hint = match (&node.value, expected) {
                (Value::Str(text), Expected::Count | Expected::Switch)
                    if text.trim().parse::<i128>().is_ok()
                        || matches!(text.trim(), "true" | "false") =>
                {
                    "; write it without quotes (upstream refuses a quoted value too)"
                }
                _ => "",
            };
            self.refuse(
                node,
                place,
                format!(
                    "expected {}, got {}{hint}",
                    expected.describe(),
                    Got(&node.value)
                ),
            );
            return;
        }
        match (&node.value, expected) {
            (Value::Map(_), Expected::RateLimit) => self.fields(node, place, RATE_LIMIT_FIELDS),
            (Value::Seq(items), Expected::Descriptors) => {
                self.items(items, place, DESCRIPTOR_FIELDS);
            }
            (Value::Seq(items), Expected::RateLimits) => {
                self.items(items, place, RATE_LIMIT_FIELDS);
            }
            (Value::Seq(items), Expected::Replaces) => {
                self.items(items, place, REPLACES_FIELDS);
            }
            _ => {}
        }
    }

    /// A list of mappings of `known` fields.
    fn items(&mut self, items: &[Node], place: &str, known: &[(&str, Expected)]) {
        for (index, item) in items.iter().enumerate() {
            let here = format!("{place}[{index}]");
            match &item.value {
                Value::Map(_) => self.fields(item, &here, known),
                other => self.refuse(
                    item,
                    &here,
                    format!("expected a mapping, got {}", Got(other)),
                ),
            }
        }
    }
}

/// A value as a message shows it.
struct Got<'a>(&'a Value);

impl fmt::Display for Got<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Map(_) => f.write_str("a mapping"),
            Value::Seq(_) => f.write_str("a list"),
            Value::Str(text) => {
                // Long values are cut: a message stays one readable line.
                let shown: String = text.chars().take(64).collect();
                write!(f, "the string {shown:?}")
            }
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Null => f.write_str("nothing"),
        }
    }
}

fn with_line(spanned: Spanned<Node>) -> Node {
    let line = match spanned.referenced.line() {
        0 => None,
        line => usize::try_from(line).ok(),
    };
    Node {
        line: spanned.value.line.or(line),
        value: spanned.value.value,
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

fn node(value: Value) -> Node {
    Node { value, line: None }
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(node(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(node(Value::Int(i128::from(v))))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(node(Value::Int(i128::from(v))))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(node(Value::Int(v)))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        Ok(node(Value::Int(i128::try_from(v).unwrap_or(i128::MAX))))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(node(Value::Float(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(node(Value::Str(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(node(Value::Str(v)))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(node(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(node(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(with_line(item));
        }
        Ok(node(Value::Seq(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Node>>()? {
            let key_line = with_line(key);
            let mut value = with_line(map.next_value::<Spanned<Node>>()?);
            // A field's problem is said on its key's line.
            value.line = key_line.line.or(value.line);
            let name = match key_line.value {
                Value::Str(text) => text,
                other => Got(&other).to_string(),
            };
            entries.push((name, value));
        }
        Ok(node(Value::Map(entries)))
    }
}

#[cfg(test)]
mod tests;
