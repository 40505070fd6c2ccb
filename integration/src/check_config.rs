//! `gcounter-rls check-config`, run on a file or directory: what several targets ask of the
//! binary (the command's own tests, and the limits of an example, a manifest or a scenario
//! that must load before the service is started on them).

use std::path::Path;
use std::process::{Command, Output};

use super::binary;
use super::process::describe;

/// `gcounter-rls check-config path args…`: its output, whatever it exits with.
pub fn run(path: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .arg("check-config")
        .arg(path)
        .args(args)
        .output()
        .expect("run gcounter-rls check-config")
}

/// `check-config path` must accept it: its stdout. Panics with the command's output, saying
/// what `path` is (`what`), otherwise.
pub fn accepted(path: &Path, what: &str) -> String {
    let output = run(path, &[]);
    assert!(
        output.status.success(),
        "check-config {} should accept {what}: {}",
        path.display(),
        describe(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `check-config path` must refuse it: its stderr and stdout, for the test to look for the
/// place and the problem in. Panics with the command's output if it was accepted.
pub fn refused(path: &Path) -> String {
    let output = run(path, &[]);
    assert!(
        !output.status.success(),
        "check-config {} should refuse it: {}",
        path.display(),
        describe(&output)
    );
    String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout)
}
