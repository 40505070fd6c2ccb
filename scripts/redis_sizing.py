#!/usr/bin/env python3
"""Redis and service memory per live counter, measured.

For each N in --counters: a Redis of its own (a free port, no persistence, an empty data
set), --processes `gcounter-rls serve` processes of one region on it, and
`gcounter-loadtest --key-space N --sequential` sending each of N client addresses once to
each process in turn (one counter per address, a limit that is never reached). Once the
replay has written every counter to Redis, it reads Redis's `DBSIZE` and `INFO memory` and
the first process's `rls_live_cells` and `rls_memory_bytes`, and prints one JSON line per N
and a Markdown table: bytes per live counter in Redis and in one process.

    cargo build -p gcounter-rls -p gcounter-loadtest
    python3 scripts/redis_sizing.py --bin-dir target/debug --counters 10000,100000
    python3 scripts/redis_sizing.py --bin-dir target/debug --counters 100000 --processes 2

A counter's Redis hash holds one field per process that counted it in the window, so a
counter used through several processes of a region costs Redis more than one used through
one (--processes).

Redis's bytes do not depend on the service's build. `rls_memory_bytes{pool="cells"}` is the
cell table's own accounting (what `--max-cell-bytes` is held against), the same in every
build; the process's RSS is the build's, so read RSS from a release build
(`--bin-dir target/release`).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import free_port, stop_all, wait_http

# A year's window: no cell expires or rolls over during a run, and the limit is never
# reached, so every request is one admission of one new counter.
LIMITS = """\
domain: sizing
descriptors:
  - key: remote_address
    rate_limit: { unit: year, requests_per_unit: 1000000000 }
"""


def redis_cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], check=True,
                         capture_output=True, text=True)
    return out.stdout


def redis_info_memory(port):
    info = {}
    for line in redis_cli(port, "INFO", "memory").splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and value.isdigit():
            info[key] = int(value)
    return info


def start_redis(redis_server, port, workdir):
    proc = subprocess.Popen([redis_server, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{redis_server} exited with {proc.returncode} at start")
        try:
            if redis_cli(port, "PING").strip() == "PONG":
                return proc
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.1)
    stop_all([proc], 5)
    sys.exit(f"redis-server on port {port} did not answer PING within 10 s")


def metrics(http_port):
    url = f"http://127.0.0.1:{http_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def sample(text, name, labels=""):
    """The value of one series of `name` whose labels contain `labels`."""
    for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        if labels in (m.group(1) or ""):
            return float(m.group(2))
    sys.exit(f"no series {name}{{{labels}}} on /metrics")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def wait_dbsize(port, want, deadline_s):
    """DBSIZE once it reaches `want` and stops moving (the replay runs every 100 ms)."""
    deadline = time.monotonic() + deadline_s
    last = -1
    while time.monotonic() < deadline:
        size = int(redis_cli(port, "DBSIZE").strip())
        if size >= want and size == last:
            return size
        last = size
        time.sleep(0.5)
    return last


def start_service(args, limits, redis_port):
    """One `serve` process on the Redis at `redis_port`; (process, gRPC port, HTTP port)."""
    grpc, http = free_port(), free_port()
    # Generous Redis deadlines: a debug build on a busy machine misses the 50 ms read deadline,
    # and the open circuit breaker would leave counters unwritten. Deadlines change nothing of
    # what Redis stores.
    proc = subprocess.Popen(
        [os.path.join(args.bin_dir, "gcounter-rls"), "serve", "--config", limits,
         "--log-level", "warn", "--redis-url", f"redis://127.0.0.1:{redis_port}",
         "--redis-read-timeout", "1s", "--redis-replay-timeout", "10s",
         "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
         "--debug-addr", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, grpc, http


def measure(args, n, workdir, limits):
    redis_port = free_port()
    redis = start_redis(args.redis_server, redis_port, workdir)
    procs = [redis]
    try:
        redis_before = redis_info_memory(redis_port)
        services = []
        for _ in range(args.processes):
            service = start_service(args, limits, redis_port)
            procs.append(service[0])
            services.append(service)
        for proc, _, http in services:
            wait_http(f"http://127.0.0.1:{http}/healthz", proc)
        service, _, http = services[0]
        service_before = metrics(http)
        rss_before = rss_bytes(service.pid)
        reports = []
        for _, grpc, _ in services:
            load = subprocess.run(
                [os.path.join(args.bin_dir, "gcounter-loadtest"), "--target",
                 f"127.0.0.1:{grpc}", "--domain", "sizing", "--descriptor", args.descriptor,
                 "--key-space", str(n), "--sequential", "--warmup", "0s",
                 "--duration", "3600s"],
                capture_output=True, text=True)
            if load.returncode != 0:
                sys.exit(f"gcounter-loadtest failed: {load.stderr.strip()[-500:]}")
            reports.append(json.loads(load.stdout.strip().splitlines()[-1]))
        keys = wait_dbsize(redis_port, n, args.settle_s)
        # The last replay may still be adding fields to keys that exist already.
        time.sleep(1)
        redis_after = redis_info_memory(redis_port)
        service_after = metrics(http)
        rss_after = rss_bytes(service.pid)
    finally:
        # The services first: their last replay still writes to Redis.
        stop_all(procs[1:], 15)
        stop_all(procs[:1], 5)

    def grew(name, labels=""):
        return sample(service_after, name, labels) - sample(service_before, name, labels)

    live = grew("rls_live_cells")
    row = {
        "counters": n,
        "processes": args.processes,
        "answered_ok": sum(r["ok"] for r in reports),
        "errors": sum(r["errors"] for r in reports),
        "redis_keys": keys,
        "redis_used_memory_bytes": redis_after["used_memory"] - redis_before["used_memory"],
        "redis_used_memory_dataset_bytes":
            redis_after["used_memory_dataset"] - redis_before["used_memory_dataset"],
        "redis_rss_bytes": redis_after["used_memory_rss"] - redis_before["used_memory_rss"],
        "service_live_cells": live,
        "service_live_cells_per_counter": live / n,
        "service_cells_bytes": grew("rls_memory_bytes", 'pool="cells"'),
        "service_rss_bytes": rss_after - rss_before,
    }
    for key in ("redis_used_memory_bytes", "redis_used_memory_dataset_bytes",
                "redis_rss_bytes", "service_cells_bytes", "service_rss_bytes"):
        row[key.replace("_bytes", "_per_counter")] = round(row[key] / n, 1)
    answered = sum(r["ok"] + r["over_limit"] for r in reports)
    if row["errors"] or answered != n * args.processes or keys < n or live < n:
        sys.exit(f"N = {n}: {row['errors']} errors, {answered} answers, {keys} Redis keys, "
                 f"{live:.0f} live cells; each counter should have left one of each: "
                 f"{json.dumps(row)}")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", default="target/debug",
                        help="where gcounter-rls and gcounter-loadtest are (default target/debug)")
    parser.add_argument("--counters", default="10000,100000",
                        help="comma-separated numbers of live counters (default 10000,100000)")
    parser.add_argument("--processes", type=int, default=1,
                        help="serve processes of one region, each sent every counter (default 1)")
    parser.add_argument("--descriptor", default="remote_address=10.{key}",
                        help="the descriptor sent, {key} replaced by the key (default "
                             "remote_address=10.{key}: an address-like value of 4-8 bytes)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server",
                        help="the redis-server binary to start (default: from PATH)")
    parser.add_argument("--settle-s", type=float, default=30,
                        help="how long to wait for Redis to hold every counter (default 30)")
    args = parser.parse_args()
    if shutil.which("redis-cli") is None:
        sys.exit("redis-cli is not on PATH (Debian: apt-get install redis-tools)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="redis-sizing-") as workdir:
        limits = os.path.join(workdir, "limits.yaml")
        with open(limits, "w") as f:
            f.write(LIMITS)
        for n in (int(x) for x in args.counters.split(",")):
            row = measure(args, n, workdir, limits)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print()
    print("| live counters | processes | Redis keys | Redis `used_memory` per counter | Redis "
          "`used_memory_dataset` per counter | service cells (`rls_memory_bytes{pool=\"cells\"}`)"
          " per counter | service RSS per counter |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['counters']:,} | {r['processes']} | {r['redis_keys']:,} | "
              f"{r['redis_used_memory_per_counter']:,.0f} B | "
              f"{r['redis_used_memory_dataset_per_counter']:,.0f} B | "
              f"{r['service_cells_per_counter']:,.0f} B | {r['service_rss_per_counter']:,.0f} B |")


if __name__ == "__main__":
    main()
