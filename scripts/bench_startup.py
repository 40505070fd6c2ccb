#!/usr/bin/env python3
"""Start-up to serving with a large limits config (BENCHMARKS.md).

    python3 scripts/bench_startup.py [--rules 10000] [--runs 10] [--binary NAME=PATH ...]

With --binary (repeatable) it starts each named build instead of building this tree's, in
turn at every run, so two commits are compared in the same minutes (one JSON line each).

Writes a config of --rules rules (one domain: 1/10 top-level keys, each with nested values,
wildcards and limits), then starts `gcounter-rls serve` --runs times and measures, from the
spawn to the first `200` of `/healthz`, with a 1 ms poll: the health check passes only once
the limits are loaded and compiled and the service serves, so this is load + compile +
wiring. (A TCP connect is no measure: the gRPC port's backlog takes connections earlier.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                       "release", "gcounter-rls")


def config(rules):
    """`rules` limited rules: keys k0..k{n/10}, each with 10 values (one a wildcard)."""
    lines = ["domain: startup", "descriptors:"]
    for k in range(rules // 10):
        lines += [f"  - key: k{k}", "    descriptors:"]
        for v in range(10):
            value = f"/api/v{v}/*" if v == 9 else f"/api/v{v}/item"
            lines += [f"      - key: path", f"        value: \"{value}\"",
                      "        rate_limit:", "          unit: minute",
                      f"          requests_per_unit: {100 + v}"]
    return "\n".join(lines) + "\n"


def once(service, path):
    grpc, http = free_port(), free_port()
    started = time.monotonic()
    proc = subprocess.Popen([service, "serve", "--config", path, "--log-level", "warn",
                             "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
                             "--debug-addr", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{http}/healthz"
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"service exited with {proc.returncode} during start-up")
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return (time.monotonic() - started) * 1000.0
            except OSError:  # not listening yet, or 503 until the limits are loaded
                time.sleep(0.001)
    finally:
        proc.terminate()
        proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                        help="a build of the service to start instead of this tree's")
    args = parser.parse_args()
    services = dict(b.split("=", 1) for b in args.binary)
    if not services:
        subprocess.run(["cargo", "build", "--release", "--bin", "gcounter-rls"], cwd=ROOT,
                       check=True)
        services = {"gcounter-rls": SERVICE}
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "limits.yaml")
        with open(path, "w") as f:
            f.write(config(args.rules))
        checks = {}
        for name, service in services.items():
            check = subprocess.run([service, "check-config", path], capture_output=True,
                                   text=True)
            if check.returncode != 0:
                sys.exit(f"{name}: generated config rejected: {check.stderr}")
            checks[name] = check.stdout.strip()
        times = {name: [] for name in services}
        for _ in range(args.runs):
            for name, service in services.items():
                times[name].append(once(service, path))
    for name, measured in times.items():
        print(json.dumps({"bench": "start-up to serving", "binary": name, "rules": args.rules,
                          "config_bytes": len(config(args.rules)), "check_config": checks[name],
                          "median_ms": round(statistics.median(measured), 1),
                          "min_ms": round(min(measured), 1),
                          "max_ms": round(max(measured), 1)}))


if __name__ == "__main__":
    main()
