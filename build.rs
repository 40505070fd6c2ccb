//! Build information for `rls_build_info`: the commit the binary was built from.
//!
//! `git rev-parse --short HEAD`, or `RLS_BUILD_COMMIT` when set (a build without the
//! repository, e.g. a container build whose context leaves `.git` out, can pass it in);
//! "unknown" when neither is available. The script reruns only when HEAD moves: on a change
//! of `.git/HEAD` or of the ref it points to.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RLS_BUILD_COMMIT");
    let given = std::env::var("RLS_BUILD_COMMIT")
        .ok()
        .filter(|commit| !commit.trim().is_empty());
    let commit = given
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=RLS_BUILD_COMMIT={commit}");

    // HEAD, the branch it names (a loose ref) and packed-refs (where a ref lives once
    // packed). `--git-path` resolves them in a linked worktree too. Only existing files
    // are named: cargo reruns the script on every build for a missing one.
    let mut watched = Vec::new();
    watched.extend(git(&["rev-parse", "--git-path", "HEAD"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
