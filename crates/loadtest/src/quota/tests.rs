use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::QuotaAssignmentAction;
use envoy_types::pb::google::protobuf;

use super::{Fallback, Quota};

fn action(strategy: Strategy, ttl_s: i64) -> QuotaAssignmentAction {
    QuotaAssignmentAction {
        assignment_time_to_live: Some(protobuf::Duration {
            seconds: ttl_s,
            nanos: 0,
        }),
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    }
}

fn tokens(max: u32, per_fill: u32, every_s: i64) -> Strategy {
    Strategy::TokenBucket(TokenBucket {
        max_tokens: max,
        tokens_per_fill: Some(protobuf::UInt32Value { value: per_fill }),
        fill_interval: Some(protobuf::Duration {
            seconds: every_s,
            nanos: 0,
        }),
    })
}

fn admitted(quota: &mut Quota, from: Instant, per_second: u32, seconds: u32) -> u32 {
    (0..per_second * seconds)
        .filter(|i| {
            quota.admit(from + Duration::from_secs_f64(f64::from(*i) / f64::from(per_second)))
        })
        .count() as u32
}

#[test]
fn unassigned_admits_all_then_the_token_bucket_holds_its_rate() {
    let now = Instant::now();
    let mut quota = Quota::new(Fallback::AllowAll, Fallback::DenyAll);
    assert_eq!(admitted(&mut quota, now, 30, 1), 30);
    quota.assign(&action(tokens(5, 5, 1), 10), now);
    // Full at 5, then 5 a second: 5 + 5 × 4 (the last arrival is 29/30 s into second 4).
    let got = admitted(&mut quota, now, 30, 4);
    assert!((24..=25).contains(&got), "{got}");
}

#[test]
fn unassigned_denies_all_when_told_to() {
    let now = Instant::now();
    let mut quota = Quota::new(Fallback::DenyAll, Fallback::AllowAll);
    assert_eq!(admitted(&mut quota, now, 30, 1), 0);
    quota.assign(&action(tokens(5, 5, 1), 10), now);
    let burst = (0..10).filter(|_| quota.admit(now)).count();
    assert_eq!(burst, 5, "then the token bucket: full at 5");
}

#[test]
fn past_its_time_to_live_the_expired_behaviour_decides() {
    let now = Instant::now();
    for (expired, want) in [(Fallback::DenyAll, 0), (Fallback::AllowAll, 30)] {
        let mut quota = Quota::new(Fallback::AllowAll, expired);
        quota.assign(&action(tokens(5, 5, 1), 2), now);
        assert_eq!(
            admitted(&mut quota, now + Duration::from_secs(2), 30, 1),
            want
        );
    }
}

#[test]
fn an_identical_assignment_keeps_its_tokens_and_a_changed_one_starts_full() {
    let now = Instant::now();
    let mut quota = Quota::new(Fallback::AllowAll, Fallback::DenyAll);
    quota.assign(&action(tokens(5, 5, 1), 2), now);
    assert_eq!(
        admitted(&mut quota, now, 1000, 0) + (0..5).filter(|_| quota.admit(now)).count() as u32,
        5
    );
    quota.assign(&action(tokens(5, 5, 1), 10), now);
    assert!(!quota.admit(now), "renewed: no new tokens");
    assert!(
        quota.admit(now + Duration::from_secs(5)),
        "renewed: the time to live extended"
    );
    quota.assign(
        &action(Strategy::BlanketRule(BlanketRule::DenyAll as i32), 10),
        now,
    );
    assert!(!quota.admit(now + Duration::from_secs(6)));
    quota.assign(&action(tokens(3, 3, 1), 10), now + Duration::from_secs(6));
    assert_eq!(
        (0..5)
            .filter(|_| quota.admit(now + Duration::from_secs(6)))
            .count(),
        3
    );
}

#[test]
fn a_bucket_that_differs_only_in_its_interval_seconds_runs_on_at_the_old_rate() {
    let now = Instant::now();
    let mut quota = Quota::new(Fallback::DenyAll, Fallback::DenyAll);
    quota.assign(&action(tokens(1, 10, 1), 30), now);
    quota.assign(&action(tokens(1, 10, 20), 30), now + Duration::from_secs(1));
    // Still about 10 a second (50 in 5 s, less the rounding of many small refills), not
    // one every 2 s.
    let got = admitted(&mut quota, now + Duration::from_secs(1), 100, 5);
    assert!((40..=51).contains(&got), "{got}");
}

#[test]
fn an_identical_bucket_sent_after_the_old_one_expired_starts_full() {
    let now = Instant::now();
    let mut quota = Quota::new(Fallback::DenyAll, Fallback::DenyAll);
    quota.assign(&action(tokens(5, 1, 60), 2), now);
    assert_eq!((0..10).filter(|_| quota.admit(now)).count(), 5);
    let later = now + Duration::from_secs(3);
    quota.assign(&action(tokens(5, 1, 60), 2), later);
    assert_eq!((0..10).filter(|_| quota.admit(later)).count(), 5);
}
