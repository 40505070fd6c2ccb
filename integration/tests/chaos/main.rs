//! A seeded chaos run over two regions of two processes each (`scripts/chaos.py`): processes
//! SIGKILLed and SIGSTOPped, links to Redis and to the database cut between network
//! namespaces, delay and loss on them, a Sentinel failover while the database is cut off, and
//! the regions' clocks 2 s apart. The runner's checker fails the run on any broken invariant;
//! docs/reliability.md states each one and its bound.

use std::path::Path;
use std::process::Command;

use gcounter_rls_integration::{profile_dir, repo_path};

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

#[test]
fn a_seeded_chaos_run_holds_every_invariant() {
    require_tools();
    let bin_dir = profile_dir();
    for binary in ["gcounter-rls", "gcounter-loadtest", "rlqs-load"] {
        assert!(
            bin_dir.join(binary).is_file(),
            "no {binary} in {}: cargo build -p gcounter-rls -p gcounter-loadtest",
            bin_dir.display()
        );
    }
    let out = Command::new("python3")
        .arg(repo_path("scripts/chaos.py"))
        .args(["--seed", "1", "--phases", "7", "--bin-dir"])
        .arg(&bin_dir)
        .output()
        .expect("run python3 scripts/chaos.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the chaos run broke an invariant or could not run ({}):\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("| no gRPC error | yes |"),
        "the checker printed no table:\n{stdout}"
    );
}
