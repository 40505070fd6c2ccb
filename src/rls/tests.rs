//! Request semantics in process, on a manual clock: windows roll over when the test says so,
//! so nothing here waits for a real minute or depends on where in the minute it runs. The
//! integration tests (`integration/`) check the same behaviour over the wire.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use gcounter_engine::ManualClock;

use gcounter_rls_integration::flat_rules;
use gcounter_rls_integration::grpc::{
    code, codes, codes_in_a_row, descriptor, header, overall, request,
};
use gcounter_rls_integration::metrics::decisions;

use super::{HeaderNames, RateLimiter, RlsSettings};
use crate::telemetry::Metrics;

const MINUTE_MS: u64 = 60_000;
/// A minute boundary, far from the epoch: windows have a previous cell.
const START_MS: u64 = 1_700_000_040_000;

/// A limiter on `yaml` and the clock it decides by.
struct Harness {
    limiter: RateLimiter,
    clock: Arc<ManualClock>,
    metrics: Arc<Metrics>,
}

impl Harness {
    fn new(yaml: &str, settings: RlsSettings) -> Self {
        assert_eq!(
            START_MS % MINUTE_MS,
            0,
            "START_MS must be a minute boundary"
        );
        let limits = match crate::config::load_str("test.yaml", yaml) {
            Ok(limits) => limits,
            Err(errors) => panic!("test limits must load: {errors}"),
        };
        let clock = Arc::new(ManualClock::new(START_MS));
        let (limiter, metrics) =
            RateLimiter::in_process(limits, Arc::clone(&clock) as _, 1_000, settings);
        Self {
            limiter,
            clock,
            metrics,
        }
    }

    async fn check(
        &self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        match self
            .limiter
            .should_rate_limit(&request(domain, descriptors))
            .await
        {
            Ok(answer) => answer.into_response(),
            Err(status) => panic!("a valid request was refused: {status:?}"),
        }
    }

    /// The codes of `calls` requests in a row with the single descriptor `entries`.
    async fn codes_in_a_row(
        &self,
        calls: usize,
        domain: &str,
        entries: &[(&str, &str)],
    ) -> Vec<Code> {
        codes_in_a_row(calls, async || self.one(domain, entries).await).await
    }

    async fn one(&self, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
        let mut response = self.check(domain, vec![descriptor(entries)]).await;
        assert_eq!(response.statuses.len(), 1, "{response:?}");
        response.statuses.remove(0)
    }

    /// `rls_descriptor_decisions_total{domain, rule, outcome}`, if the series exists.
    fn decisions(&self, domain: &str, rule: &str, outcome: &str) -> Option<f64> {
        decisions(&self.metrics.encode(), domain, rule, outcome)
    }
}

fn reset_secs(status: &DescriptorStatus) -> Option<i64> {
    status.duration_until_reset.as_ref().map(|d| d.seconds)
}

/// Two per minute on key `k` of domain `d`.
fn two_per_minute() -> String {
    gcounter_rls_integration::one_rule("d", "k", "minute", 1, 2)
}

#[tokio::test]
async fn a_limit_of_n_lets_n_through_and_the_window_slides() {
    let h = Harness::new(&two_per_minute(), RlsSettings::default());
    let codes = h.codes_in_a_row(3, "d", &[("k", "a")]).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);

    // Half-way through the next minute the previous one still weighs 2 × 1/2 = 1: one more.
    h.clock.advance(MINUTE_MS + MINUTE_MS / 2);
    let s = h.one("d", &[("k", "a")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 0), "{s:?}");
    assert_eq!(reset_secs(&s), Some(30), "{s:?}");
    assert_eq!(code(&h.one("d", &[("k", "a")]).await), Code::OverLimit);

    // Two windows later nothing remains of it.
    h.clock.advance(2 * MINUTE_MS);
    let s = h.one("d", &[("k", "a")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "{s:?}");
    // Another value is another counter all along.
    assert_eq!(h.one("d", &[("k", "b")]).await.limit_remaining, 1);
}

#[tokio::test]
async fn a_replaced_limit_is_not_counted_while_the_replacing_one_applies() {
    let yaml = "\
domain: r
descriptors:
  - key: a
    descriptors:
      - key: user
        rate_limit: { name: specific, unit: minute, requests_per_unit: 1 }
  - key: b
    descriptors:
      - key: user
        rate_limit:
          replaces: [{ name: specific }]
          unit: minute
          requests_per_unit: 3
";
    let h = Harness::new(yaml, RlsSettings::default());
    let both = || {
        vec![
            descriptor(&[("a", "1"), ("user", "bob")]),
            descriptor(&[("b", "2"), ("user", "bob")]),
        ]
    };
    for call in 1..=3u32 {
        let r = h.check("r", both()).await;
        assert_eq!(overall(&r), Code::Ok, "call {call}: {r:?}");
        assert_eq!(r.statuses[0].current_limit, None, "call {call}: {r:?}");
        assert_eq!(
            r.statuses[1].limit_remaining,
            3 - call,
            "call {call}: {r:?}"
        );
    }
    assert_eq!(overall(&h.check("r", both()).await), Code::OverLimit);
    // Alone, the specific limit applies, and none of the replaced calls counted against it.
    let s = h.one("r", &[("a", "1"), ("user", "bob")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 0), "{s:?}");
}

const SHADOW: &str = "\
domain: s
descriptors:
  - key: user
    value: a
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: user
    value: b
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

#[tokio::test]
async fn a_shadow_rule_answers_ok_over_its_limit_and_counts_it() {
    let h = Harness::new(SHADOW, RlsSettings::default());
    for _ in 0..4 {
        let s = h.one("s", &[("user", "a")]).await;
        assert_eq!(code(&s), Code::Ok, "{s:?}");
    }
    assert_eq!(h.decisions("s", "s.user_a", "within_limit"), Some(2.0));
    assert_eq!(h.decisions("s", "s.user_a", "shadow_over_limit"), Some(2.0));
    let codes = h.codes_in_a_row(3, "s", &[("user", "b")]).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(h.decisions("s", "s.user_b", "over_limit"), Some(1.0));
}

#[tokio::test]
async fn global_shadow_mode_turns_only_the_overall_code_ok() {
    let settings = RlsSettings {
        shadow_mode: true,
        ..RlsSettings::default()
    };
    let h = Harness::new(SHADOW, settings);
    let b_then_a = || vec![descriptor(&[("user", "b")]), descriptor(&[("user", "a")])];
    // Call by call, the statuses: b's rule is over from the third call, a's is in shadow mode.
    let (ok, over) = (Code::Ok, Code::OverLimit);
    for (call, statuses) in (1..).zip([[ok, ok], [ok, ok], [over, ok], [over, ok]]) {
        let r = h.check("s", b_then_a()).await;
        let got = (overall(&r), codes(&r));
        assert_eq!(got, (ok, statuses.to_vec()), "call {call}: {r:?}");
    }
    assert_eq!(h.decisions("s", "s.user_b", "shadow_over_limit"), Some(2.0));
}

#[tokio::test]
async fn a_request_override_counts_in_the_window_of_its_unit() {
    let h = Harness::new(&two_per_minute(), RlsSettings::default());
    let with_override = || {
        let mut d = descriptor(&[("k", "o")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit: RateLimitUnit::Hour as i32,
        });
        d
    };
    h.clock.advance(15 * MINUTE_MS);
    let first = h.check("d", vec![with_override()]).await;
    assert_eq!(code(&first.statuses[0]), Code::Ok, "{first:?}");
    let limit = first.statuses[0].current_limit.clone().unwrap_or_default();
    assert_eq!(limit.requests_per_unit, 1, "{first:?}");
    // The hour window started at a whole hour: the reset says how much of it is left.
    let into_hour_ms = (START_MS + 15 * MINUTE_MS) % (60 * MINUTE_MS);
    let left_secs = i64::try_from((60 * MINUTE_MS - into_hour_ms) / 1_000).unwrap_or(i64::MAX);
    assert_eq!(reset_secs(&first.statuses[0]), Some(left_secs), "{first:?}");
    let second = h.check("d", vec![with_override()]).await;
    assert_eq!(code(&second.statuses[0]), Code::OverLimit, "{second:?}");
    // The config's minute window of the same descriptor is another counter: untouched.
    assert_eq!(h.one("d", &[("k", "o")]).await.limit_remaining, 1);
}

#[tokio::test]
async fn response_headers_describe_the_most_constrained_descriptor_exactly() {
    let yaml = flat_rules("hdr", &[("wide", "hour", 10), ("narrow", "minute", 2)]);
    let h = Harness::new(&yaml, with_response_headers());
    h.clock.advance(20_000);
    let both = || vec![descriptor(&[("wide", "w")]), descriptor(&[("narrow", "n")])];
    // Over: the exact wait (40.001 s: at the rollover the 2 still weigh fully), rounded up.
    for (remaining, over, reset) in [("1", false, "40"), ("0", false, "40"), ("0", true, "41")] {
        let r = h.check("hdr", both()).await;
        let headers: Vec<(String, String)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.to_ascii_lowercase(), h.value.clone()))
            .collect();
        let mut want = vec![
            ("ratelimit-limit".to_owned(), "2".to_owned()),
            ("ratelimit-remaining".to_owned(), remaining.to_owned()),
            ("ratelimit-reset".to_owned(), reset.to_owned()),
        ];
        if over {
            want.push(("retry-after".to_owned(), reset.to_owned()));
        }
        assert_eq!(headers, want, "{r:?}");
    }
}

/// Two quotas and a regular limit, per minute.
const QUOTAS: &str = "\
domain: q
descriptors:
  - key: quota_a
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota_b
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: regular
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

/// One descriptor per key of `keys`, each the single entry `key: value`.
fn one_entry_each(keys: &[&str], value: &str) -> Vec<RateLimitDescriptor> {
    keys.iter().map(|key| descriptor(&[(key, value)])).collect()
}

fn with_response_headers() -> RlsSettings {
    RlsSettings {
        response_headers: Some(HeaderNames::default()),
        ..RlsSettings::default()
    }
}

/// Upstream's rule: a quota descriptor over its limit denies only when every quota
/// descriptor of the request is over; statuses stay per descriptor.
#[tokio::test]
async fn quota_mode_denies_only_when_every_quota_is_over() {
    let h = Harness::new(QUOTAS, with_response_headers());
    let both = || one_entry_each(&["quota_a", "quota_b"], "x");
    // Call by call: the statuses (per descriptor) and the overall code. From the second call
    // quota_a (1/min) is over while quota_b (3/min) has room: OK overall; from the fourth both
    // are over: OVER_LIMIT.
    let (ok, over) = (Code::Ok, Code::OverLimit);
    let calls = [
        ([ok, ok], ok),
        ([over, ok], ok),
        ([over, ok], ok),
        ([over, over], over),
    ];
    for (call, (statuses, want)) in (1..).zip(calls) {
        let r = h.check("q", both()).await;
        assert_eq!(
            (codes(&r), overall(&r)),
            (statuses.to_vec(), want),
            "call {call}: {r:?}"
        );
        // Retry-After only on an OVER_LIMIT answer.
        let retry_after = header(&r, "Retry-After");
        assert_eq!(retry_after.is_some(), want == over, "call {call}: {r:?}");
        if call == 2 {
            // The headers describe the fewest remaining.
            assert_eq!(header(&r, "RateLimit-Remaining"), Some("0"), "{r:?}");
        }
    }

    // A lone quota descriptor over its limit is all the quotas: OVER_LIMIT.
    let alone = h.check("q", vec![descriptor(&[("quota_a", "x")])]).await;
    assert_eq!(overall(&alone), Code::OverLimit, "{alone:?}");

    // After the windows slide out, the quotas are whole again.
    h.clock.advance(2 * MINUTE_MS);
    assert_eq!(overall(&h.check("q", both()).await), Code::Ok);
}

/// A regular descriptor over its limit still denies, whatever the quotas say, and the
/// headers describe it (not a quota that is over too).
#[tokio::test]
async fn a_regular_descriptor_over_its_limit_still_denies_beside_quotas() {
    let h = Harness::new(QUOTAS, with_response_headers());
    let mixed = || one_entry_each(&["regular", "quota_a", "quota_b"], "r");
    for _ in 0..2 {
        let r = h.check("q", mixed()).await;
        assert_eq!(codes(&r).first(), Some(&Code::Ok), "{r:?}");
    }
    let r = h.check("q", mixed()).await;
    assert_eq!(
        codes(&r),
        [Code::OverLimit, Code::OverLimit, Code::Ok],
        "{r:?}"
    );
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(header(&r, "RateLimit-Limit"), Some("2"), "{r:?}");
}

/// `all_or_nothing`: an OVER_LIMIT request gives back what its passed descriptors consumed;
/// without it (upstream's way) they keep it.
#[tokio::test]
async fn all_or_nothing_across_descriptors_refunds_the_passed_ones() {
    for all_or_nothing in [false, true] {
        let settings = RlsSettings {
            all_or_nothing,
            ..RlsSettings::default()
        };
        let h = Harness::new(
            &flat_rules("aon", &[("team", "minute", 2), ("user", "minute", 1)]),
            settings,
        );
        let both = || vec![descriptor(&[("team", "t")]), descriptor(&[("user", "u")])];
        assert_eq!(overall(&h.check("aon", both()).await), Code::Ok);
        let denied = h.check("aon", both()).await;
        assert_eq!(codes(&denied), [Code::Ok, Code::OverLimit], "{denied:?}");
        // The team's second unit: still there only if the denied request gave it back.
        let team = h.one("aon", &[("team", "t")]).await;
        let want = if all_or_nothing {
            Code::Ok
        } else {
            Code::OverLimit
        };
        assert_eq!(
            code(&team),
            want,
            "all_or_nothing {all_or_nothing}: {team:?}"
        );
    }
}

/// A request whose first descriptor is decided synchronously (its cell warm) and whose
/// second must wait (a cold cell) is finished asynchronously without deciding the first
/// again: it is counted once.
#[tokio::test]
async fn a_half_decided_request_consumes_each_descriptor_once() {
    let h = Harness::new(
        &flat_rules("half", &[("team", "minute", 2), ("user", "minute", 2)]),
        RlsSettings::default(),
    );
    assert_eq!(code(&h.one("half", &[("team", "t")]).await), Code::Ok);
    let both = request(
        "half",
        vec![descriptor(&[("team", "t")]), descriptor(&[("user", "u")])],
    );
    let unfinished = match h.limiter.should_rate_limit_now(&both) {
        super::Now::Later(unfinished) => unfinished,
        super::Now::Answered(answer) => panic!("the user's cell is cold: {answer:?}"),
    };
    let answer = match h.limiter.finish(&both, unfinished).await {
        Ok(answer) => answer.into_response(),
        Err(status) => panic!("a valid request was refused: {status:?}"),
    };
    assert_eq!(codes(&answer), [Code::Ok, Code::Ok], "{answer:?}");
    let remaining: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [0, 1], "the team counted once: {answer:?}");
    // Both cells warm now: decided at once, and the team is over its two.
    match h.limiter.should_rate_limit_now(&both) {
        super::Now::Answered(Ok(answer)) => {
            let answer = answer.into_response();
            assert_eq!(codes(&answer), [Code::OverLimit, Code::Ok], "{answer:?}");
        }
        super::Now::Answered(Err(status)) => panic!("refused: {status:?}"),
        super::Now::Later(_) => panic!("both cells are warm"),
    }
}
