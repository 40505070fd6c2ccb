//! The rule that refused a request, where operators look: Envoy's access log writes the
//! `limitedBy` the service put in the answer's dynamic metadata, and its 429 carries the
//! service's `--rule-header`. The `envoy/per-api-key.yaml` example, with an access log added.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::{Envoy, Service, http_get, repo_path};

/// The example's listener config, and the same with an access log on Envoy's stdout (its log
/// file here): one line per request, the status, the key and the rule that refused.
const HCM: &str = "                stat_prefix: ingress\n";
const HCM_WITH_ACCESS_LOG: &str = "                stat_prefix: ingress
                access_log:
                  - name: envoy.access_loggers.stdout
                    typed_config:
                      \"@type\": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
                      log_format:
                        text_format_source:
                          inline_string: \"ACCESS %RESPONSE_CODE% %REQ(X-API-KEY)% %DYNAMIC_METADATA(envoy.filters.http.ratelimit:limitedBy)%\\n\"
";

/// The access log lines Envoy wrote so far.
fn access_lines(envoy: &Envoy) -> Vec<String> {
    std::fs::read_to_string(&envoy.log_path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix("ACCESS "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_access_log_names_the_rule_that_refused() {
    let service = Service::start(
        repo_path("config/per-api-key.yaml"),
        &["--rule-header", "x-ratelimit-rule"],
    );
    let envoy = Envoy::start(
        "envoy/per-api-key.yaml",
        service.grpc_addr.port(),
        &[(HCM, HCM_WITH_ACCESS_LOG)],
    );
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(20));
    let get = |key: &str| {
        http_get(envoy.listen_addr, "/", &[("x-api-key", key)])
            .unwrap_or_else(|e| panic!("GET /: {e}\n{}", envoy.log_tail(20)))
    };
    // `per_api_key` allows 3 a minute per key: the fourth is refused by it, by name.
    for _ in 0..3 {
        let ok = get("alice");
        assert_eq!(ok.status, 200, "{:?}", ok.headers);
        assert_eq!(
            ok.header("x-ratelimit-rule"),
            None,
            "only a refusal names a rule"
        );
    }
    let refused = get("alice");
    assert_eq!(refused.status, 429, "{:?}", refused.headers);
    assert_eq!(refused.header("x-ratelimit-rule"), Some("per_api_key"));

    // Envoy writes its access log about once a second.
    let deadline = Instant::now() + Duration::from_secs(15);
    while access_lines(&envoy).len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        access_lines(&envoy),
        [
            "200 alice -",
            "200 alice -",
            "200 alice -",
            "429 alice per_api_key"
        ],
        "Envoy's access log\n{}",
        envoy.log_tail(20)
    );
}
