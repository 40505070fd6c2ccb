#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI; it bundles the Kubernetes OpenAPI schemas, so
# validation works offline) into <repo>/.tools/k8s-validate and prints the absolute path
# of that directory on stdout. Run it with
#   PYTHONPATH=<that directory> python3 -m kubernetes_validate --strict -k 1.33.0 FILE...
# Idempotent: when already installed it only prints the path. Everything else goes to
# stderr so callers can capture stdout.
set -euo pipefail

SPEC="kubernetes-validate==1.37.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="$repo_root/.tools"
target_dir="$tools_dir/k8s-validate"
marker="$target_dir/.installed-$SPEC"

check() {
    if ! PYTHONPATH="$target_dir" python3 -c 'import kubernetes_validate' >/dev/null 2>&1; then
        echo "install-k8s-validate.sh: $target_dir is installed but 'import kubernetes_validate' fails" >&2
        exit 1
    fi
}

# Fast path, no lock: the install below only makes the marker appear once complete.
if [[ -f "$marker" ]]; then
    check
    echo "$target_dir"
    exit 0
fi

mkdir -p "$tools_dir"
# Parallel test processes (nextest) may all get here at once: serialise them.
exec 9>"$tools_dir/k8s-validate.lock"
flock -w 600 9 || { echo "install-k8s-validate.sh: timed out waiting for $tools_dir/k8s-validate.lock" >&2; exit 1; }

# Someone else may have finished the install while we waited for the lock.
if [[ ! -f "$marker" ]]; then
    echo "install-k8s-validate.sh: installing $SPEC into $target_dir" >&2
    staging="$(mktemp -d "$tools_dir/k8s-validate.staging.XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    # stdout of pip goes to stderr: our stdout is reserved for the path.
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet \
        --target "$staging" "$SPEC" >&2
    touch "$staging/.installed-$SPEC"
    rm -rf "$target_dir"
    mv "$staging" "$target_dir"
    trap - EXIT
fi

check
echo "$target_dir"
