//! Parity with envoyproxy/ratelimit's config keys and answers, through the real binary over
//! real gRPC: `quota_mode` (the global switch, also read from upstream's `QUOTA_MODE`; the
//! per-rule semantics are tested in process, `src/rls/tests.rs`), and the semantics where we used to differ from upstream (global shadow
//! mode, replaced unlimited rules, request overrides).
//!
//! Every test starts its own service, so counters start at zero; counting tests first step
//! away from a window boundary.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{
    self, Code, Unit, code, codes, descriptor, header, overall, request, with_override,
};
use support::redis_admin::redis_args;
use support::rls::Rls;
use support::{Launch, Service};

/// Room for every counting test: all its calls fall in one minute.
const WORK: Duration = Duration::from_secs(10);

fn plain_yaml() -> String {
    support::flat_rules("plain", &[("a", "minute", 1), ("b", "minute", 5)])
}

/// The global switch makes every descriptor a quota: our flag, and upstream's `QUOTA_MODE`.
#[tokio::test]
async fn global_quota_mode_from_the_flag_or_upstreams_variable() {
    for (args, env) in [
        (&["--quota-mode"][..], &[][..]),
        (&[][..], &[("QUOTA_MODE", "true")][..]),
    ] {
        let mut rls = Rls::start_with(&plain_yaml(), args, Launch::env(env)).await;
        support::stay_in_one_minute(WORK);
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
    let mut rls =
        Rls::start_with(&plain_yaml(), &[], Launch::env(&[("QUOTA_MODE", "false")])).await;
    support::stay_in_one_minute(WORK);
    let both = || vec![descriptor(&[("a", "1")]), descriptor(&[("b", "1")])];
    rls.check("plain", both()).await;
    let r = rls.check("plain", both()).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
}

fn shadow_yaml() -> String {
    support::flat_rules("shadow", &[("user", "minute", 1)])
}

/// Global shadow mode, by our flag or upstream's `SHADOW_MODE`: the descriptor keeps its
/// OVER_LIMIT status (dashboards and Envoy's per-descriptor view see it), only the overall
/// code, which Envoy acts on, turns OK.
#[tokio::test]
async fn global_shadow_mode_keeps_descriptor_statuses_and_turns_only_the_overall_code_ok() {
    for (args, env) in [
        (&["--shadow-mode", "--response-headers"][..], &[][..]),
        (&["--response-headers"][..], &[("SHADOW_MODE", "1")][..]),
    ] {
        let mut rls = Rls::start_with(&shadow_yaml(), args, Launch::env(env)).await;
        support::stay_in_one_minute(WORK);
        let first = rls
            .check("shadow", vec![descriptor(&[("user", "u")])])
            .await;
        assert_eq!(codes(&first), [Code::Ok], "{env:?}: {first:?}");
        let over = rls
            .check("shadow", vec![descriptor(&[("user", "u")])])
            .await;
        assert_eq!(codes(&over), [Code::OverLimit], "{env:?}: {over:?}");
        assert_eq!(overall(&over), Code::Ok, "{env:?}: {over:?}");
        // The answer is OK: no Retry-After, but the headers still describe the limit.
        assert_eq!(header(&over, "Retry-After"), None, "{over:?}");
        assert_eq!(header(&over, "RateLimit-Remaining"), Some("0"), "{over:?}");
    }
}

const REPLACES_YAML: &str = "\
domain: replaces
descriptors:
  - key: free
    rate_limit: { unlimited: true, name: free }
  - key: plan
    rate_limit:
      unit: minute
      requests_per_unit: 5
      name: plan
      replaces: [{ name: free }]
  - key: limited
    rate_limit: { unit: minute, requests_per_unit: 5, name: limited }
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{ name: limited }]
";

/// As upstream: an unlimited rule named in another matched rule's `replaces` still answers
/// as unlimited; an unlimited rule's own `replaces` still drops the limit it names.
#[tokio::test]
async fn an_unlimited_rule_stays_unlimited_when_replaced_and_still_replaces() {
    let mut rls = Rls::start(REPLACES_YAML, &[]).await;
    let r = rls
        .check(
            "replaces",
            vec![descriptor(&[("free", "f")]), descriptor(&[("plan", "p")])],
        )
        .await;
    let unlimited = &r.statuses[0];
    assert_eq!(code(unlimited), Code::Ok, "{r:?}");
    assert_eq!(unlimited.limit_remaining, u32::MAX, "{r:?}");
    assert!(unlimited.current_limit.is_none(), "{r:?}");
    assert_eq!(
        r.statuses[1]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(5),
        "{r:?}"
    );

    let r = rls
        .check(
            "replaces",
            vec![descriptor(&[("limited", "l")]), descriptor(&[("vip", "v")])],
        )
        .await;
    // The replaced limit: OK without a limit; the unlimited one: the whole range.
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
    assert_eq!(r.statuses[0].limit_remaining, 0, "{r:?}");
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX, "{r:?}");
}

/// A request-level override counts on the counter of the rule the descriptor matches (as
/// upstream, whose counter is the descriptor's entries): hits counted under the config's
/// limit still count once the limit comes from route metadata. Another unit is another
/// window, so another counter.
#[tokio::test]
async fn a_request_override_counts_on_the_matched_rules_counter() {
    let mut rls = Rls::start(&support::one_rule("ovr", "api_key", "minute", 1, 3), &[]).await;
    support::stay_in_one_minute(WORK);
    let rule = || descriptor(&[("api_key", "k")]);
    let per = |value, limit, unit: Unit| with_override(&[("api_key", value)], limit, unit as i32);
    // In order: (step, the request's one descriptor, its code and remaining).
    let steps = [
        ("a hit on the rule", rule(), (Code::Ok, 2)),
        ("a second hit on the rule", rule(), (Code::Ok, 1)),
        // Two hits already counted on the rule: an override of 3 per minute has 1 left.
        (
            "the override's last",
            per("k", 3, Unit::Minute),
            (Code::Ok, 0),
        ),
        (
            "the override, over",
            per("k", 3, Unit::Minute),
            (Code::OverLimit, 0),
        ),
        // And the config's limit sees the override's hit.
        ("the rule after the override", rule(), (Code::OverLimit, 0)),
        // Another value is another counter; an hourly override is another window.
        (
            "another value",
            per("other", 1, Unit::Minute),
            (Code::Ok, 0),
        ),
        ("an hourly override", per("k", 1, Unit::Hour), (Code::Ok, 0)),
    ];
    for (step, descriptor, want) in steps {
        let r = rls.check("ovr", vec![descriptor]).await;
        let got = (codes(&r), r.statuses.first().map(|s| s.limit_remaining));
        assert_eq!(got, (vec![want.0], Some(want.1)), "{step}: {r:?}");
    }
}

fn write(path: &std::path::Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A temporary directory holding `files`: (path under it, text).
fn tree(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        write(&dir.path().join(path), text);
    }
    dir
}

fn symlink(target: &str, link: &std::path::Path) {
    std::os::unix::fs::symlink(target, link)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
}

fn one_rule(domain: &str, requests_per_unit: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {requests_per_unit}}}\n"
    )
}

/// The domains `/rlconfig` lists, sorted.
fn served_domains(service: &Service) -> Vec<String> {
    let text = service.admin_get("/rlconfig").body_text();
    let mut domains: Vec<String> = text
        .lines()
        .filter_map(|line| line.split('.').next())
        .map(str::to_owned)
        .collect();
    domains.dedup();
    domains
}

/// A directory is read as upstream's runtime reads it: every file of the tree whatever its
/// extension, dot-files too unless asked (our flag or upstream's `RUNTIME_IGNOREDOTFILES`),
/// and a file ending in an empty document (a templated file's trailing `---`) loads.
#[tokio::test]
async fn a_directory_tree_loads_like_upstreams_runtime() {
    let dir = tree(&[
        ("alpha.yaml", one_rule("alpha", 1)),
        ("teams/beta.conf", format!("{}---\n", one_rule("beta", 2))),
        ("teams/deep/gamma", one_rule("gamma", 3)),
        (".dot.yml", one_rule("dot", 4)),
    ]);
    let root = dir.path();

    let service = Service::start(root, &[]);
    assert_eq!(served_domains(&service), ["alpha", "beta", "dot", "gamma"]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    let r = grpc::should_rate_limit(
        &mut client,
        request("gamma", vec![descriptor(&[("k", "v")])]),
    )
    .await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(3),
        "{r:?}"
    );
    drop(service);

    for (args, env) in [
        (&["--ignore-dot-files"][..], &[][..]),
        (&[][..], &[("RUNTIME_IGNOREDOTFILES", "true")][..]),
    ] {
        let service = Service::start_with(root, args, Launch::env(env));
        assert_eq!(
            served_domains(&service),
            ["alpha", "beta", "gamma"],
            "{args:?} {env:?}"
        );
    }
}

/// A Kubernetes ConfigMap volume given as a directory: the files live in `..<timestamp>/`,
/// `..data` links to it, each top-level name links through `..data`. Every domain loads
/// once, and the kubelet's swap of `..data` is reloaded.
#[test]
fn a_configmap_volume_directory_loads_once_and_reloads_on_swap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let volume = dir.path();
    let version = |name: &str, limit: u32| {
        write(&volume.join(name).join("a.yaml"), &one_rule("alpha", limit));
        write(&volume.join(name).join("b.yaml"), &one_rule("beta", 1));
    };
    version("..2026_01_01_00_00_00.1", 3);
    symlink("..2026_01_01_00_00_00.1", &volume.join("..data"));
    symlink("..data/a.yaml", &volume.join("a.yaml"));
    symlink("..data/b.yaml", &volume.join("b.yaml"));

    let service = Service::start(volume, &[]);
    let rlconfig = || service.admin_get("/rlconfig").body_text();
    assert_eq!(
        rlconfig(),
        "alpha.k: unit=MINUTE requests_per_unit=3, shadow_mode: false\n\
         beta.k: unit=MINUTE requests_per_unit=1, shadow_mode: false\n"
    );

    version("..2026_01_01_00_01_00.2", 7);
    symlink("..2026_01_01_00_01_00.2", &volume.join("..data_tmp"));
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(volume.join("..2026_01_01_00_00_00.1")).expect("remove old version");
    // Reloaded after the swap.
    service.wait_rlconfig(Duration::from_secs(20), "requests_per_unit=7");
    assert_eq!(served_domains(&service), ["alpha", "beta"]);
}

/// `MERGE_DOMAIN_CONFIG` (or our flag): one domain across files merges; a repeated
/// top-level descriptor is still an error naming both files; without it a repeated domain
/// is refused.
#[tokio::test]
async fn merged_domains_serve_the_rules_of_every_file() {
    let other = "domain: shared\ndescriptors:\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 9}\n";
    let dir = tree(&[
        ("a.yaml", one_rule("shared", 1)),
        ("b.yaml", other.to_owned()),
    ]);
    let root = dir.path();
    for (args, env) in [
        (&["--merge-domain-config"][..], &[][..]),
        (&[][..], &[("MERGE_DOMAIN_CONFIG", "true")][..]),
    ] {
        let service = Service::start_with(root, args, Launch::env(env));
        let mut client = grpc::rls_client(service.grpc_addr).await;
        let r = grpc::should_rate_limit(
            &mut client,
            request(
                "shared",
                vec![descriptor(&[("k", "v")]), descriptor(&[("other", "v")])],
            ),
        )
        .await;
        let limits: Vec<Option<u32>> = r
            .statuses
            .iter()
            .map(|s| s.current_limit.as_ref().map(|l| l.requests_per_unit))
            .collect();
        assert_eq!(limits, [Some(1), Some(9)], "{args:?} {env:?}: {r:?}");
    }

    let check = |args: &[&str]| support::check_config::run(root, args);
    let refused = check(&[]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("duplicate domain `shared`"),
        "{refused:?}"
    );
    write(&root.join("c.yaml"), &one_rule("shared", 5));
    let clash = check(&["--merge-domain-config"]);
    let stderr = String::from_utf8_lossy(&clash.stderr);
    assert_eq!(clash.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("duplicate descriptor in merged domain `shared`: key `k` without value")
            && stderr.contains("a.yaml:3"),
        "{stderr}"
    );
}

const SHARE_YAML: &str = "\
domain: share
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    value: /files/special
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: tenant
    value: t*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// `share_threshold: true`: every value a wildcard matches counts on one counter; an
/// explicit value keeps its own rule and counter; on a nested rule the shared entry is the
/// wildcard's, the other entries keep their own values.
#[tokio::test]
async fn share_threshold_counts_every_value_of_a_wildcard_on_one_counter() {
    let mut rls = Rls::start(SHARE_YAML, &[]).await;
    support::stay_in_one_minute(WORK);
    let path = |value: &str| vec![descriptor(&[("path", value)])];
    let a = rls.check("share", path("/files/a")).await;
    let b = rls.check("share", path("/files/b")).await;
    let c = rls.check("share", path("/files/c")).await;
    assert_eq!(
        [codes(&a), codes(&b), codes(&c)].concat(),
        [Code::Ok, Code::Ok, Code::OverLimit],
        "{a:?}\n{b:?}\n{c:?}"
    );
    let special = rls.check("share", path("/files/special")).await;
    assert_eq!(codes(&special), [Code::Ok], "{special:?}");
    assert_eq!(special.statuses[0].limit_remaining, 4, "{special:?}");

    let nested = |tenant: &str, user: &str| vec![descriptor(&[("tenant", tenant), ("user", user)])];
    let first = rls.check("share", nested("t1", "u")).await;
    let same_user = rls.check("share", nested("t2", "u")).await;
    let other_user = rls.check("share", nested("t2", "v")).await;
    assert_eq!(
        [codes(&first), codes(&same_user), codes(&other_user)].concat(),
        [Code::Ok, Code::OverLimit, Code::Ok],
        "{first:?}\n{same_user:?}\n{other_user:?}"
    );
}

/// The shared counter is one counter in every layer: hits on `/files/a` in one process are
/// seen by another process asking for `/files/b`, through Redis.
#[tokio::test]
async fn share_threshold_shares_one_counter_across_processes_through_redis() {
    support::redis_admin::require_local_redis();
    let prefix = support::redis_admin::unique_prefix("share");
    let (_dir, limits) = support::limits_file(SHARE_YAML);
    let args = redis_args(
        support::redis_admin::LOCAL_REDIS_URL,
        &prefix,
        &["--replay-interval", "20ms", "--freshness", "50ms"],
    );
    let one = Service::start(&limits, &args);
    let two = Service::start(&limits, &args);
    a_shared_count_reaches(&one, &two, Duration::from_secs(5), "/files/b", || {
        "the second process does not see the shared count".to_owned()
    })
    .await;
    support::redis_admin::delete_under(support::redis_admin::LOCAL_REDIS_URL, &prefix);
}

const METADATA_YAML: &str = "\
domain: meta
descriptors:
  - key: plan
    metadata:
      tier: gold
      route: { cluster: fast, weight: 3 }
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: user
    metadata:
      tier: silver
      route: { cluster: slow, pool: b }
      flags: [1, true]
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// `metadata` and `RESPONSE_DYNAMIC_METADATA`: the answer's `dynamic_metadata` carries the
/// domain, the request's descriptors, its `hitsAddend`, and the merged `metadata` of the
/// descriptors that passed (first value wins, mappings merge), in upstream's shape.
#[tokio::test]
async fn dynamic_metadata_carries_the_passed_descriptors_metadata() {
    use serde_json::json;
    use support::grpc::UInt64Value;

    let descriptors = || {
        let mut user = descriptor(&[("user", "u")]);
        user.hits_addend = Some(UInt64Value { value: 1 });
        vec![descriptor(&[("plan", "p")]), user]
    };
    for (args, env) in [
        (&["--response-dynamic-metadata"][..], &[][..]),
        (&[][..], &[("RESPONSE_DYNAMIC_METADATA", "true")][..]),
    ] {
        let mut rls = Rls::start_with(METADATA_YAML, args, Launch::env(env)).await;
        support::stay_in_one_minute(WORK);
        let mut first = request("meta", descriptors());
        first.hits_addend = 1;
        let r = grpc::should_rate_limit(&mut rls.client, first).await;
        let metadata = struct_json(r.dynamic_metadata.as_ref().expect("dynamic_metadata"));
        assert_eq!(
            metadata,
            json!({
                "domain": "meta",
                "descriptors": [
                    {"entries": ["plan=p"]},
                    {"entries": ["user=u"], "hitsAddend": 1.0},
                ],
                "hitsAddend": 1.0,
                "metadata": {
                    "tier": "gold",
                    "route": {"cluster": "fast", "weight": 3.0, "pool": "b"},
                    "flags": [1.0, true],
                },
            }),
            "{args:?} {env:?}"
        );
        // `user` is now over its limit: only `plan`'s metadata is returned.
        let r = rls.check("meta", descriptors()).await;
        assert_eq!(codes(&r), [Code::Ok, Code::OverLimit], "{r:?}");
        let metadata = struct_json(r.dynamic_metadata.as_ref().expect("dynamic_metadata"));
        assert_eq!(
            metadata["metadata"],
            json!({"tier": "gold", "route": {"cluster": "fast", "weight": 3.0}}),
            "{metadata}"
        );
    }
    // Off by default.
    let mut rls = Rls::start(METADATA_YAML, &[]).await;
    let r = rls.check("meta", descriptors()).await;
    assert_eq!(r.dynamic_metadata, None, "{r:?}");
}

/// A protobuf `Struct` as JSON, to compare whole shapes.
fn struct_json(value: &support::grpc::Struct) -> serde_json::Value {
    use support::grpc::Kind;
    fn one(value: &support::grpc::Value) -> serde_json::Value {
        match &value.kind {
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
            Some(Kind::NumberValue(n)) => serde_json::json!(n),
            Some(Kind::StringValue(s)) => serde_json::json!(s),
            Some(Kind::BoolValue(b)) => serde_json::json!(b),
            Some(Kind::StructValue(s)) => struct_json(s),
            Some(Kind::ListValue(l)) => {
                serde_json::Value::Array(l.values.iter().map(one).collect())
            }
        }
    }
    serde_json::Value::Object(
        value
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), one(v)))
            .collect(),
    )
}

const METRIC_NAMES_YAML: &str = "\
domain: names
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: tenant
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: { unit: minute, requests_per_unit: 100 }
";

/// `value_to_metric` and nested `detailed_metric` name their series as upstream names its
/// stats; these names carry request values, so their series are capped per rule (the
/// overflow is counted in the rule's own series and in `rls_detailed_series_capped_total`).
#[tokio::test]
async fn value_to_metric_and_detailed_metric_labels_are_upstreams_and_capped() {
    let mut rls = Rls::start(METRIC_NAMES_YAML, &["--max-metric-series-per-rule", "2"]).await;
    for route in ["draw", "paint", "erase"] {
        rls.check(
            "names",
            vec![descriptor(&[("route", route), ("method", "GET")])],
        )
        .await;
    }
    rls.check(
        "names",
        vec![descriptor(&[("tenant", "t1"), ("user", "u1")])],
    )
    .await;
    let text = rls.service.metrics();
    let decisions = |rule: &str| support::metrics::decisions(&text, "names", rule, "within_limit");
    assert_eq!(decisions("names.route_draw.method"), Some(1.0), "{text}");
    assert_eq!(decisions("names.route_paint.method"), Some(1.0), "{text}");
    // The third value is over the cap of 2: counted in the rule's own series.
    assert_eq!(decisions("names.route_erase.method"), None, "{text}");
    assert_eq!(decisions("names.route.method"), Some(1.0), "{text}");
    assert_eq!(
        support::metrics::sample(&text, "rls_detailed_series_capped_total", &[]),
        Some(1.0),
        "{text}"
    );
    // Nested detailed_metric: every entry's value.
    assert_eq!(decisions("names.tenant_t1.user_u1"), Some(1.0), "{text}");
}

/// envoyproxy/ratelimit's README examples 10 and 11, served from `config/upstream-examples/`
/// as they are (the whole directory, as upstream's runtime loads it): example 11's shared
/// and isolated thresholds, and the series names of both.
#[tokio::test]
async fn upstream_readme_examples_10_and_11_answer_and_name_series_as_upstream() {
    let service = Service::start(support::repo_path("config/upstream-examples"), &[]);
    let mut client = grpc::rls_client(service.grpc_addr).await;
    support::avoid_window_boundary(Duration::from_secs(3_600), WORK);
    let mut call = async |domain: &str, entries: &[(&str, &str)]| {
        let r =
            grpc::should_rate_limit(&mut client, request(domain, vec![descriptor(entries)])).await;
        codes(&r)[0]
    };
    // Example 11, in order: (key, value, calls, the answer each call gets).
    let example11 = [
        // Five for files/a.pdf and five for files/b.csv exhaust the shared 10.
        ("files", "files/a.pdf", 5, Code::Ok),
        ("files", "files/b.csv", 5, Code::Ok),
        ("files", "files/c.txt", 1, Code::OverLimit),
        // Without share_threshold each value has its own 10.
        ("files_no_share", "files_no_share/a.pdf", 10, Code::Ok),
        ("files_no_share", "files_no_share/a.pdf", 1, Code::OverLimit),
        ("files_no_share", "files_no_share/b.csv", 1, Code::Ok),
    ];
    for (key, value, calls, want) in example11 {
        for i in 1..=calls {
            let got = call("example11", &[(key, value)]).await;
            assert_eq!(got, want, "example11 {key}: {value}, call {i} of {calls}");
        }
    }

    // Example 10 and 11's series names: (domain, one request's entries, its rule's series).
    let series = [
        (
            "example10",
            &[
                ("route", "api"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ][..],
            "example10.route_api.http_method_GET.subject_id",
        ),
        (
            "example10_wildcard",
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents"),
            ],
            "example10_wildcard.user_alice.action_readfile.resource",
        ),
        (
            "example11_metrics",
            &[("route", "api/v1"), ("method", "GET")],
            "example11_metrics.route_api/*.method",
        ),
    ];
    for (domain, entries, _) in series {
        call(domain, entries).await;
    }
    let text = service.metrics();
    for (domain, _, rule) in series {
        assert_eq!(
            support::metrics::decisions(&text, domain, rule, "within_limit"),
            Some(1.0),
            "{rule}\n{text}"
        );
    }
}

/// The shared counter is one counter in the global layer too: region `a`'s hits on
/// `/files/a` reach region `b`, asking for `/files/b`, through the SQL table (SQLite here;
/// the identity is the same bytes for every backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold_shares_one_counter_across_regions_through_sql() {
    use support::sql_admin::{Backend, FAST_GLOBAL, TestDb, region_args};
    let db = TestDb::create(Backend::Sqlite, "share");
    let url = db.url();
    let (_dir, limits) = support::limits_file(SHARE_YAML);
    let a = Service::start(&limits, &region_args("a", &url, &FAST_GLOBAL));
    let b = Service::start(&limits, &region_args("b", &url, &FAST_GLOBAL));
    a_shared_count_reaches(&a, &b, Duration::from_secs(10), "/files/c", || {
        format!(
            "region b does not see region a's shared count\n{}",
            b.log_tail(20)
        )
    })
    .await;
}

/// Spends the shared budget of 2 on `/files/a` at `spender`; waits (peeking, which
/// consumes nothing, for at most `timeout`) until `watcher` sees it on `/files/b`; then
/// `watcher` is denied on `next`, another value of the same shared wildcard. All of it in one
/// minute (the budget's window): the guard covers the wait it allows, and 5 s more for the
/// requests around it.
async fn a_shared_count_reaches(
    spender: &Service,
    watcher: &Service,
    timeout: Duration,
    next: &str,
    unseen: impl Fn() -> String,
) {
    let spender = &mut grpc::rls_client(spender.grpc_addr).await;
    let watcher = &mut grpc::rls_client(watcher.grpc_addr).await;
    support::stay_in_one_minute(timeout + Duration::from_secs(5));
    for _ in 0..2 {
        let r = grpc::should_rate_limit(
            spender,
            request("share", vec![descriptor(&[("path", "/files/a")])]),
        )
        .await;
        assert_eq!(codes(&r), [Code::Ok], "{r:?}");
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut peek = descriptor(&[("path", "/files/b")]);
        peek.hits_addend = Some(support::grpc::UInt64Value { value: 0 });
        let r = grpc::should_rate_limit(watcher, request("share", vec![peek])).await;
        if r.statuses[0].limit_remaining == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}: {r:?}", unseen());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = grpc::should_rate_limit(
        watcher,
        request("share", vec![descriptor(&[("path", next)])]),
    )
    .await;
    assert_eq!(codes(&r), [Code::OverLimit], "{r:?}");
}
