#!/usr/bin/env python3
"""Throughput by cores: the service beside the hyper no-op server at 1, 2, ... cores.

    python3 scripts/bench_scaling.py [--cores 1,2] [--rounds 11] [--requests 100000]
        [--no-build]

For each core count N (default: 1, 2, then powers of two up to half the machine's cores),
both servers run pinned to cores 0..N-1 with N workers: the no-op (`rls-noop --stack hyper
--workers N`, the HTTP/2 stack the service runs on, nothing above it) and the service on the
embedded default (`--workers N`), each on a current-thread runtime for one worker and a
multi-thread runtime for more, as the service chooses. h2load sends the hot-key
`ShouldRateLimit` with one thread per load core: the cores from N on when the machine has
them, else every core, shared with the server (the row says so: on a 2-core machine the
2-core row is such a row, and its figures are the machine's, not the server's ceiling).
Connections: 4 per load thread, 16 streams each, so every worker has connections.

Measured as `scripts/bench.py --interleave` does: the two servers run at once and each round
sends --requests to each in turn, the order alternating, so the ratio of a round compares
bursts seconds apart. The table gives each server's median req/s over the rounds, the median
of the rounds' ratios, and the service's gain over its own 1-core figure.
Needs: h2load (Debian nghttp2-client), taskset. Release binaries (built unless --no-build).
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import LIMITS, LOADTEST, NOOP, ROOT, SERVICE, Server, h2load
from harness import free_port, warn_if_autogrouped


def default_cores(total):
    counts, n = [1], 2
    while n <= max(2, total // 2):
        counts.append(n)
        n *= 2
    return counts


def load_cores(n, total):
    """The cores h2load runs on for a server on cores 0..n-1: the rest, or all when none is
    left (shared)."""
    rest = list(range(n, total))
    return (rest, False) if rest else (list(range(total)), True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cores", help="comma-separated core counts (default: see above)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    for tool in ("h2load", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (h2load: apt-get install nghttp2-client)")
    total = len(os.sched_getaffinity(0))
    counts = ([int(n) for n in args.cores.split(",")] if args.cores
              else default_cores(total))
    if max(counts) > total:
        sys.exit(f"--cores {max(counts)}: this machine has {total}")
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "gcounter-rls",
                        "-p", "gcounter-loadtest"], cwd=ROOT, check=True)
    warn_if_autogrouped()

    work = tempfile.mkdtemp(prefix="rls-scaling-")
    limits, body = os.path.join(work, "limits.yaml"), os.path.join(work, "body.bin")
    with open(limits, "w") as f:
        f.write(LIMITS)
    subprocess.run([LOADTEST, "--domain", "bench", "--descriptor", "remote_address=10.0.0.1",
                    "--write-grpc-body", body], check=True)

    table = []
    for n in counts:
        cores = ",".join(str(c) for c in range(n))
        load, shared = load_cores(n, total)
        port, grpc, http = free_port(), free_port(), free_port()
        # The runtime the service picks for n workers: current-thread for one.
        runtime = "current-thread" if n == 1 else "multi-thread"
        noop = Server("noop", [NOOP, "--grpc-addr", f"127.0.0.1:{port}", "--stack", "hyper",
                               "--runtime", runtime, "--workers", str(n)],
                      port, cores=cores)
        service = Server("service", [SERVICE, "serve", "--config", limits, "--log-level",
                                     "warn", "--grpc-addr", f"127.0.0.1:{grpc}",
                                     "--http-addr", f"127.0.0.1:{http}", "--debug-addr",
                                     f"127.0.0.1:{free_port()}", "--workers", str(n)],
                         grpc, http, cores=cores)
        rps = {"noop": [], "service": []}
        ratios = []
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(noop), stack.enter_context(service)]
            time.sleep(0.3)
            for server in servers:  # warm-up, discarded
                h2load(server.grpc_port, body, args.requests // 5, load)
            for round_ in range(args.rounds):
                measured = {}
                for server in servers if round_ % 2 == 0 else servers[::-1]:
                    measured[server.name] = h2load(server.grpc_port, body, args.requests, load)
                for name, value in measured.items():
                    rps[name].append(value)
                ratios.append(measured["service"] / measured["noop"])
                print(json.dumps({"cores": n, "round": round_ + 1, "load_cores": len(load),
                                  "shared": shared, **{k: round(v) for k, v in
                                                       measured.items()}}), flush=True)
        table.append((n, len(load), shared, statistics.median(rps["noop"]),
                      statistics.median(rps["service"]), statistics.median(ratios),
                      statistics.quantiles(ratios, n=4)))

    print()
    print(f"{args.rounds} rounds of {args.requests:,} requests to each server per core count")
    print()
    print("| server cores | load cores | no-op req/s | service req/s | service ÷ no-op: "
          "median | quartiles | service vs its 1 core |")
    print("|---|---|---|---|---|---|---|")
    one = next((row[4] for row in table if row[0] == 1), None)
    for n, load, shared, noop_rps, service_rps, ratio, (q1, _, q3) in table:
        gain = f"{service_rps / one:.2f} ×" if one else "—"
        load_text = f"{load} (shared with the server)" if shared else str(load)
        print(f"| {n} | {load_text} | {noop_rps:,.0f} | {service_rps:,.0f} | {ratio:.3f} | "
              f"{q1:.3f}–{q3:.3f} | {gain} |")


if __name__ == "__main__":
    main()
