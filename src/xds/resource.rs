//! An xDS response's `RateLimitConfig` resources mapped onto the config model the YAML
//! loader builds (`config::raw`), then validated and compiled by the same loader: one model,
//! one compiler, the same errors (named `xds resource "<name>" (domain "<domain>")` instead
//! of a file), so `/rlconfig`, the metrics and the decisions treat both sources alike.

use envoy_types::pb::google::protobuf::{Any, Struct, Value, value::Kind};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use serde_saphyr::{Location, Spanned};

use crate::config::raw::{RawDescriptor, RawFile, RawRateLimit, RawReplaces};
use crate::config::{LimitsConfig, LoadOptions, MAX_YAML_DEPTH, load_raw};

/// The resource type this source subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Nested `descriptors` levels accepted, as many as a YAML file's depth cap allows.
pub const MAX_DESCRIPTOR_DEPTH: usize = MAX_YAML_DEPTH / 2 - 1;

/// Descriptors of one response, all resources together (what 16 MiB of YAML holds at most is
/// far more; this bounds the work of one push whatever the message size).
pub const MAX_DESCRIPTORS: usize = 200_000;

/// Nesting of a descriptor's `metadata` (a `google.protobuf.Struct`).
const MAX_METADATA_DEPTH: usize = MAX_YAML_DEPTH;

/// Why a response was refused: the text goes back to the server in the NACK.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// Decodes, maps and compiles every resource of one state-of-the-world response, each as a
/// file of a config directory would be loaded with `load` (its bounds; several resources may
/// declare one domain with `merge_domains`, upstream's `MERGE_DOMAIN_CONFIG`).
pub fn compile(resources: &[Any], load: &LoadOptions) -> Result<LimitsConfig, Rejected> {
    let limits = &load.limits;
    if resources.len() > limits.max_files {
        return Err(Rejected(format!(
            "{} resources; at most {} are accepted (as files in a config directory)",
            resources.len(),
            limits.max_files
        )));
    }
    let mut descriptors_left = MAX_DESCRIPTORS;
    let mut sources = Vec::with_capacity(resources.len());
    for (i, any) in resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            return Err(Rejected(format!(
                "resources[{i}]: type {:?}, expected {TYPE_URL}",
                any.type_url
            )));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| Rejected(format!("resources[{i}]: cannot decode: {e}")))?;
        let name = format!(
            "xds resource {:?} (domain {:?})",
            config.name, config.domain
        );
        let raw = Mapper {
            name: &name,
            descriptors_left: &mut descriptors_left,
        }
        .file(&config)?;
        sources.push((name, raw));
    }
    load_raw(sources.iter().map(|(name, raw)| (name.as_str(), raw)), load)
        .map_err(|errors| Rejected(errors.to_string()))
}

struct Mapper<'a> {
    name: &'a str,
    descriptors_left: &'a mut usize,
}

fn at<T>(value: T) -> Spanned<T> {
    Spanned::new(value, Location::UNKNOWN, Location::UNKNOWN)
}

/// A proto3 string: empty is unset.
fn text(value: &str) -> Option<Spanned<String>> {
    (!value.is_empty()).then(|| at(value.to_owned()))
}

impl Mapper<'_> {
    fn file(&mut self, config: &RateLimitConfig) -> Result<RawFile, Rejected> {
        Ok(RawFile {
            domain: Some(at(config.domain.clone())),
            descriptors: Some(self.descriptors(&config.descriptors, "", 0)?),
        })
    }

    fn descriptors(
        &mut self,
        descriptors: &[RateLimitDescriptor],
        prefix: &str,
        depth: usize,
    ) -> Result<Vec<Spanned<RawDescriptor>>, Rejected> {
        if depth > MAX_DESCRIPTOR_DEPTH {
            return Err(Rejected(format!(
                "{}: {prefix}descriptors: nested deeper than {MAX_DESCRIPTOR_DEPTH} levels",
                self.name
            )));
        }
        *self.descriptors_left = self
            .descriptors_left
            .checked_sub(descriptors.len())
            .ok_or_else(|| {
                Rejected(format!(
                    "{}: more than {MAX_DESCRIPTORS} descriptors in one response",
                    self.name
                ))
            })?;
        descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let place = format!("{prefix}descriptors[{i}]");
                let metadata = d
                    .metadata
                    .as_ref()
                    .map(|m| object(m, 0))
                    .transpose()
                    .map_err(|problem| {
                        Rejected(format!("{}: {place}.metadata: {problem}", self.name))
                    })?;
                Ok(at(RawDescriptor {
                    key: Some(at(d.key.clone())),
                    value: text(&d.value),
                    rate_limit: d.rate_limit.as_ref().map(|p| at(policy(p))),
                    descriptors: if d.descriptors.is_empty() {
                        None
                    } else {
                        Some(self.descriptors(&d.descriptors, &format!("{place}."), depth + 1)?)
                    },
                    shadow_mode: Some(d.shadow_mode),
                    detailed_metric: Some(d.detailed_metric),
                    quota_mode: Some(d.quota_mode),
                    metadata,
                    ..RawDescriptor::default()
                }))
            })
            .collect()
    }
}

fn policy(policy: &RateLimitPolicy) -> RawRateLimit {
    // `UNKNOWN` (0, proto3's default) is no unit: fine with `unlimited`, an error otherwise.
    let unit = match RateLimitUnit::try_from(policy.unit) {
        Ok(RateLimitUnit::Unknown) => None,
        Ok(unit) => Some(unit.as_str_name().to_ascii_lowercase()),
        Err(_) => Some(format!("enum value {}", policy.unit)),
    };
    RawRateLimit {
        unit: unit.map(at),
        requests_per_unit: Some(at(policy.requests_per_unit)),
        unlimited: Some(at(policy.unlimited)),
        name: text(&policy.name),
        replaces: (!policy.replaces.is_empty()).then(|| {
            policy
                .replaces
                .iter()
                .map(|r| {
                    at(RawReplaces {
                        name: Some(at(r.name.clone())),
                    })
                })
                .collect()
        }),
        // The proto has no `guarantee`: a control plane's limits stay `never_below`.
        ..RawRateLimit::default()
    }
}

/// A `google.protobuf.Struct` as the JSON object the YAML loader reads `metadata` into.
fn object(
    value: &Struct,
    depth: usize,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    value
        .fields
        .iter()
        .map(|(k, v)| Ok((k.clone(), json(v, depth + 1)?)))
        .collect()
}

fn json(value: &Value, depth: usize) -> Result<serde_json::Value, String> {
    if depth > MAX_METADATA_DEPTH {
        return Err(format!("nested deeper than {MAX_METADATA_DEPTH} levels"));
    }
    Ok(match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("{n} is not a JSON number"))?,
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(object(s, depth)?),
        Some(Kind::ListValue(l)) => serde_json::Value::Array(
            l.values
                .iter()
                .map(|v| json(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests;
