//! `gcounter-rls explain` against a real Envoy: for a corpus of HTTP requests through every
//! `envoy/` example (but `quota`, whose RLQS filter sends no descriptors) and an Istio-style and
//! an Envoy Gateway-style config (`explain/`), the calls the service receives (its
//! `request received` debug lines: domain, descriptors with their entries and `hits_addend`) are
//! exactly those `explain --envoy ... --json` predicts for the request, in order, the call
//! made once the stream is done included, and no call where it predicts none.
//!
//! Each config runs in its own test (its own service and Envoy); one more test runs `explain`
//! alone over the whole corpus and checks its size: at least 30 requests and 10 kinds of
//! action among the descriptors sent.

use gcounter_rls_integration as support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Envoy, Service, http_request, repo_path};

/// How long a call Envoy makes may take to show in the service's log.
const CALL_WAIT: Duration = Duration::from_secs(10);

/// One request of the corpus: method and path, headers, and the virtual host's name.
struct Request {
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
}

fn get(path: &'static str, headers: &'static [(&'static str, &'static str)]) -> Request {
    Request { path, headers }
}

/// An Envoy config, its limits, the `Host` its requests carry (`None`: the listener's
/// address), the response headers its upstream adds, and its requests.
struct Case {
    envoy: String,
    limits: String,
    host: Option<&'static str>,
    response_headers: &'static [(&'static str, &'static str)],
    requests: Vec<Request>,
}

const XFF: (&str, &str) = ("x-forwarded-for", "203.0.113.7");

fn example(name: &str, requests: Vec<Request>) -> Case {
    Case {
        envoy: format!("envoy/{name}.yaml"),
        limits: format!("config/{name}.yaml"),
        host: None,
        response_headers: &[],
        requests,
    }
}

fn case(name: &str) -> Case {
    match name {
        "per-client-ip" => example("per-client-ip", vec![get("/", &[]), get("/a", &[XFF])]),
        "per-api-key" => example(
            "per-api-key",
            vec![
                get("/", &[("x-api-key", "alice")]),
                get("/", &[]),
                get("/", &[("x-api-key", "gold-key")]),
            ],
        ),
        "per-path" => example(
            "per-path",
            vec![
                get("/api/users", &[]),
                get("/static/app.js", &[]),
                get("/about?x=1", &[]),
            ],
        ),
        "nested" => example(
            "nested",
            vec![
                get("/search", &[("x-tenant", "acme")]),
                get("/search?q=1", &[("x-tenant", "acme")]),
                get("/other", &[]),
            ],
        ),
        "per-route" => example(
            "per-route",
            vec![
                get("/login", &[]),
                get("/api/things", &[]),
                get("/partner", &[("x-partner", "p1")]),
                get("/partner", &[]),
                get("/health", &[]),
            ],
        ),
        "shadow-mode" => example(
            "shadow-mode",
            vec![get("/api/items", &[]), get("/x", &[XFF])],
        ),
        "hits-addend" => example(
            "hits-addend",
            vec![
                get("/reports", &[]),
                get("/", &[("x-cost", "7")]),
                get("/", &[]),
                get("/", &[("x-cost", "0")]),
            ],
        ),
        "multi-limits" => example(
            "multi-limits",
            vec![
                get("/", &[("x-api-key", "k"), ("x-cost", "3")]),
                get("/", &[("x-api-key", "k")]),
                get("/", &[]),
            ],
        ),
        "token-budget" => example(
            "token-budget",
            vec![
                get("/", &[("x-api-key", "k"), ("x-token-estimate", "500")]),
                get("/", &[("x-api-key", "k")]),
            ],
        ),
        "istio" => Case {
            envoy: "integration/tests/envoy/explain/istio-gateway.yaml".into(),
            limits: "integration/tests/envoy/explain/istio-gateway-limits.yaml".into(),
            host: None,
            response_headers: &[],
            requests: vec![
                get("/", &[]),
                get(
                    "/anything/limited",
                    &[("x-api-key", "k1"), ("x-forwarded-for", "198.51.100.7")],
                ),
                get("/extra/a?page=2&preview", &[("x-plan", "gold")]),
                get("/extra/b?preview=1", &[("x-forwarded-for", "203.0.113.9")]),
                get("/status/200", &[]),
            ],
        },
        "envoy-gateway" => Case {
            envoy: "integration/tests/envoy/explain/envoy-gateway.yaml".into(),
            limits: "integration/tests/envoy/explain/envoy-gateway-limits.yaml".into(),
            host: Some("www.example.com"),
            response_headers: &[("x-response-cost", "3")],
            requests: vec![
                get("/", &[("x-user-id", "one")]),
                get("/a", &[("x-user-id", "two")]),
                get("/b", &[]),
            ],
        },
        other => panic!("no case {other}"),
    }
}

const CASES: &[&str] = &[
    "per-client-ip",
    "per-api-key",
    "per-path",
    "nested",
    "per-route",
    "shadow-mode",
    "hits-addend",
    "multi-limits",
    "token-budget",
    "istio",
    "envoy-gateway",
];

/// One call to the service: its domain and descriptors (entries, `hits_addend`, refund).
type Call = (String, Vec<(Vec<(String, String)>, Option<u64>, bool)>);

/// What `explain --json` predicts for one request: the calls, in order, and the kinds of
/// action (and of descriptor option) that made them.
fn explain(case: &Case, request: &Request, host: &str) -> (Vec<Call>, BTreeSet<String>) {
    let mut command = Command::new(support::binary());
    command
        .arg("explain")
        .arg("--config")
        .arg(repo_path(&case.limits))
        .arg("--envoy")
        .arg(repo_path(&case.envoy))
        .args(["--request", &format!("GET {}", request.path)])
        .args(["--authority", host])
        .arg("--json");
    for (name, value) in request.headers {
        command.args(["--header", &format!("{name}: {value}")]);
    }
    for (name, value) in case.response_headers {
        command.args(["--response-header", &format!("{name}: {value}")]);
    }
    let output = command.output().expect("run explain");
    assert!(
        output.status.success(),
        "explain failed: {}",
        support::process::describe(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("explain's JSON");
    let mut calls = Vec::new();
    let mut kinds = BTreeSet::new();
    let filters = report["filters"].as_array().expect("filters");
    for on_stream_done in [false, true] {
        for filter in filters {
            assert_eq!(
                filter["uncertain"], false,
                "{} {}: {filter:#}",
                case.envoy, request.path
            );
            let mut descriptors = Vec::new();
            for policy in filter["policies"].as_array().expect("policies") {
                if policy["outcome"] != "sent" || policy["on_stream_done"] != on_stream_done {
                    continue;
                }
                let entries = policy["entries"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .map(|e| {
                        (
                            e[0].as_str().unwrap().to_owned(),
                            e[1].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                let hits = policy["hits_addend"].as_u64();
                let refund = policy["refund"] == true;
                for action in policy["actions"].as_array().expect("actions") {
                    kinds.insert(action.as_str().unwrap().to_owned());
                }
                if hits.is_some() {
                    kinds.insert("hits_addend".to_owned());
                }
                if on_stream_done {
                    kinds.insert("apply_on_stream_done".to_owned());
                }
                descriptors.push((entries, hits, refund));
            }
            if !descriptors.is_empty() {
                calls.push((filter["domain"].as_str().unwrap().to_owned(), descriptors));
            }
        }
    }
    (calls, kinds)
}

/// The calls the service logged, in order.
fn received(service: &Service) -> Vec<Call> {
    let log = std::fs::read_to_string(&service.log_path).expect("the service's log");
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "request received")
        .map(|fields| {
            assert_eq!(
                fields["hits_addend"], 0,
                "Envoy sends no request-level hits_addend: {fields}"
            );
            let descriptors: Value = serde_json::from_str(fields["descriptors"].as_str().unwrap())
                .expect("descriptors as JSON");
            let descriptors = descriptors
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let entries = d["entries"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| {
                            (
                                e[0].as_str().unwrap().to_owned(),
                                e[1].as_str().unwrap().to_owned(),
                            )
                        })
                        .collect();
                    (
                        entries,
                        d["hits_addend"].as_u64(),
                        d["is_negative_hits"] == true,
                    )
                })
                .collect();
            (fields["domain"].as_str().unwrap().to_owned(), descriptors)
        })
        .collect()
}

fn run(name: &str) {
    let case = case(name);
    let service = Service::start(
        repo_path(&case.limits),
        &[
            "--log-level",
            "info,gcounter_rls::rls=debug",
            "--log-format",
            "json",
        ],
    );
    let envoy = Envoy::start(&case.envoy, service.grpc_addr.port(), &[]);
    let listen = envoy.listen_addr.to_string();
    let host = case.host.unwrap_or(&listen);
    let mut expected: Vec<Call> = Vec::new();
    for request in &case.requests {
        let (calls, _) = explain(&case, request, host);
        expected.extend(calls);
        let response = http_request(
            envoy.listen_addr,
            "GET",
            request.path,
            host,
            request.headers,
        )
        .unwrap_or_else(|e| panic!("{name} {}: {e}\n{}", request.path, envoy.log_tail(30)));
        assert_ne!(
            response.status,
            500,
            "{name} {}: {}",
            request.path,
            envoy.log_tail(30)
        );
        // Every call predicted so far (the one after the stream too) before the next request,
        // so a call arriving late is seen with the request that made it.
        let deadline = Instant::now() + CALL_WAIT;
        while received(&service).len() < expected.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            received(&service),
            expected,
            "{name}: after GET {} {:?}: the calls received (left), those explain predicts \
             (right)\n{}",
            request.path,
            request.headers,
            envoy.log_tail(20)
        );
    }
    // Nothing late, nothing unpredicted.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        received(&service),
        expected,
        "{name}: after the last request"
    );
}

#[test]
fn explain_covers_thirty_requests_and_ten_action_kinds() {
    let mut requests = 0;
    let mut calls = 0;
    let mut kinds = BTreeSet::new();
    for name in CASES {
        let case = case(name);
        for request in &case.requests {
            let (predicted, used) = explain(&case, request, case.host.unwrap_or("localhost"));
            requests += 1;
            calls += predicted.len();
            kinds.extend(used);
        }
    }
    let actions: Vec<&String> = kinds
        .iter()
        .filter(|k| *k != "hits_addend" && *k != "apply_on_stream_done")
        .collect();
    assert!(requests >= 30, "{requests} requests");
    assert!(calls >= 25, "{calls} calls");
    assert!(
        actions.len() >= 10,
        "{} kinds of action: {actions:?}",
        actions.len()
    );
    assert!(
        kinds.contains("hits_addend") && kinds.contains("apply_on_stream_done"),
        "{kinds:?}"
    );
}

/// The Istio fixture's limits keep those deployed with the EnvoyFilters: every rule of
/// deploy/kubernetes/ratelimit-config.yaml is in them, unchanged.
#[test]
fn the_istio_limits_hold_the_deployed_ones() {
    let manifest = std::fs::read_to_string(repo_path("deploy/kubernetes/ratelimit-config.yaml"))
        .expect("the ConfigMap");
    let map: serde_json::Value = serde_saphyr::from_str(&manifest).expect("YAML");
    let deployed = map["data"]["config.yaml"].as_str().expect("config.yaml");
    let deployed = gcounter_rls::config::load_str("configmap", deployed).expect("loads");
    let fixture =
        gcounter_rls::config::load_path(&repo_path(case("istio").limits), &Default::default())
            .expect("loads");
    let fixture_rules = fixture.dump();
    for line in deployed.dump().lines() {
        assert!(
            fixture_rules.contains(line),
            "{line} is not in the fixture:\n{fixture_rules}"
        );
    }
}

macro_rules! differential {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            run($name);
        }
    )*};
}

differential! {
    per_client_ip: "per-client-ip",
    per_api_key: "per-api-key",
    per_path: "per-path",
    nested: "nested",
    per_route: "per-route",
    shadow_mode: "shadow-mode",
    hits_addend: "hits-addend",
    multi_limits: "multi-limits",
    token_budget: "token-budget",
    istio_gateway: "istio",
    envoy_gateway: "envoy-gateway",
}
