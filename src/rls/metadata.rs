//! The response's `dynamic_metadata`, in envoyproxy/ratelimit's shape
//! (`RESPONSE_DYNAMIC_METADATA`): Envoy stores it under the filter's namespace, where routes,
//! access logs and other filters read it.
//!
//! ```text
//! { "domain": "...",
//!   "descriptors": [ { "entries": ["key=value", ...], "limit": "...", "hitsAddend": n }, ... ],
//!   "hitsAddend": n,                  // the request's, when not 0
//!   "metadata": { ... } }             // the rules' `metadata` of the descriptors that passed
//! ```

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};
use serde_json::{Map, Value as Json};

use super::units;

/// The dynamic metadata of a response. `passed` are the config `metadata` of the descriptors
/// that passed (not over their limit, not unlimited), in request order: merged, the first
/// value of a key wins and nested mappings merge, as upstream merges them.
pub fn dynamic_metadata<'m>(
    request: &RateLimitRequest,
    passed: impl Iterator<Item = &'m Map<String, Json>>,
) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_owned(), string(request.domain.clone()));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert(
        "descriptors".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number(f64::from(request.hits_addend)),
        );
    }
    let mut merged = Struct::default();
    for metadata in passed {
        merge(&mut merged, metadata);
    }
    if !merged.fields.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            Value {
                kind: Some(Kind::StructValue(merged)),
            },
        );
    }
    Struct { fields }
}

fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::HashMap::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|e| string(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert(
        "entries".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue { values: entries })),
        },
    );
    if let Some(limit) = &descriptor.limit {
        // Upstream writes Go's text form of the override; this is its stable shape.
        let unit = units::from_proto(limit.unit).map_or("UNKNOWN", |u| u.as_proto_name());
        fields.insert(
            "limit".to_owned(),
            string(format!(
                "requests_per_unit:{} unit:{unit}",
                limit.requests_per_unit
            )),
        );
    }
    if let Some(hits) = &descriptor.hits_addend {
        // As upstream: a JSON number (a double).
        fields.insert("hitsAddend".to_owned(), number(hits.value as f64));
    }
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

/// Adds `source` to `dest`: a key already there keeps its value, unless both are mappings,
/// which merge the same way.
fn merge(dest: &mut Struct, source: &Map<String, Json>) {
    for (key, value) in source {
        match dest.fields.get_mut(key) {
            Some(Value {
                kind: Some(Kind::StructValue(existing)),
            }) => {
                if let Json::Object(nested) = value {
                    merge(existing, nested);
                }
            }
            Some(_) => {}
            None => {
                dest.fields.insert(key.clone(), json(value));
            }
        }
    }
}

/// A JSON value as a protobuf `Value` (numbers as doubles, as `structpb` does).
fn json(value: &Json) -> Value {
    let kind = match value {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json).collect(),
        }),
        Json::Object(map) => Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), json(v))).collect(),
        }),
    };
    Value { kind: Some(kind) }
}

fn string(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

#[cfg(test)]
mod tests;
