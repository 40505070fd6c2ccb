#!/usr/bin/env bash
# ShouldRateLimit throughput and latency, in-process origin vs Redis origin, same load, same run.
# Server pinned to core 0, load generator (examples/load.rs) to core 1. Needs Redis on
# 127.0.0.1:6379 (bench keys use the prefix `bench:` and are deleted first).
#   scripts/bench-origins.sh [seconds-per-run] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
runs=${2:-3}
cargo build --release --bin gcounter-rls --example load
limits=$(mktemp --suffix=.yaml)
trap 'rm -f "$limits"' EXIT
cat > "$limits" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
YAML
redis-cli --scan --pattern 'bench:*' | xargs -r redis-cli del >/dev/null

run() {
    local label=$1; shift
    taskset -c 0 ./target/release/gcounter-rls serve --config "$limits" \
        --grpc-addr 127.0.0.1:19081 --http-addr 127.0.0.1:19080 --log-level warn "$@" &
    local pid=$!
    sleep 1
    for keys in 1 1000; do
        for i in $(seq 1 "$runs"); do
            printf '%-10s keys=%-5s run=%s  ' "$label" "$keys" "$i"
            taskset -c 1 ./target/release/examples/load --target 127.0.0.1:19081 --domain bench \
                --key k --keys "$keys" --connections 4 --concurrency 16 --seconds "$seconds" --warmup 1
        done
    done
    curl -s 127.0.0.1:19080/metrics | grep -E '^rls_(origin_operations_total|decisions_by_source_total)'
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

run in-process
run redis --redis-url redis://127.0.0.1:6379 --redis-prefix bench:
