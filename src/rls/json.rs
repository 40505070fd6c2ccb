//! `POST /json`: envoyproxy/ratelimit's JSON form of `ShouldRateLimit`, for clients that cannot
//! speak gRPC (a Lua filter, a script).
//!
//! The JSON is protobuf's canonical mapping (Go's `protojson`, which upstream uses): field
//! names in lowerCamelCase or as in the .proto, integers as numbers or strings, enums by
//! name or number, unknown fields refused; the answer omits fields at their zero value and
//! writes durations as `"59.500s"`. The HTTP status is upstream's: 200, 429 when the overall
//! code is OVER_LIMIT, 400 for a body that is not a request (with the reason, where upstream
//! says only "Bad Request").

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::{Duration, UInt64Value};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::RateLimiter;

/// The HTTP answer to one `POST /json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonReply {
    pub status: u16,
    /// `application/json` when `status` is 200 or 429, plain text otherwise.
    pub body: String,
}

impl JsonReply {
    fn bad_request(reason: impl std::fmt::Display) -> Self {
        Self {
            status: 400,
            body: format!("Bad Request: {reason}\n"),
        }
    }
}

/// Decides one JSON request.
///
/// `headers` (the HTTP request's) may carry the caller's trace context, when tracing is on.
pub async fn should_rate_limit_json(
    limiter: &RateLimiter,
    headers: &http::HeaderMap,
    body: &[u8],
) -> JsonReply {
    let span = limiter.tracer().and_then(|tracer| {
        let sampled = tracer.sample(headers)?;
        Some(tracer.start(sampled, crate::trace::Route::Json))
    });
    let request = match parse_request(body) {
        Ok(request) => request,
        Err(reason) => {
            limiter
                .metrics
                .request(crate::telemetry::RequestOutcome::InvalidArgument);
            if let Some(span) = span {
                span.end(
                    crate::trace::Path::Warm,
                    Err((tonic::Code::InvalidArgument, &reason)),
                );
            }
            return JsonReply::bad_request(reason);
        }
    };
    let answer = match span {
        Some(span) => limiter.should_rate_limit_traced(&request, span).await,
        None => limiter.should_rate_limit(&request).await,
    };
    match answer {
        Ok(answer) => JsonReply {
            status: match answer.overall_code {
                Code::OverLimit => 429,
                Code::Ok => 200,
                Code::Unknown => 500,
            },
            body: response_json(&answer.into_response()).to_string(),
        },
        Err(status) => JsonReply::bad_request(status.message()),
    }
}

/// A JSON `RateLimitRequest`, or why not (serde's message, with line and column).
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let raw: JsonRequest =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON RateLimitRequest: {e}"))?;
    raw.into_proto()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: Option<String>,
    descriptors: Option<Vec<JsonDescriptor>>,
    #[serde(rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<Integer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    entries: Option<Vec<JsonEntry>>,
    limit: Option<JsonOverride>,
    #[serde(rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<Integer>,
    #[serde(rename = "isNegativeHits", alias = "is_negative_hits")]
    is_negative_hits: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(rename = "requestsPerUnit", alias = "requests_per_unit")]
    requests_per_unit: Option<Integer>,
    unit: Option<EnumValue>,
}

/// protojson takes integers as JSON numbers or decimal strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Integer {
    Number(u64),
    Text(String),
}

impl Integer {
    fn get(&self, field: &str, max: u64) -> Result<u64, String> {
        let value = match self {
            Self::Number(n) => *n,
            Self::Text(text) => text
                .parse()
                .map_err(|_| format!("{field}: {text:?} is not an unsigned integer"))?,
        };
        if value > max {
            return Err(format!("{field}: {value} is larger than {max}"));
        }
        Ok(value)
    }
}

/// protojson takes enums by name or number.
#[derive(Deserialize)]
#[serde(untagged)]
enum EnumValue {
    Number(i32),
    Name(String),
}

impl JsonRequest {
    fn into_proto(self) -> Result<RateLimitRequest, String> {
        let descriptors = self
            .descriptors
            .unwrap_or_default()
            .into_iter()
            .map(JsonDescriptor::into_proto)
            .collect::<Result<_, _>>()?;
        Ok(RateLimitRequest {
            domain: self.domain.unwrap_or_default(),
            descriptors,
            hits_addend: match self.hits_addend {
                Some(n) => n.get("hitsAddend", u64::from(u32::MAX))? as u32,
                None => 0,
            },
        })
    }
}

impl JsonDescriptor {
    fn into_proto(self) -> Result<RateLimitDescriptor, String> {
        let limit = self
            .limit
            .map(|limit| -> Result<_, String> {
                let unit = match limit.unit {
                    None => RateLimitUnit::Unknown,
                    Some(EnumValue::Number(n)) => RateLimitUnit::try_from(n)
                        .map_err(|_| format!("limit.unit: {n} is not a RateLimitUnit"))?,
                    Some(EnumValue::Name(name)) => RateLimitUnit::from_str_name(&name)
                        .ok_or_else(|| format!("limit.unit: {name:?} is not a RateLimitUnit"))?,
                };
                Ok(RateLimitOverride {
                    requests_per_unit: match limit.requests_per_unit {
                        Some(n) => n.get("limit.requestsPerUnit", u64::from(u32::MAX))? as u32,
                        None => 0,
                    },
                    unit: unit as i32,
                })
            })
            .transpose()?;
        Ok(RateLimitDescriptor {
            entries: self
                .entries
                .unwrap_or_default()
                .into_iter()
                .map(|entry| Entry {
                    key: entry.key.unwrap_or_default(),
                    value: entry.value.unwrap_or_default(),
                })
                .collect(),
            limit,
            hits_addend: self
                .hits_addend
                .map(|n| n.get("descriptors.hitsAddend", u64::MAX))
                .transpose()?
                .map(|value| UInt64Value { value }),
            is_negative_hits: self.is_negative_hits.unwrap_or_default(),
        })
    }
}

/// protojson's form of the response: zero values omitted, enums by name.
pub fn response_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if let Ok(code) = Code::try_from(response.overall_code)
        && code != Code::Unknown
    {
        out.insert("overallCode".into(), json!(code.as_str_name()));
    }
    if !response.statuses.is_empty() {
        let statuses = response.statuses.iter().map(status_json).collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !response.response_headers_to_add.is_empty() {
        let headers = response.response_headers_to_add.iter().map(header_json);
        out.insert(
            "responseHeadersToAdd".into(),
            Value::Array(headers.collect()),
        );
    }
    if !response.request_headers_to_add.is_empty() {
        let headers = response.request_headers_to_add.iter().map(header_json);
        out.insert(
            "requestHeadersToAdd".into(),
            Value::Array(headers.collect()),
        );
    }
    Value::Object(out)
}

fn status_json(status: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    if let Ok(code) = Code::try_from(status.code)
        && code != Code::Unknown
    {
        out.insert("code".into(), json!(code.as_str_name()));
    }
    if let Some(limit) = &status.current_limit {
        out.insert("currentLimit".into(), limit_json(limit));
    }
    if status.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(status.limit_remaining));
    }
    if let Some(duration) = &status.duration_until_reset {
        out.insert("durationUntilReset".into(), json!(duration_text(duration)));
    }
    Value::Object(out)
}

fn limit_json(limit: &RateLimit) -> Value {
    let mut out = Map::new();
    if !limit.name.is_empty() {
        out.insert("name".into(), json!(limit.name));
    }
    if limit.requests_per_unit != 0 {
        out.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
    }
    if let Ok(unit) = Unit::try_from(limit.unit)
        && unit != Unit::Unknown
    {
        out.insert("unit".into(), json!(unit.as_str_name()));
    }
    Value::Object(out)
}

fn header_json(header: &HeaderValue) -> Value {
    let mut out = Map::new();
    if !header.key.is_empty() {
        out.insert("key".into(), json!(header.key));
    }
    if !header.value.is_empty() {
        out.insert("value".into(), json!(header.value));
    }
    Value::Object(out)
}

/// `google.protobuf.Duration` as protojson writes it: seconds, then 0, 3, 6 or 9 digits.
fn duration_text(duration: &Duration) -> String {
    let (seconds, nanos) = (duration.seconds, duration.nanos);
    if nanos == 0 {
        format!("{seconds}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{seconds}.{nanos:09}s")
    }
}

#[cfg(test)]
mod tests;
