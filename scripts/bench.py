#!/usr/bin/env python3
"""The service benchmarks of BENCHMARKS.md, every figure a ratio to the gRPC ceiling of the
same run.

    python3 scripts/bench.py [--runs 5] [--requests 300000] [--rate 10000] [--seconds 5]

Each run measures, in turn, on core 0 (taskset), with the load on core 1:
  * the ceiling: the no-op server `rls-noop` on a current-thread and on a multi-thread runtime
    (one worker); the faster of the two is the run's ceiling;
  * the service, embedded default (in-process origin);
  * the service with the Redis origin (local redis-server, keys under a fresh prefix).
Two loads per server: h2load, hot key, 4 connections x 16 streams, throughput; and
`gcounter-loadtest`, open loop at --rate over 1,000 keys, latency percentiles.
Prints one JSON line per measurement, then a Markdown table of medians over the runs.
Needs: h2load (Debian nghttp2-client), taskset, redis-server on 127.0.0.1:6379.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
SERVICE = os.path.join(RELEASE, "gcounter-rls")
NOOP = os.path.join(RELEASE, "rls-noop")
LOADTEST = os.path.join(RELEASE, "gcounter-loadtest")
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
SERVER_CORE, LOAD_CORE = "0", "1"
LIMITS = """\
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.01)
    sys.exit(f"nothing listening on {port} after {timeout}s")


class Server:
    """A server pinned to the server core, stopped on exit from the `with` block."""

    def __init__(self, name, argv, grpc_port, http_port=None):
        self.name, self.argv, self.grpc_port, self.http_port = name, argv, grpc_port, http_port

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CORE] + self.argv,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.grpc_port, self.proc)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def origin_operations(self):
        """Regional origin round trips so far (the service's own counter)."""
        if self.http_port is None:
            return 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics").read().decode()
        return sum(float(m.group(1)) for m in
                   re.finditer(r"^rls_origin_operations_total\{[^}]*\} (\S+)", text, re.M))


def h2load(port, body, requests):
    out = subprocess.run(
        ["taskset", "-c", LOAD_CORE, "h2load", "-n", str(requests), "-c", "4", "-m", "16",
         "-t", "1", "-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers",
         f"http://127.0.0.1:{port}{METHOD}"],
        capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out).group(1))
    ok = int(re.search(r"status codes: (\d+) 2xx", out).group(1))
    if ok != requests:
        sys.exit(f"h2load: {ok} of {requests} requests answered 2xx\n{out}")
    return rps


def loadtest(port, args, seconds=None):
    out = subprocess.run(
        ["taskset", "-c", LOAD_CORE, LOADTEST, "--target", f"127.0.0.1:{port}",
         "--domain", "bench", "--descriptor", "remote_address=10.0.{key}",
         "--key-space", "1000", "--connections", "4", "--concurrency", "64",
         "--rate", str(args.rate), "--duration", f"{seconds or args.seconds}s",
         "--warmup", "0s" if seconds else "1s"],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"loadtest failed ({out.returncode}): {out.stderr}{out.stdout}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(server, args, body, run):
    # Discarded warm-ups: connections, caches and the CPU's clock settle; the 1,000 keys'
    # cells are read once (cold), so the counts below are the steady state.
    h2load(server.grpc_port, body, args.requests // 5)
    loadtest(server.grpc_port, args, seconds=1)
    before = server.origin_operations()
    rps = h2load(server.grpc_port, body, args.requests)
    between = server.origin_operations()
    latency = loadtest(server.grpc_port, args)
    after = server.origin_operations()
    answered = latency["ok"] + latency["over_limit"]
    row = {
        "run": run, "server": server.name, "h2load_rps": round(rps),
        "open_rate": args.rate, "p50_us": latency["p50_us"], "p99_us": latency["p99_us"],
        "p99_9_us": latency["p99_9_us"], "errors": latency["errors"],
        "origin_ops_per_request_hot": round((between - before) / args.requests, 5),
        # Replay round trips (and refreshes) over the measured open-loop run, warm cells.
        "origin_ops_per_request_1000_keys": round((after - between) / max(answered, 1), 5),
    }
    print(json.dumps(row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    args = parser.parse_args()
    for tool in ("h2load", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (h2load: apt-get install nghttp2-client)")
    subprocess.run(["cargo", "build", "--release", "--workspace", "--bins"], cwd=ROOT, check=True)

    work = tempfile.mkdtemp(prefix="rls-bench-")
    limits = os.path.join(work, "limits.yaml")
    body = os.path.join(work, "body.bin")
    with open(limits, "w") as f:
        f.write(LIMITS)
    subprocess.run([LOADTEST, "--domain", "bench", "--descriptor", "remote_address=10.0.0.1",
                    "--write-grpc-body", body], check=True)

    def noop(flavor):
        port = free_port()
        return Server(f"noop {flavor}", [NOOP, "--grpc-addr", f"127.0.0.1:{port}",
                                         "--runtime", flavor, "--workers", "1"], port)

    def service(name, *extra):
        grpc, http = free_port(), free_port()
        return Server(name, [SERVICE, "serve", "--config", limits, "--log-level", "warn",
                             "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr",
                             f"127.0.0.1:{http}", *extra], grpc, http)

    rows = []
    for run in range(1, args.runs + 1):
        prefix = f"bench{os.getpid()}r{run}:"
        for server in (noop("current-thread"), noop("multi-thread"),
                       service("service, embedded"),
                       service("service, Redis origin", "--redis-url", args.redis_url,
                               "--redis-prefix", prefix)):
            with server:
                time.sleep(0.3)
                rows.append(measure(server, args, body, run))
    summarize(rows)


def summarize(rows):
    runs = sorted({r["run"] for r in rows})
    servers = list(dict.fromkeys(r["server"] for r in rows))
    by = {(r["run"], r["server"]): r for r in rows}
    ceiling = {}
    for run in runs:
        noops = [by[(run, s)] for s in servers if s.startswith("noop") and (run, s) in by]
        ceiling[run] = max(noops, key=lambda r: r["h2load_rps"])
    print()
    print("| server | h2load req/s, hot key | ratio to ceiling | p50 µs | p99 µs | "
          "p99 ratio to ceiling's | origin round trips / request (hot; 1,000 keys) |")
    print("|---|---|---|---|---|---|---|")
    for server in servers:
        mine = [by[(run, server)] for run in runs]

        def med(key):
            return statistics.median(r[key] for r in mine)

        rps_ratio = statistics.median(by[(run, server)]["h2load_rps"] / ceiling[run]["h2load_rps"]
                                      for run in runs)
        p99_ratio = statistics.median(by[(run, server)]["p99_us"] / ceiling[run]["p99_us"]
                                      for run in runs)
        print(f"| {server} | {med('h2load_rps'):,.0f} | {rps_ratio:.2f} | {med('p50_us'):,.0f} | "
              f"{med('p99_us'):,.0f} | {p99_ratio:.2f} | "
              f"{med('origin_ops_per_request_hot'):.4f}; "
              f"{med('origin_ops_per_request_1000_keys'):.4f} |")


if __name__ == "__main__":
    main()
