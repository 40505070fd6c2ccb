//! Where a setting comes from, through the real binary: the command-line flag, else our
//! `RLS_*` variable, else envoyproxy/ratelimit's variable, else the default. "Set" means
//! present: `RLS_SHADOW_MODE=false` beats `SHADOW_MODE=true`. The start log names each
//! setting's source and warns when ours overrides upstream's (secrets redacted: see the
//! unit tests of `serve::tests::precedence`).

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{Code, descriptor, request};
use support::rls::Rls;
use support::{Launch, Service, UpstreamRuntime};

/// Five a minute: a sixth request is over the limit, unless in shadow mode.
const LIMITS: &str = "
domain: precedence
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

/// The overall codes of six requests in a row from one new client.
async fn six_overall_codes(rls: &mut Rls, client: &str) -> Vec<Code> {
    let mut codes = Vec::new();
    for _ in 0..6 {
        let response = rls
            .send(request(
                "precedence",
                vec![descriptor(&[("client", client)])],
            ))
            .await;
        codes.push(Code::try_from(response.overall_code).unwrap_or(Code::Unknown));
    }
    codes
}

fn limited() -> Vec<Code> {
    let mut codes = vec![Code::Ok; 5];
    codes.push(Code::OverLimit);
    codes
}

async fn started(args: &[&str], env: &[(&str, &str)]) -> (Rls, Vec<Code>, String) {
    let mut rls = Rls::start_with(LIMITS, args, Launch::env(env)).await;
    let codes = six_overall_codes(&mut rls, "alice").await;
    let log = rls.service.log_tail(400);
    (rls, codes, log)
}

/// Started with `args` and `env`, the service is in shadow mode (six OKs in a row) and its
/// start log names `source` as where the setting came from.
async fn assert_shadow_mode_from(args: &[&str], env: &[(&str, &str)], source: &str) {
    let (_rls, codes, log) = started(args, env).await;
    assert_eq!(codes, vec![Code::Ok; 6], "shadow mode:\n{log}");
    support::assert_mentions(
        &log,
        &format!("setting --shadow-mode=true from {source}"),
        "the start log",
    );
}

#[tokio::test]
async fn our_variable_set_to_false_beats_upstreams_true() {
    support::stay_in_one_minute(Duration::from_secs(10));
    let env = [("RLS_SHADOW_MODE", "false"), ("SHADOW_MODE", "true")];
    let (_rls, codes, log) = started(&[], &env).await;
    assert_eq!(codes, limited(), "not in shadow mode:\n{log}");
    support::assert_mentions(
        &log,
        "--shadow-mode is false from RLS_SHADOW_MODE, which wins over upstream's SHADOW_MODE=true",
        "the start log's warning",
    );
    support::assert_mentions(&log, "shadow_mode=false", "the switches in effect");
}

#[tokio::test]
async fn upstreams_variable_alone_applies() {
    support::stay_in_one_minute(Duration::from_secs(10));
    assert_shadow_mode_from(&[], &[("SHADOW_MODE", "true")], "upstream's SHADOW_MODE").await;
}

#[tokio::test]
async fn the_flag_beats_both_variables() {
    support::stay_in_one_minute(Duration::from_secs(10));
    let env = [("RLS_SHADOW_MODE", "false"), ("SHADOW_MODE", "false")];
    assert_shadow_mode_from(&["--shadow-mode"], &env, "flag").await;

    // Our variable, set, with upstream's unset.
    assert_shadow_mode_from(&[], &[("RLS_SHADOW_MODE", "true")], "RLS_SHADOW_MODE").await;
}

#[tokio::test]
async fn the_start_log_names_each_settings_source() {
    let (_rls, _codes, log) = started(
        &["--near-limit-ratio", "0.5"],
        &[("RLS_QUOTA_MODE", "true"), ("MERGE_DOMAIN_CONFIG", "true")],
    )
    .await;
    for line in [
        "setting --near-limit-ratio=0.5 from flag",
        "setting --quota-mode=true from RLS_QUOTA_MODE",
        "setting --merge-domain-config=true from upstream's MERGE_DOMAIN_CONFIG",
        "switches: shadow_mode=false quota_mode=true",
    ] {
        support::assert_mentions(&log, line, "the start log");
    }
}

/// Started as upstream's image starts it (no arguments): the same rule.
#[tokio::test]
async fn without_arguments_our_variable_still_beats_upstreams() {
    let runtime = UpstreamRuntime::new(
        "domain: upstream\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n",
    );
    let prefix = format!("precedence-{}-{}:", std::process::id(), support::now_ms());
    let service = Service::start_upstream(&[
        ("RUNTIME_ROOT", &runtime.root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "info"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("SHADOW_MODE", "true"),
        ("RLS_SHADOW_MODE", "false"),
    ]);
    let mut client = support::grpc::rls_client(service.grpc_addr).await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let ask = request("upstream", vec![descriptor(&[("k", "v")])]);
        let response = support::grpc::should_rate_limit(&mut client, ask).await;
        codes.push(Code::try_from(response.overall_code).unwrap_or(Code::Unknown));
    }
    let log = service.log_tail(400);
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::OverLimit],
        "not in shadow mode:\n{log}"
    );
    support::assert_mentions(&log, "wins over upstream's SHADOW_MODE=true", "the warning");
}
