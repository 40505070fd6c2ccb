#!/usr/bin/env bash
# Installs Prometheus and promtool from Debian's `prometheus` package when either is
# missing, then prints the absolute paths of both on stdout (promtool first, then
# prometheus, one per line). Idempotent: when both are installed it only prints them.
# Everything else goes to stderr so callers can capture stdout.
#
# The package's post-install step may try to start a prometheus service; without an init
# system that fails harmlessly: the tests start the binary themselves. Needs root (or
# sudo) for apt-get on first use.
#
# PROMTOOL_BIN / PROMETHEUS_BIN override the lookup (e.g. an upstream release tarball).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/executable.sh"

find_tool() {
    local name="$1" override="$2"
    if [[ -n "$override" ]]; then
        print_executable install-prometheus.sh "$override"
        return 0
    fi
    command -v "$name" 2>/dev/null || true
}

promtool="$(find_tool promtool "${PROMTOOL_BIN:-}")"
prometheus="$(find_tool prometheus "${PROMETHEUS_BIN:-}")"

if [[ -z "$promtool" || -z "$prometheus" ]]; then
    # Parallel test processes (nextest) may all get here at once, and dpkg takes one
    # apt-get at a time: serialise them, then look again, since the one before may have
    # installed it while this one waited.
    exec 9>"${TMPDIR:-/tmp}/gcounter-rls-install-prometheus.lock"
    flock -w 600 9 || { echo "install-prometheus.sh: timed out waiting for the install lock" >&2; exit 1; }
    promtool="$(find_tool promtool "${PROMTOOL_BIN:-}")"
    prometheus="$(find_tool prometheus "${PROMETHEUS_BIN:-}")"
fi

if [[ -z "$promtool" || -z "$prometheus" ]]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-prometheus.sh: prometheus/promtool missing and apt-get is not available" >&2
        exit 1
    fi
    sudo=""
    if [[ "$(id -u)" != 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "install-prometheus.sh: apt-get needs root (or sudo)" >&2
            exit 1
        fi
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    # RUNLEVEL=1: invoke-rc.d in the package's post-install step starts no service (the
    # tests never use one).
    # Another apt-get on the machine (not ours) holds dpkg's lock: wait for it, not fail.
    apt=(apt-get -o DPkg::Lock::Timeout=300)
    if ! { $sudo "${apt[@]}" update -q \
        && RUNLEVEL=1 $sudo "${apt[@]}" install -y -q --no-install-recommends prometheus; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "install-prometheus.sh: apt-get install prometheus failed" >&2
        exit 1
    fi
    promtool="$(find_tool promtool "${PROMTOOL_BIN:-}")"
    prometheus="$(find_tool prometheus "${PROMETHEUS_BIN:-}")"
fi

for tool in "$promtool" "$prometheus"; do
    if [[ -z "$tool" ]] || ! "$tool" --version >/dev/null 2>&1; then
        echo "install-prometheus.sh: ${tool:-a tool} is installed but does not run" >&2
        exit 1
    fi
done
echo "$promtool"
echo "$prometheus"
