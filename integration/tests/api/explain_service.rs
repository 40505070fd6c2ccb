//! `gcounter-rls explain --service`: a running service's answer for each descriptor, asked
//! without consuming (the count it reports does not move however often it asks), the rule
//! that would refuse, the limits it runs read from `/rlconfig?format=yaml`, and a note when
//! they differ from `--config`.

use gcounter_rls_integration as support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Service, http_post, repo_path};

const WORK: Duration = Duration::from_secs(20);

/// `explain --service URL --domain per-api-key --descriptor api_key=<key> --json`, with
/// `extra` flags: its JSON.
fn explain(service: &Service, key: &str, extra: &[&str]) -> Value {
    let output = Command::new(support::binary())
        .arg("explain")
        .args(["--service", &format!("http://{}", service.http_addr)])
        .args(["--domain", "per-api-key"])
        .args(["--descriptor", &format!("api_key={key}")])
        .arg("--json")
        .args(extra)
        .output()
        .expect("run explain");
    assert!(
        output.status.success(),
        "explain: {}",
        support::process::describe(&output)
    );
    serde_json::from_slice(&output.stdout).expect("explain's JSON")
}

/// The service's count and what a request would get now, for the only descriptor.
fn now(report: &Value) -> (u64, String, Value) {
    let status = &report["descriptors"][0]["service"];
    (
        status["count"].as_u64().expect("a count"),
        status["would"].as_str().expect("would").to_owned(),
        report["service"]["refused_by"].clone(),
    )
}

fn hit(service: &Service, key: &str) -> u16 {
    let body = format!(
        r#"{{"domain":"per-api-key","descriptors":[{{"entries":[{{"key":"api_key","value":"{key}"}}]}}]}}"#
    );
    http_post(
        service.http_addr,
        "/json",
        "application/json",
        body.as_bytes(),
    )
    .expect("POST /json")
    .status
}

#[test]
fn explain_asks_the_service_without_consuming() {
    let service = Service::start(repo_path("config/per-api-key.yaml"), &[]);
    support::stay_in_one_minute(WORK);
    // `per_api_key`: 3 a minute per key.
    assert_eq!([hit(&service, "alice"), hit(&service, "alice")], [200, 200]);
    for _ in 0..3 {
        let report = explain(&service, "alice", &[]);
        assert_eq!(
            now(&report),
            (2, "OK (0 left after it)".to_owned(), Value::Null),
            "{report:#}"
        );
        // Without --config, the tree is the one the service runs.
        let rule = &report["descriptors"][0]["rule"];
        assert_eq!(rule["label"], "per_api_key", "{report:#}");
        assert!(
            rule["at"].as_str().unwrap().contains("/rlconfig"),
            "{report:#}"
        );
    }
    // The asks took nothing: the third hit is still admitted, the fourth is not.
    assert_eq!([hit(&service, "alice"), hit(&service, "alice")], [200, 429]);
    let report = explain(&service, "alice", &[]);
    assert_eq!(
        now(&report),
        (
            3,
            "OVER_LIMIT (costs 1, 0 left)".to_owned(),
            Value::from("per_api_key")
        ),
        "{report:#}"
    );
}

#[test]
fn explain_says_when_the_service_runs_other_limits() {
    let service = Service::start(repo_path("config/per-api-key.yaml"), &[]);
    let same = explain(
        &service,
        "bob",
        &[
            "--config",
            repo_path("config/per-api-key.yaml").to_str().unwrap(),
        ],
    );
    assert_eq!(
        same["service"]["notes"],
        Value::Array(Vec::new()),
        "{same:#}"
    );
    let yaml = std::fs::read_to_string(repo_path("config/per-api-key.yaml"))
        .unwrap()
        .replace("requests_per_unit: 3", "requests_per_unit: 30");
    let (_dir, edited) = support::limits_file(&yaml);
    let other = explain(&service, "bob", &["--config", edited.to_str().unwrap()]);
    let notes = other["service"]["notes"].to_string();
    assert!(notes.contains("/rlconfig differs from"), "{other:#}");
}
