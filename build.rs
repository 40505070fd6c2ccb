//! Build information for `--version` and `rls_build_info`: the commit the binary was built
//! from, and what the build was (cargo features, profile, target, compiler).
//!
//! The commit is `git rev-parse --short HEAD`, or `RLS_BUILD_COMMIT` when set (a build
//! without the repository, e.g. a container build whose context leaves `.git` out, can pass
//! it in); "unknown" when neither is available. The script reruns only when HEAD moves: on a
//! change of `.git/HEAD` or of the ref it points to (cargo reruns it by itself when the
//! features, the profile or the compiler change).

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
    build_description();

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

/// The build beside the commit: the package's cargo features that are on (`CARGO_FEATURE_*`,
/// "none" when none is), the profile, the target triple and the compiler's version.
fn build_description() {
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(name, _)| {
            let feature = name.strip_prefix("CARGO_FEATURE_")?;
            Some(feature.to_ascii_lowercase().replace('_', "-"))
        })
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features.join(",")
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| "unknown".to_owned());
    let rustc = Command::new(var("RUSTC"))
        .arg("--version")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=RLS_BUILD_FEATURES={features}");
    println!("cargo:rustc-env=RLS_BUILD_PROFILE={}", var("PROFILE"));
    println!("cargo:rustc-env=RLS_BUILD_TARGET={}", var("TARGET"));
    println!("cargo:rustc-env=RLS_BUILD_RUSTC={rustc}");
}
