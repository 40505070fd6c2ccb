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
use crate::config::{LimitsConfig, MAX_YAML_DEPTH, ReadLimits, load_raw};

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

/// Decodes, maps and compiles every resource of one state-of-the-world response.
/// `merge_domains`: several resources may declare one domain (upstream's
/// `MERGE_DOMAIN_CONFIG`).
pub fn compile(
    resources: &[Any],
    limits: &ReadLimits,
    merge_domains: bool,
) -> Result<LimitsConfig, Rejected> {
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
    load_raw(
        sources.iter().map(|(name, raw)| (name.as_str(), raw)),
        merge_domains,
    )
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
mod tests {
    use super::*;
    use gcounter_rls_integration::xds::limited;

    fn any(config: &RateLimitConfig) -> Any {
        Any {
            type_url: TYPE_URL.into(),
            value: config.encode_to_vec(),
        }
    }

    fn compiled(resources: &[Any]) -> Result<LimitsConfig, Rejected> {
        compile(resources, &ReadLimits::default(), false)
    }

    #[test]
    fn maps_every_field_the_proto_carries() {
        let mut nested = limited("path", "/a", RateLimitUnit::Minute, 7);
        nested.shadow_mode = true;
        nested.quota_mode = true;
        nested.detailed_metric = true;
        nested.metadata = Some(Struct {
            fields: [(
                "tier".to_owned(),
                Value {
                    kind: Some(Kind::StringValue("gold".into())),
                },
            )]
            .into(),
        });
        if let Some(p) = nested.rate_limit.as_mut() {
            p.name = "inner".into();
            p.replaces = vec![
                envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace {
                    name: "outer".into(),
                },
            ];
        }
        let mut outer = limited("tenant", "", RateLimitUnit::Hour, 100);
        if let Some(p) = outer.rate_limit.as_mut() {
            p.name = "outer".into();
        }
        outer.descriptors = vec![nested];
        let free = RateLimitDescriptor {
            key: "free".into(),
            rate_limit: Some(RateLimitPolicy {
                unlimited: true,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        };
        let config = RateLimitConfig {
            name: "r1".into(),
            domain: "d".into(),
            descriptors: vec![outer, free],
        };
        let loaded = match compiled(&[any(&config)]) {
            Ok(loaded) => loaded,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(loaded.rule_count(), 3);
        let domain = loaded.domain("d");
        let rule = domain
            .and_then(|d| d.find([("tenant", "x"), ("path", "/a")].into_iter()))
            .cloned();
        let Some(rule) = rule else {
            panic!("nested rule not found")
        };
        assert!(rule.shadow_mode && rule.quota_mode && rule.detailed_metric);
        assert_eq!(rule.duration_ms(), Some(60_000));
        assert_eq!(rule.name.as_deref(), Some("inner"));
        assert_eq!(&*rule.replaces, [std::sync::Arc::from("outer")]);
        assert_eq!(
            rule.metadata.as_ref().and_then(|m| m.get("tier")),
            Some(&serde_json::Value::String("gold".into()))
        );
        assert!(
            domain
                .and_then(|d| d.find([("free", "1")].into_iter()))
                .is_some_and(|r| r.is_unlimited())
        );
    }

    #[test]
    fn a_bad_resource_is_refused_naming_resource_domain_place_and_problem() {
        let mut bad = limited("k", "", RateLimitUnit::Unknown, 5);
        bad.descriptors = vec![limited("inner", "", RateLimitUnit::Second, 1)];
        let config = RateLimitConfig {
            name: "r1".into(),
            domain: "dom".into(),
            descriptors: vec![limited("ok", "", RateLimitUnit::Second, 1), bad],
        };
        let Err(Rejected(message)) = compiled(&[any(&config)]) else {
            panic!("accepted")
        };
        assert!(
            message.starts_with(
                "xds resource \"r1\" (domain \"dom\"): descriptors[1].rate_limit: missing `unit`"
            ),
            "{message}"
        );
        let twice = compiled(&[any(&config), any(&config)]);
        assert!(twice.is_err());
        let dup = RateLimitConfig {
            name: "r2".into(),
            domain: "x".into(),
            descriptors: vec![],
        };
        let Err(Rejected(message)) = compiled(&[any(&dup), any(&dup)]) else {
            panic!("accepted a duplicate domain")
        };
        assert!(message.contains("duplicate domain `x`"), "{message}");
        let Err(Rejected(message)) = compiled(&[Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff],
        }]) else {
            panic!("accepted garbage")
        };
        assert!(
            message.starts_with("resources[0]: cannot decode"),
            "{message}"
        );
    }

    #[test]
    fn depth_and_counts_are_bounded() {
        let mut deep = limited("leaf", "", RateLimitUnit::Second, 1);
        for level in 0..=MAX_DESCRIPTOR_DEPTH {
            deep = RateLimitDescriptor {
                key: format!("k{level}"),
                descriptors: vec![deep],
                ..RateLimitDescriptor::default()
            };
        }
        let config = RateLimitConfig {
            name: "deep".into(),
            domain: "d".into(),
            descriptors: vec![deep.clone()],
        };
        let Err(Rejected(message)) = compiled(&[any(&config)]) else {
            panic!("accepted")
        };
        assert!(message.contains("nested deeper than"), "{message}");
        let shallow = RateLimitConfig {
            descriptors: deep.descriptors,
            ..config
        };
        assert!(compiled(&[any(&shallow)]).is_ok());

        let few = ReadLimits {
            max_files: 1,
            ..ReadLimits::default()
        };
        let Err(Rejected(message)) = compile(&[any(&shallow), any(&shallow)], &few, false) else {
            panic!("accepted")
        };
        assert!(message.contains("at most 1"), "{message}");
    }
}
