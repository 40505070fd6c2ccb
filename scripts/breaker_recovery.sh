#!/usr/bin/env bash
# How long the Redis circuit breaker takes to close after Redis comes back, and how many
# "replay failed" lines the outage logged. Loopback only, bounded (about OUTAGE + 15 s).
#
#   BIN=target/debug/gcounter-rls OUTAGE=28 bash scripts/breaker_recovery.sh
#   (LOADTEST defaults to gcounter-loadtest next to BIN: cargo build --workspace --bins)
#
# A throw-away redis-server on a free port, the service on it, 200 requests/s of gcounter-loadtest on
# new keys (cold reads), Redis shut down for OUTAGE seconds then restarted; then polls
# rls_origin_circuit_state every 50 ms until it reads 0 (closed). The README promises at most
# 10 s (the cool-down cap).
set -euo pipefail
BIN=${BIN:-target/debug/gcounter-rls}
LOADTEST=${LOADTEST:-$(dirname "$BIN")/gcounter-loadtest}
OUTAGE=${OUTAGE:-25}
CONFIG=${CONFIG:-config/example.yaml}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port); GP=$(port); HP=$(port)
WORK=$(mktemp -d)
redis() { redis-server --port "$RP" --save '' --appendonly no --daemonize yes --pidfile "$WORK/r.pid" >/dev/null; }
cleanup() {
  [[ -n ${LOAD:-} ]] && kill "$LOAD" 2>/dev/null || true
  [[ -n ${SVC:-} ]] && kill "$SVC" 2>/dev/null || true
  redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
}
trap cleanup EXIT
redis
sleep 0.3
"$BIN" serve --config "$CONFIG" --redis-url "redis://127.0.0.1:$RP" \
  --grpc-addr "127.0.0.1:$GP" --http-addr "127.0.0.1:$HP" >"$WORK/service.log" 2>&1 &
SVC=$!
sleep 1
"$LOADTEST" --target "127.0.0.1:$GP" --domain example --rate 200 --key-space 1000000 \
  --descriptor 'remote_address=10.{key}' --duration "$((OUTAGE + 20))s" >"$WORK/load.json" 2>&1 &
LOAD=$!
sleep 2
redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
sleep "$OUTAGE"
redis
start=$(date +%s.%N)
deadline=$(( $(date +%s) + 30 ))
while (( $(date +%s) < deadline )); do
  state=$(curl -s "127.0.0.1:$HP/metrics" | awk '/^rls_origin_circuit_state /{print $2}')
  if [[ $state == 0 ]]; then
    echo "circuit closed $(echo "$(date +%s.%N) - $start" | bc) s after Redis came back (outage ${OUTAGE} s)"
    echo "'replay failed' lines logged: $(grep -c 'replay failed' "$WORK/service.log" || true)"
    exit 0
  fi
  sleep 0.05
done
echo "circuit still open 30 s after Redis came back" >&2
exit 1
