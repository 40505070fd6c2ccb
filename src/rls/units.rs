//! Config units ↔ the protobuf `Unit` enum (whose numbering is not in time order: WEEK = 7).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;

use crate::config::Unit;

pub fn to_proto(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    }
}

/// `None` for UNKNOWN or a number outside the enum (rejected by validation before this).
pub fn from_proto(unit: i32) -> Option<Unit> {
    match ProtoUnit::try_from(unit).ok()? {
        ProtoUnit::Unknown => None,
        ProtoUnit::Second => Some(Unit::Second),
        ProtoUnit::Minute => Some(Unit::Minute),
        ProtoUnit::Hour => Some(Unit::Hour),
        ProtoUnit::Day => Some(Unit::Day),
        ProtoUnit::Week => Some(Unit::Week),
        ProtoUnit::Month => Some(Unit::Month),
        ProtoUnit::Year => Some(Unit::Year),
    }
}

#[cfg(test)]
mod tests;
