#!/usr/bin/env bash
# podman as this project's tests and release command run it: the runc runtime and the
# cgroupfs manager (crun refuses a hybrid cgroup layout; no systemd to manage cgroups), and a
# containers.conf of our own whose default_ulimits is empty (raising the default open-files
# limit is not permitted in an unprivileged container host). Arguments go to podman.
#
# CONTAINERS_CONF, when set, is used as given (the tests write their own).
set -euo pipefail

if ! command -v podman >/dev/null 2>&1; then
    echo "podman.sh: podman is not installed (apt-get install podman runc buildah debootstrap; .ci/run installs them)" >&2
    exit 1
fi
if [[ -z "${CONTAINERS_CONF:-}" ]]; then
    conf_dir="${XDG_RUNTIME_DIR:-/tmp}/gcounter-rls-podman"
    mkdir -p "$conf_dir"
    export CONTAINERS_CONF="$conf_dir/containers.conf"
    printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF.tmp"
    mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
fi
exec podman --runtime runc --cgroup-manager cgroupfs "$@"
