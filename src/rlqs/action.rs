//! Bucket actions as Envoy reads them.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{self, BlanketRule};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, AbandonAction, QuotaAssignmentAction,
};
use envoy_types::pb::google::protobuf;

use super::share::Strategy;

/// `strategy` for the bucket, for `ttl` (Envoy reads its whole seconds; 0 expires it at once).
pub fn assignment(id: BucketId, strategy: Strategy, ttl: Duration) -> BucketAction {
    let strategy = match strategy {
        Strategy::AllowAll => {
            rate_limit_strategy::Strategy::BlanketRule(BlanketRule::AllowAll as i32)
        }
        Strategy::DenyAll => {
            rate_limit_strategy::Strategy::BlanketRule(BlanketRule::DenyAll as i32)
        }
        Strategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_s,
        } => rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill: Some(protobuf::UInt32Value {
                value: tokens_per_fill,
            }),
            fill_interval: Some(protobuf::Duration {
                seconds: i64::from(fill_interval_s),
                nanos: 0,
            }),
        }),
    };
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
            QuotaAssignmentAction {
                assignment_time_to_live: Some(protobuf::Duration {
                    seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            },
        )),
    }
}

/// Envoy drops the bucket (no request reported for `--rlqs-abandon-after`).
pub fn abandon(id: BucketId) -> BucketAction {
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(bucket_action::BucketAction::AbandonAction(AbandonAction {})),
    }
}
