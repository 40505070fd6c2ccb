//! The offline Kubernetes schema check: `kubernetes-validate` from PyPI (bundled OpenAPI
//! schemas), installed by `integration/install-k8s-validate.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use super::manifests::Doc;
use gcounter_rls_integration::repo_path;

/// The Kubernetes version the manifests are checked against (kind's node images of the
/// time; the schemas are kubernetes-validate's, for the latest release not above it).
pub const KUBERNETES_VERSION: &str = "1.33.0";

/// The directory kubernetes-validate is installed in, installing it on first use.
pub fn install_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        gcounter_rls_integration::install_tool(
            "kubernetes-validate",
            "install-k8s-validate.sh",
            "(python3 -m pip install --target .tools/k8s-validate 'kubernetes-validate==1.37.0'); \
             it needs python3 with pip",
        )
    })
}

/// Runs `kubernetes-validate --strict` (unknown fields are errors) on `files`, from the
/// repository root so that relative paths print as given.
pub fn run(files: &[String]) -> Output {
    Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            KUBERNETES_VERSION,
        ])
        .args(files)
        .current_dir(repo_path(""))
        .env("PYTHONPATH", install_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run python3 -m kubernetes_validate")
}

/// What the validator's run says is wrong with `docs` (those of the files it was given),
/// empty if every non-Istio document passed.
///
/// kubernetes-validate exits 0 and only warns when it has no schema for a kind (a typo in
/// `apiVersion` or `kind` looks like that), so passing is read from its per-resource
/// lines: each Kubernetes document must have its own "passed" line, and the only
/// warnings allowed are the missing schemas of Istio's custom resources.
pub fn failures(docs: &[&Doc], output: &Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut failures = Vec::new();
    if !output.status.success() {
        failures.push(format!("kubernetes-validate exited with {}", output.status));
    }
    for doc in docs.iter().filter(|d| !d.is_istio()) {
        let passed = format!(
            "INFO {} passed for resource {}/{} against version",
            doc.file,
            doc.kind().to_lowercase(),
            doc.name()
        );
        if !stdout.lines().any(|l| l.starts_with(&passed)) {
            failures.push(format!("{} was not validated", doc.describe()));
        }
    }
    for line in stdout.lines().filter(|l| !l.starts_with("INFO ")) {
        let istio_warning = docs.iter().filter(|d| d.is_istio()).any(|d| {
            line == format!(
                "WARN {} Couldn't find schema for kind {} with api version {} for kubernetes version {}",
                d.file,
                d.kind(),
                d.api_version(),
                major_minor(KUBERNETES_VERSION)
            )
        });
        if !istio_warning {
            failures.push(line.to_string());
        }
    }
    failures
}

/// `1.33` of `1.33.0`, as the validator prints versions.
fn major_minor(version: &str) -> &str {
    version.rsplit_once('.').map_or(version, |(mm, _)| mm)
}
