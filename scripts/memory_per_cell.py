#!/usr/bin/env python3
"""Resident memory per live cell through the whole service, against what its budgets count.

For each size in --cells: starts the release service (embedded, one limit with a year's
window, so no cell expires or rolls over), reads its RSS (/proc/PID/status VmRSS) and what
its byte budgets count (the sum of `rls_memory_bytes` over the pools keyed by cells: `cells`,
`replay_queue`, `foreign_components`, `strict_mode`, `penalty_box`), fills it with
`gcounter-loadtest --key-space N --sequential` (each key once), waits for the replay to
drain, and reads both again. Per live cell: RSS growth ÷ live cells added, counted growth ÷
live cells added, and their ratio. RSS includes everything the flood made the process hold:
the table, the replay queue's buffer, the regional origin's components, the allocator's
overhead and fragmentation.

--cgroup-limit BYTES runs the service in a fresh memory cgroup of that limit (v2:
`memory.max`; v1: `memory.limit_in_bytes`, under this process's own group), so
`--max-memory` is derived from it as in a container; the row says whether the kernel's OOM
killer ran (`oom_killed`). --rate R adds the decision latency (p50/p99) at R requests/s over
the filled keys, after the fill. --binary PATH measures another build (an A/B of two
commits).

    cargo build --release --bin gcounter-rls --bin gcounter-loadtest
    python3 scripts/memory_per_cell.py --cells 100000,1000000
    python3 scripts/memory_per_cell.py --cells 10000000 --cgroup-limit 4GiB --rate 5000

Needs: taskset, and root for --cgroup-limit.
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench import LOADTEST, run_loadtest
from harness import free_port, stop_all, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                       "release")
SERVICE = os.path.join(RELEASE, "gcounter-rls")
LIMITS = """\
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: year, requests_per_unit: 1000000000 }
"""
# The pools of --max-cell-bytes (`rls_memory_bytes{pool}`).
CELL_POOLS = (
    "cells",
    "replay_queue",
    "foreign_components",
    "strict_mode",
    "penalty_box",
    "rights",
)
UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30,
         "gib": 1 << 30}


def parse_bytes(text):
    match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    if not match or match.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r}")
    return int(match.group(1)) * UNITS[match.group(2).lower()]


def metrics(http_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10)
    return text.read().decode()


def metric(text, pattern):
    return sum(float(m.group(1)) for m in re.finditer(rf"^{pattern} (\S+)", text, re.M))


def counted(text):
    return sum(metric(text, rf'rls_memory_bytes\{{pool="{pool}"\}}') for pool in CELL_POOLS)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class Cgroup:
    """A fresh memory cgroup with `limit` bytes, removed on exit."""

    def __init__(self, limit):
        self.limit = limit
        name = f"rls-memory-{os.getpid()}"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.dir = os.path.join("/sys/fs/cgroup", name)
            self.v2 = True
        else:
            own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
                       if line.split(":")[1] == "memory")
            self.dir = os.path.join("/sys/fs/cgroup/memory", own.lstrip("/"), name)
            self.v2 = False

    def __enter__(self):
        os.mkdir(self.dir)
        limit_file = "memory.max" if self.v2 else "memory.limit_in_bytes"
        with open(os.path.join(self.dir, limit_file), "w") as f:
            f.write(str(self.limit))
        return self

    def join(self):
        """For `preexec_fn`: moves the child into the group before it runs the service."""
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def oom_kills(self):
        name = "memory.events" if self.v2 else "memory.oom_control"
        with open(os.path.join(self.dir, name)) as f:
            found = re.search(r"^oom_kill (\d+)", f.read(), re.M)
        return int(found.group(1)) if found else 0

    def __exit__(self, *exc):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def loadtest(grpc_port, cores, key_space, rate=None, seconds=None):
    pace = (["--rate", str(rate), "--duration", f"{seconds}s", "--warmup", "1s"] if rate else
            ["--sequential", "--duration", "24h", "--warmup", "0s"])
    return run_loadtest(grpc_port, cores, key_space, pace)


def settle(http_port):
    """Waits until the replay queue is empty (what the flood queued has reached the origin)."""
    for _ in range(100):
        text = metrics(http_port)
        if not re.search(r"^rls_replay_pending_cells ", text, re.M):
            sys.exit("the service reports no rls_replay_pending_cells")
        if metric(text, r"rls_replay_pending_cells") == 0:
            return
        time.sleep(0.2)


def run(args, cells):
    grpc, http = free_port(), free_port()
    argv = [args.binary, "serve", "--config", args.limits, "--log-level", "warn",
            "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
            "--debug-addr", f"127.0.0.1:{free_port()}", "--workers", str(args.workers),
            *args.extra]
    group = Cgroup(args.cgroup_limit) if args.cgroup_limit else contextlib.nullcontext()
    with group:
        proc = subprocess.Popen(["taskset", "-c", args.cores] + argv,
                                preexec_fn=group.join if args.cgroup_limit else None,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_http(f"http://127.0.0.1:{http}/healthz", proc)
            # One decision first: the runtime, the connections and the config are warm, so
            # the growth below is what the cells hold.
            loadtest(grpc, args.cores, 1)
            time.sleep(1)
            before = metrics(http)
            rss_before = rss_bytes(proc.pid)
            started = time.monotonic()
            fill = loadtest(grpc, args.cores, cells)
            fill_s = time.monotonic() - started
            settle(http)
            time.sleep(1)
            after = metrics(http)
            rss_after = rss_bytes(proc.pid)
            live = metric(after, "rls_live_cells") - metric(before, "rls_live_cells")
            row = {
                "keys": cells, "flags": " ".join(args.extra), "live_cells": int(live),
                "rss_before_mib": round(rss_before / 2**20, 1),
                "rss_after_mib": round(rss_after / 2**20, 1),
                "rss_per_cell": round((rss_after - rss_before) / max(live, 1)),
                "counted_per_cell": round((counted(after) - counted(before)) / max(live, 1)),
                "fill_s": round(fill_s, 1), "fill_errors": fill["errors"],
                "max_memory": int(metric(after, r"rls_memory_limit_bytes\{[^}]*\}")),
                "cell_budget": int(metric(after, r'rls_memory_budget_bytes\{pool="cell_bytes"\}')),
            }
            row["rss_to_counted"] = round(row["rss_per_cell"] / max(row["counted_per_cell"], 1), 3)
            if args.rate:
                latency = loadtest(grpc, args.cores, cells, rate=args.rate, seconds=args.seconds)
                row.update(p50_us=latency["p50_us"], p99_us=latency["p99_us"],
                           rate=args.rate, errors=latency["errors"],
                           rss_end_mib=round(rss_bytes(proc.pid) / 2**20, 1))
        finally:
            alive = proc.poll() is None
            stop_all([proc], 15)
            if args.cgroup_limit:
                row_oom = group.oom_kills()
        if args.cgroup_limit:
            row.update(cgroup_limit=args.cgroup_limit, oom_killed=row_oom, alive=alive)
        print(json.dumps(row), flush=True)
        return row


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", default="100000,1000000",
                        help="key spaces to fill, comma-separated (one key: one live cell)")
    parser.add_argument("--cgroup-limit", type=parse_bytes, metavar="BYTES",
                        help="run the service in a memory cgroup of this limit")
    parser.add_argument("--rate", type=int, default=0,
                        help="after the fill, decision latency at this rate over the keys")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--binary", default=SERVICE,
                        help="the service's binary (default: the release build's)")
    parser.add_argument("--cores", default="0,1", help="taskset cores of both processes")
    parser.add_argument("extra", nargs="*", metavar="FLAG",
                        help="service flags after --, e.g. -- --max-memory 2GiB")
    args = parser.parse_args()
    for binary in (args.binary, LOADTEST):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not built (cargo build --release --bin gcounter-rls "
                     f"--bin gcounter-loadtest)")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as limits:
        limits.write(LIMITS)
        limits.flush()
        args.limits = limits.name
        rows = [run(args, int(n)) for n in args.cells.split(",")]
    print()
    print("| live cells | flags | RSS per live cell | counted per live cell | RSS ÷ counted |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['live_cells']:,} | {r['flags'] or '(defaults)'} | {r['rss_per_cell']} B | "
              f"{r['counted_per_cell']} B | {r['rss_to_counted']} |")


if __name__ == "__main__":
    main()
