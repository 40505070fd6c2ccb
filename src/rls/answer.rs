//! The answer to one request, encoded on the wire without building prost's
//! `RateLimitResponse`.
//!
//! prost's message holds its statuses in a `Vec`: one allocation per request, the last one on
//! the decision path (BENCHMARKS.md, "The cost of a request"). [`Answer`] keeps them inline up
//! to [`INLINE_PLANS`] descriptors and encodes itself field by field with prost's own field
//! encoders, in the generated code's tag order, so the bytes are those prost would write for
//! [`Answer::into_response`] (the tests compare them). The JSON endpoint and the
//! `RateLimitService` trait take the prost message.
//!
//! The answer is small on purpose: tonic moves it several times between the handler and the
//! encoder (the unary future, `map_response`, the body), and each move is a copy of the
//! whole value. A [`Status`] is 56 bytes where prost's `DescriptorStatus` is 120 (its limit's
//! name a `String`, its reset a `Duration`, its unused `quota`), and the rare metadata is
//! boxed: the answer went from 576 to 280 bytes.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::{Duration, Struct};
use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use smallvec::SmallVec;

use super::plan::INLINE_PLANS;

/// The statuses of one request, one per descriptor, in the request's order.
pub type Statuses = SmallVec<[Status; INLINE_PLANS]>;

/// What `ShouldRateLimit` answers: the fields of `RateLimitResponse` this service sets
/// (`request_headers_to_add`, `raw_body` and `quota` stay empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub overall_code: Code,
    pub statuses: Statuses,
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Boxed: set only with `--response-dynamic-metadata`.
    pub dynamic_metadata: Option<Box<Struct>>,
}

/// One descriptor's status: `DescriptorStatus` as this service fills it (no `quota`), in a
/// compact form that encodes to the same bytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    /// `rate_limit_response::Code`, as prost keeps it.
    pub code: i32,
    pub current_limit: Option<CurrentLimit>,
    pub limit_remaining: u32,
    /// `duration_until_reset`, in milliseconds (the engine's resolution).
    pub until_reset_ms: Option<u64>,
}

/// `DescriptorStatus.current_limit`: the rule's name shared with the config, not copied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CurrentLimit {
    pub name: Option<Arc<str>>,
    pub requests_per_unit: u32,
    /// `rate_limit::Unit`, as prost keeps it.
    pub unit: i32,
}

impl Status {
    /// A descriptor no rule limits.
    pub fn ok() -> Self {
        Self {
            code: Code::Ok as i32,
            ..Self::default()
        }
    }

    /// `duration_until_reset` in whole seconds, rounded up (a client retrying after it must
    /// not come early); 0 without one.
    pub fn reset_seconds(&self) -> i64 {
        self.until_reset_ms.map_or(0, |ms| {
            i64::try_from(ms.div_ceil(1_000)).unwrap_or(i64::MAX)
        })
    }

    /// prost's message, for the callers that read the answer rather than send it.
    pub fn into_descriptor_status(self) -> DescriptorStatus {
        DescriptorStatus {
            code: self.code,
            current_limit: self.current_limit.map(|limit| RateLimit {
                name: limit
                    .name
                    .as_deref()
                    .map_or_else(String::new, str::to_owned),
                requests_per_unit: limit.requests_per_unit,
                unit: limit.unit,
            }),
            limit_remaining: self.limit_remaining,
            duration_until_reset: self.until_reset_ms.map(duration),
            quota: None,
        }
    }
}

fn duration(ms: u64) -> Duration {
    Duration {
        seconds: i64::try_from(ms / 1_000).unwrap_or(i64::MAX),
        // < 1e9 by construction
        nanos: ((ms % 1_000) * 1_000_000) as i32,
    }
}

/// `RateLimit`'s fields in prost's order (its tags: `requests_per_unit` 1, `unit` 2,
/// `name` 3), the name written from the shared `str`.
impl CurrentLimit {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    fn body_len(&self) -> usize {
        let name = self.name();
        (if self.requests_per_unit != 0 {
            encoding::uint32::encoded_len(1, &self.requests_per_unit)
        } else {
            0
        }) + (if self.unit != 0 {
            encoding::int32::encoded_len(2, &self.unit)
        } else {
            0
        }) + (if name.is_empty() {
            0
        } else {
            encoding::key_len(3) + encoding::encoded_len_varint(name.len() as u64) + name.len()
        })
    }

    fn encode_body(&self, buf: &mut impl BufMut) {
        if self.requests_per_unit != 0 {
            encoding::uint32::encode(1, &self.requests_per_unit, buf);
        }
        if self.unit != 0 {
            encoding::int32::encode(2, &self.unit, buf);
        }
        let name = self.name();
        if !name.is_empty() {
            encoding::encode_key(3, WireType::LengthDelimited, buf);
            encoding::encode_varint(name.len() as u64, buf);
            buf.put_slice(name.as_bytes());
        }
    }
}

/// The `prost::Message` methods of a message this service only ever sends, never reads
/// back: decoding skips every field, and clearing is resetting to the default.
macro_rules! send_only_methods {
    () => {
        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), prost::DecodeError> {
            encoding::skip_field(wire_type, tag, buf, ctx)
        }

        fn clear(&mut self) {
            *self = Self::default();
        }
    };
}

/// `DescriptorStatus`'s fields in prost's tag order: `code` 1, `current_limit` 2,
/// `limit_remaining` 3, `duration_until_reset` 4 (`quota`, 5, is never set).
impl prost::Message for Status {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.code != 0 {
            encoding::int32::encode(1, &self.code, buf);
        }
        if let Some(limit) = &self.current_limit {
            encoding::encode_key(2, WireType::LengthDelimited, buf);
            encoding::encode_varint(limit.body_len() as u64, buf);
            limit.encode_body(buf);
        }
        if self.limit_remaining != 0 {
            encoding::uint32::encode(3, &self.limit_remaining, buf);
        }
        if let Some(ms) = self.until_reset_ms {
            encoding::message::encode(4, &duration(ms), buf);
        }
    }

    send_only_methods!();

    fn encoded_len(&self) -> usize {
        (if self.code != 0 {
            encoding::int32::encoded_len(1, &self.code)
        } else {
            0
        }) + self.current_limit.as_ref().map_or(0, |limit| {
            let len = limit.body_len();
            encoding::key_len(2) + encoding::encoded_len_varint(len as u64) + len
        }) + (if self.limit_remaining != 0 {
            encoding::uint32::encoded_len(3, &self.limit_remaining)
        } else {
            0
        }) + self
            .until_reset_ms
            .map_or(0, |ms| encoding::message::encoded_len(4, &duration(ms)))
    }
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
            statuses: self
                .statuses
                .into_iter()
                .map(Status::into_descriptor_status)
                .collect(),
            response_headers_to_add: self.response_headers_to_add,
            dynamic_metadata: self.dynamic_metadata.map(|metadata| *metadata),
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
            encoding::message::encode(6, &**metadata, buf);
        }
    }

    send_only_methods!();

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
                .map_or(0, |metadata| encoding::message::encoded_len(6, &**metadata))
    }
}

#[cfg(test)]
mod tests;
