//! The answer to one request, encoded on the wire without building prost's
//! `RateLimitResponse`.
//!
//! prost's message holds its statuses in a `Vec`: one allocation per request, the last one
//! on the decision path (BENCHMARKS.md, issue 16). [`Answer`] keeps them inline up to
//! [`INLINE_PLANS`] descriptors and encodes itself field by field with prost's own field
//! encoders, in the generated code's tag order, so the bytes are those prost would write
//! for [`Answer::into_response`] (the tests compare them). The JSON endpoint and the
//! `RateLimitService` trait take the prost message.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::Struct;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use smallvec::SmallVec;

use super::plan::INLINE_PLANS;

/// The statuses of one request, one per descriptor, in the request's order.
pub type Statuses = SmallVec<[DescriptorStatus; INLINE_PLANS]>;

/// What `ShouldRateLimit` answers: the fields of `RateLimitResponse` this service sets
/// (`request_headers_to_add`, `raw_body` and `quota` stay empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub overall_code: Code,
    pub statuses: Statuses,
    pub response_headers_to_add: Vec<HeaderValue>,
    pub dynamic_metadata: Option<Struct>,
}

/// As prost's message: `UNKNOWN`, nothing else.
impl Default for Answer {
    fn default() -> Self {
        Self {
            overall_code: Code::Unknown,
            statuses: Statuses::new(),
            response_headers_to_add: Vec::new(),
            dynamic_metadata: None,
        }
    }
}

impl Answer {
    /// prost's message, for the callers that read the answer (JSON, tests) rather than send it.
    pub fn into_response(self) -> RateLimitResponse {
        RateLimitResponse {
            overall_code: self.overall_code as i32,
            statuses: self.statuses.into_vec(),
            response_headers_to_add: self.response_headers_to_add,
            dynamic_metadata: self.dynamic_metadata,
            ..Default::default()
        }
    }
}

/// The fields as prost's generated `RateLimitResponse` encodes them: tag order, and an
/// enum at its default (`UNKNOWN`, 0) left out as proto3 leaves out every default.
impl prost::Message for Answer {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        let code = self.overall_code as i32;
        if code != 0 {
            encoding::int32::encode(1, &code, buf);
        }
        encoding::message::encode_repeated(2, &self.statuses, buf);
        encoding::message::encode_repeated(3, &self.response_headers_to_add, buf);
        if let Some(metadata) = &self.dynamic_metadata {
            encoding::message::encode(6, metadata, buf);
        }
    }

    /// An answer is only ever sent, never read back: every field is skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let code = self.overall_code as i32;
        (if code != 0 {
            encoding::int32::encoded_len(1, &code)
        } else {
            0
        }) + encoding::message::encoded_len_repeated(2, &self.statuses)
            + encoding::message::encoded_len_repeated(3, &self.response_headers_to_add)
            + self
                .dynamic_metadata
                .as_ref()
                .map_or(0, |metadata| encoding::message::encoded_len(6, metadata))
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
    use envoy_types::pb::google::protobuf::{Duration, Value, value::Kind};
    use prost::Message;

    fn limited(code: Code, remaining: u32, name: &str) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: name.into(),
                requests_per_unit: 10,
                unit: 3,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration {
                seconds: 12,
                nanos: 500_000_000,
            }),
            quota: None,
        }
    }

    /// Every shape the service answers: empty, statuses inline and spilled, headers,
    /// metadata, and the default code.
    fn answers() -> Vec<Answer> {
        let metadata = Struct {
            fields: [(
                "domain".to_owned(),
                Value {
                    kind: Some(Kind::StringValue("d".into())),
                },
            )]
            .into(),
        };
        let header = HeaderValue {
            key: "RateLimit-Limit".into(),
            value: "10".into(),
            ..Default::default()
        };
        let many: Statuses = (0..7)
            .map(|i| limited(Code::Ok, i, if i % 2 == 0 { "" } else { "named" }))
            .collect();
        vec![
            Answer::default(),
            Answer {
                overall_code: Code::Ok,
                statuses: [DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                }]
                .into_iter()
                .collect(),
                ..Default::default()
            },
            Answer {
                overall_code: Code::OverLimit,
                statuses: [limited(Code::OverLimit, 0, "r"), limited(Code::Ok, 9, "")]
                    .into_iter()
                    .collect(),
                response_headers_to_add: vec![header.clone(), header],
                dynamic_metadata: Some(metadata),
            },
            Answer {
                overall_code: Code::Ok,
                statuses: many,
                ..Default::default()
            },
        ]
    }

    #[test]
    fn an_answer_encodes_to_prosts_bytes_for_the_same_response() {
        for answer in answers() {
            let ours = answer.encode_to_vec();
            assert_eq!(ours.len(), answer.encoded_len());
            let prosts = answer.clone().into_response().encode_to_vec();
            assert_eq!(ours, prosts, "{answer:?}");
            // And the bytes read back as the same response.
            assert_eq!(
                RateLimitResponse::decode(ours.as_slice()).ok(),
                Some(answer.into_response())
            );
        }
    }
}
