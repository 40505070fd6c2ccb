//! Parity with envoyproxy/ratelimit's config keys and answers, through the real binary over
//! real gRPC: `quota_mode` (per rule and the global switch, also read from upstream's
//! `QUOTA_MODE`), and the semantics where we used to differ from upstream.
//!
//! Every test starts its own service, so counters start at zero; counting tests first step
//! away from a window boundary.

mod support;

use std::time::Duration;

use support::Service;
use support::grpc::{
    self, Code, DescriptorStatus, RateLimitDescriptor, RateLimitResponse, RlsClient, descriptor,
    request,
};

/// Room for every counting test: all its calls fall in one minute.
const WORK: Duration = Duration::from_secs(3);

fn stay_in_one_minute() {
    support::avoid_window_boundary(Duration::from_secs(60), WORK);
}

/// A running service on `yaml` with a connected client. Hold the whole value: the temp dir
/// holds the config file.
struct Rls {
    _dir: tempfile::TempDir,
    _service: Service,
    client: RlsClient,
}

impl Rls {
    async fn start(yaml: &str, args: &[&str], env: &[(&str, &str)]) -> Rls {
        let (dir, limits) = support::limits_file(yaml);
        let service = Service::start_with_env(&limits, args, env);
        let client = grpc::rls_client(service.grpc_addr).await;
        Rls {
            _dir: dir,
            _service: service,
            client,
        }
    }

    async fn check(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        let n = descriptors.len();
        let response =
            grpc::should_rate_limit(&mut self.client, request(domain, descriptors)).await;
        assert_eq!(response.statuses.len(), n, "{response:?}");
        response
    }
}

fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap_or(Code::Unknown)
}

fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

fn codes(response: &RateLimitResponse) -> Vec<Code> {
    response.statuses.iter().map(code).collect()
}

fn header<'r>(response: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

const QUOTA_YAML: &str = "\
domain: quota
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

/// Upstream's rule: a quota descriptor over its limit denies only when every quota
/// descriptor of the request is over; statuses stay per descriptor.
#[tokio::test]
async fn quota_mode_denies_only_when_every_quota_is_over() {
    let mut rls = Rls::start(QUOTA_YAML, &["--response-headers"], &[]).await;
    stay_in_one_minute();
    let both = || {
        vec![
            descriptor(&[("quota_a", "x")]),
            descriptor(&[("quota_b", "x")]),
        ]
    };
    let first = rls.check("quota", both()).await;
    assert_eq!(overall(&first), Code::Ok, "{first:?}");
    // quota_a (1/min) is over, quota_b still has room: OK overall, statuses per descriptor.
    let second = rls.check("quota", both()).await;
    assert_eq!(codes(&second), [Code::OverLimit, Code::Ok], "{second:?}");
    assert_eq!(overall(&second), Code::Ok, "{second:?}");
    // No Retry-After on an OK answer; the headers describe the fewest remaining.
    assert_eq!(header(&second, "Retry-After"), None, "{second:?}");
    assert_eq!(
        header(&second, "RateLimit-Remaining"),
        Some("0"),
        "{second:?}"
    );
    let third = rls.check("quota", both()).await;
    assert_eq!(codes(&third), [Code::OverLimit, Code::Ok], "{third:?}");
    assert_eq!(overall(&third), Code::Ok, "{third:?}");
    // Now both are over: OVER_LIMIT.
    let fourth = rls.check("quota", both()).await;
    assert_eq!(
        codes(&fourth),
        [Code::OverLimit, Code::OverLimit],
        "{fourth:?}"
    );
    assert_eq!(overall(&fourth), Code::OverLimit, "{fourth:?}");
    assert!(header(&fourth, "Retry-After").is_some(), "{fourth:?}");

    // A lone quota descriptor over its limit is all the quotas: OVER_LIMIT.
    let alone = rls
        .check("quota", vec![descriptor(&[("quota_a", "x")])])
        .await;
    assert_eq!(overall(&alone), Code::OverLimit, "{alone:?}");
}

/// A regular descriptor over its limit still denies, whatever the quotas say, and the
/// headers describe it (not a quota that is over too).
#[tokio::test]
async fn a_regular_descriptor_over_its_limit_still_denies_beside_quotas() {
    let mut rls = Rls::start(QUOTA_YAML, &["--response-headers"], &[]).await;
    stay_in_one_minute();
    let mixed = || {
        vec![
            descriptor(&[("regular", "r")]),
            descriptor(&[("quota_a", "r")]),
            descriptor(&[("quota_b", "r")]),
        ]
    };
    for _ in 0..2 {
        let r = rls.check("quota", mixed()).await;
        assert_eq!(codes(&r)[0], Code::Ok, "{r:?}");
    }
    let r = rls.check("quota", mixed()).await;
    assert_eq!(
        codes(&r),
        [Code::OverLimit, Code::OverLimit, Code::Ok],
        "{r:?}"
    );
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(header(&r, "RateLimit-Limit"), Some("2"), "{r:?}");
}

const PLAIN_YAML: &str = "\
domain: plain
descriptors:
  - key: a
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: b
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

/// The global switch makes every descriptor a quota: our flag, and upstream's `QUOTA_MODE`.
#[tokio::test]
async fn global_quota_mode_from_the_flag_or_upstreams_variable() {
    for (args, env) in [
        (&["--quota-mode"][..], &[][..]),
        (&[][..], &[("QUOTA_MODE", "true")][..]),
    ] {
        let mut rls = Rls::start(PLAIN_YAML, args, env).await;
        stay_in_one_minute();
        let both = || vec![descriptor(&[("a", "1")]), descriptor(&[("b", "1")])];
        rls.check("plain", both()).await;
        let r = rls.check("plain", both()).await;
        assert_eq!(
            codes(&r),
            [Code::OverLimit, Code::Ok],
            "{args:?} {env:?}: {r:?}"
        );
        assert_eq!(overall(&r), Code::Ok, "{args:?} {env:?}: {r:?}");
        let alone = rls.check("plain", vec![descriptor(&[("a", "1")])]).await;
        assert_eq!(
            overall(&alone),
            Code::OverLimit,
            "{args:?} {env:?}: {alone:?}"
        );
    }
    // Without the switch the same requests are denied.
    let mut rls = Rls::start(PLAIN_YAML, &[], &[("QUOTA_MODE", "false")]).await;
    stay_in_one_minute();
    let both = || vec![descriptor(&[("a", "1")]), descriptor(&[("b", "1")])];
    rls.check("plain", both()).await;
    let r = rls.check("plain", both()).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
}
