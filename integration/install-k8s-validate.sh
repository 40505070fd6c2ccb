#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI; it bundles the Kubernetes OpenAPI schemas, so
# validation works offline) into <repo>/.tools/k8s-validate and prints the absolute path
# of that directory on stdout. Run it with
#   PYTHONPATH=<that directory> python3 -m kubernetes_validate --strict -k 1.33.0 FILE...
# Idempotent: when already installed it only prints the path. Everything else goes to
# stderr so callers can capture stdout.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/pip-install.sh"
pip_install_once k8s-validate "kubernetes-validate==1.37.0"

if ! PYTHONPATH="$PIP_TOOL_DIR" python3 -c 'import kubernetes_validate' >/dev/null 2>&1; then
    echo "install-k8s-validate.sh: $PIP_TOOL_DIR is installed but 'import kubernetes_validate' fails" >&2
    exit 1
fi
echo "$PIP_TOOL_DIR"
