#!/usr/bin/env python3
"""Start-up to serving with a large limits config (BENCHMARKS.md).

    python3 scripts/bench_startup.py [--rules 10000] [--runs 10]

Writes a config of --rules rules (one domain: 1/10 top-level keys, each with nested values,
wildcards and limits), then starts `gcounter-rls serve` --runs times and measures, from the
spawn to the moment the gRPC port answers a TCP connect, with a 1 ms poll. The service binds
its listeners only after the config is loaded and compiled, so this is load + compile + wiring.
Prints one JSON line.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = os.path.join(ROOT, "target", "release", "gcounter-rls")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def once(path):
    grpc, http = free_port(), free_port()
    started = time.monotonic()
    proc = subprocess.Popen([SERVICE, "serve", "--config", path, "--log-level", "warn",
                             "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
                             "--debug-addr", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"service exited with {proc.returncode} during start-up")
            try:
                socket.create_connection(("127.0.0.1", grpc), timeout=0.05).close()
                return (time.monotonic() - started) * 1000.0
            except OSError:
                time.sleep(0.001)
    finally:
        proc.terminate()
        proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--bin", "gcounter-rls"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "limits.yaml")
        with open(path, "w") as f:
            f.write(config(args.rules))
        check = subprocess.run([SERVICE, "check-config", path], capture_output=True, text=True)
        if check.returncode != 0:
            sys.exit(f"generated config rejected: {check.stderr}")
        times = [once(path) for _ in range(args.runs)]
    print(json.dumps({"bench": "start-up to serving", "rules": args.rules,
                      "config_bytes": len(config(args.rules)), "check_config": check.stdout.strip(),
                      "median_ms": round(statistics.median(times), 1),
                      "min_ms": round(min(times), 1), "max_ms": round(max(times), 1)}))


if __name__ == "__main__":
    main()
