#!/usr/bin/env bash
# The whole test suite, several times in a row, while a full release build of the workspace
# runs beside it: the suite must not fail because the machine is busy.
#
#     bash scripts/suite_under_build.sh [RUNS]     # default 5
#
# The build beside it goes to its own target directory (a throwaway one under $TMPDIR), from
# scratch, and starts again whenever it finishes, so every run of the suite shares the cores
# with rustc from its first test to its last. Prints one line per run (its time, the
# nextest summary) and exits non-zero at the first red run. Needs what the README's test
# command needs (the services: `bash .ci/services.sh`).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-5}"
busy_target="$(mktemp -d "${TMPDIR:-/tmp}/rls-busy-build.XXXXXX")"
logs="$(mktemp -d "${TMPDIR:-/tmp}/rls-suite-runs.XXXXXX")"

# The suite's own build first, alone: the runs measure the tests, not their compilation.
cargo nextest run --workspace --no-run

busy() {
    while true; do
        rm -rf "$busy_target/release"
        CARGO_TARGET_DIR="$busy_target" cargo build --release --workspace --quiet >/dev/null 2>&1 || true
    done
}
busy &
busy_pid=$!
cleanup() {
    # The loop first (stopped, so it starts no new build), then its cargo, then the
    # compilers cargo started (their command lines name the target directory).
    kill -STOP "$busy_pid" 2>/dev/null || true
    pkill -P "$busy_pid" 2>/dev/null || true
    kill -KILL "$busy_pid" 2>/dev/null || true
    pkill -f -- "$busy_target" 2>/dev/null || true
    sleep 1
    rm -rf "$busy_target"
}
trap cleanup EXIT

# Let the build reach rustc before the first run.
sleep 20
for run in $(seq 1 "$runs"); do
    log="$logs/run-$run.log"
    started=$SECONDS
    if cargo nextest run --workspace --no-fail-fast >"$log" 2>&1; then
        verdict="green"
    else
        verdict="red"
    fi
    summary="$(grep -E '^\s*Summary' "$log" | tail -1 | sed 's/^ *//')"
    echo "run $run: $verdict in $((SECONDS - started)) s; $summary (log: $log)"
    if [[ "$verdict" == red ]]; then
        grep -E '^\s+(FAIL|TIMEOUT|SIGSEGV|SIGABRT) ' "$log" >&2 || true
        exit 1
    fi
done
