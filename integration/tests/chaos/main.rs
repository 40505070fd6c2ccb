//! A seeded chaos run over two regions of two processes each (`scripts/chaos.py`): processes
//! SIGKILLed and SIGSTOPped under load, links to Redis and to the database cut between network
//! namespaces, delay and loss on them, a Sentinel failover while the database is cut off, and
//! the regions' clocks 2 s apart; `never_above` limits (RLS v3 and RLQS) beside the others.
//! The runner's checker fails the run on any broken invariant; docs/reliability.md states each
//! one and its bound.
//!
//! A checker that cannot fail proves nothing: each planted defect below (in the deployment, or
//! in a debug build's code behind `GCOUNTER_PLANT`) must turn the invariant it breaks red.

use std::path::Path;
use std::process::{Command, Output};

use gcounter_rls_integration::{profile_dir, repo_path};
use serde_json::Value;

/// Fails, saying what to install, when a tool the run needs is missing.
fn require_tools() {
    let missing: Vec<&str> = [
        ("ip", "iproute2"),
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        ("mysql", "mariadb-client"),
        ("curl", "curl"),
        ("python3", "python3"),
    ]
    .into_iter()
    .filter(|(tool, _)| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .status()
            .is_ok_and(|s| s.success())
    })
    .map(|(_, package)| package)
    .collect();
    let faketime = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .any(|lib| Path::new(lib).exists());
    let mut missing = missing;
    if !faketime {
        missing.push("faketime");
    }
    assert!(
        missing.is_empty(),
        "the chaos run needs tools that are missing: apt-get install {}",
        missing.join(" ")
    );
}

/// Runs `scripts/chaos.py` with `args` and returns its output and its JSON summary.
fn chaos(args: &[&str]) -> (Output, Value) {
    require_tools();
    let bin_dir = profile_dir();
    for binary in ["gcounter-rls", "gcounter-loadtest", "rlqs-load"] {
        assert!(
            bin_dir.join(binary).is_file(),
            "no {binary} in {}: cargo build -p gcounter-rls -p gcounter-loadtest",
            bin_dir.display()
        );
    }
    let dir = tempfile::tempdir().expect("a temporary directory for the summary");
    let summary = dir.path().join("summary.json");
    let out = Command::new("python3")
        .arg(repo_path("scripts/chaos.py"))
        .args(args)
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--json")
        .arg(&summary)
        .output()
        .expect("run python3 scripts/chaos.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let Ok(text) = std::fs::read_to_string(&summary) else {
        panic!(
            "the chaos run wrote no summary: it could not run ({}):\n{stdout}\n--- stderr ---\n{stderr}",
            out.status
        );
    };
    let json: Value = serde_json::from_str(&text).expect("the summary is JSON");
    assert_eq!(
        json["network"], "namespaces",
        "the run must cut real links between network namespaces:\n{stderr}"
    );
    // Every bound is below what is offered, so that each window check can fail.
    for bound in json["bounds"]
        .as_array()
        .expect("the summary lists the bounds")
    {
        let (value, offered) = (bound["value"].as_f64(), bound["offered"].as_f64());
        assert!(
            matches!((value, offered), (Some(v), Some(o)) if v < 0.9 * o),
            "a bound too close to what is offered to fail: {bound}"
        );
    }
    (out, json)
}

/// The verdict of the check `id`, failing if the run did not check it.
fn held(json: &Value, id: &str) -> bool {
    json["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == id))
        .and_then(|c| c["held"].as_bool())
        .unwrap_or_else(|| panic!("the run did not check {id}: {json}"))
}

const INVARIANTS: [&str; 21] = [
    "grpc-errors",
    "late-answers",
    "rlqs-streams",
    "redis-v3-r0",
    "redis-rlqs-r0",
    "db-r0",
    "redis-v3-r1",
    "redis-rlqs-r1",
    "db-r1",
    "redis-kept",
    "v3-clean",
    "v3-degraded",
    "rlqs-clean",
    "rlqs-degraded",
    "never-above",
    "never-above-live",
    "rlqs-never-above",
    "false-denial",
    "clocks",
    "rss",
    "fds",
];

#[test]
fn a_seeded_chaos_run_holds_every_invariant() {
    let (out, json) = chaos(&["--seed", "1", "--phases", "7"]);
    let broken: Vec<&str> = INVARIANTS
        .iter()
        .filter(|id| !held(&json, id))
        .copied()
        .collect();
    assert!(
        broken.is_empty(),
        "invariants broken: {broken:?}\n{}",
        json["table"]
    );
    let faults = json["phases"].as_object().expect("the phases per fault");
    for kind in [
        "kill",
        "stop",
        "cut-db",
        "cut-redis",
        "lossy-db",
        "lossy-redis",
        "failover",
    ] {
        assert_eq!(
            faults.get(kind),
            Some(&Value::from(1)),
            "{kind} ran once: {faults:?}"
        );
    }
    assert!(
        out.status.success(),
        "the run held every invariant yet exited {}",
        out.status
    );
}

/// Runs a short chaos run (one fault phase) with `plant` and asserts that it failed on `ids`.
fn planted_defect_breaks(plant: &str, kinds: &str, ids: &[&str]) {
    planted_defect_breaks_in(plant, kinds, "1", ids);
}

/// Runs a chaos run of `phases` fault phases with `plant` and asserts that it failed on `ids`.
fn planted_defect_breaks_in(plant: &str, kinds: &str, phases: &str, ids: &[&str]) {
    let (out, json) = chaos(&[
        "--seed", "1", "--phases", phases, "--kinds", kinds, "--plant", plant,
    ]);
    assert_eq!(json["plant"], plant);
    let missed: Vec<&&str> = ids.iter().filter(|id| held(&json, id)).collect();
    assert!(
        missed.is_empty(),
        "the checker missed the planted {plant}: {missed:?} held\n{}",
        json["table"]
    );
    assert!(!out.status.success(), "a run with {plant} planted passed");
}

#[test]
fn regions_that_share_no_database_break_the_clean_bound() {
    planted_defect_breaks("shared-nothing", "stop", &["v3-clean"]);
}

#[test]
fn a_replay_short_of_a_count_breaks_the_redis_totals() {
    planted_defect_breaks(
        "replay-short",
        "stop",
        &[
            "redis-v3-r0",
            "redis-v3-r1",
            "redis-rlqs-r0",
            "redis-rlqs-r1",
        ],
    );
}

#[test]
fn a_flush_short_of_a_count_breaks_the_database_rows() {
    planted_defect_breaks("flush-short", "stop", &["db-r0", "db-r1"]);
}

#[test]
fn an_ignored_rlqs_report_breaks_the_rlqs_totals() {
    planted_defect_breaks(
        "rlqs-report-ignored",
        "stop",
        &["redis-rlqs-r0", "redis-rlqs-r1"],
    );
}

#[test]
fn a_failover_onto_a_replica_that_missed_writes_is_a_finding() {
    planted_defect_breaks("failover-loses", "failover", &["redis-kept"]);
}

#[test]
fn processes_deciding_a_never_above_limit_alone_break_it() {
    planted_defect_breaks("never-above-unshared", "stop", &["never-above"]);
}

#[test]
fn rlqs_token_buckets_taken_without_their_refill_break_the_never_above_rule() {
    planted_defect_breaks("rlqs-take-short", "stop", &["rlqs-never-above"]);
}

/// Two fault phases: the check needs two whole cells in a row under load (one of any two is
/// starved by this defect).
#[test]
fn never_above_rights_that_weigh_a_window_too_long_starve_windows() {
    planted_defect_breaks_in(
        "never-above-previous-full",
        "stop",
        "2",
        &["never-above-live"],
    );
}
