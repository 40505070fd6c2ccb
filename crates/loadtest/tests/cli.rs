//! The load generator's command line. Also makes `cargo nextest run --workspace` build the
//! `gcounter-loadtest` binary, which the chaos run (`scripts/chaos.py`) drives.

use std::process::Command;

#[test]
fn the_binary_lists_its_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_gcounter-loadtest"))
        .arg("--help")
        .output()
        .expect("run gcounter-loadtest --help");
    assert!(out.status.success(), "exit {}", out.status);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--target", "--rate", "--duration", "--descriptor"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}
