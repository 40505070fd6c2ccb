#!/usr/bin/env python3
"""What `never_above` limits cost the database at the design's load model: real processes.

A benchmark, not a test (docs/bounded-counter.md, "What it costs"). The design's load model
(the simulator's `rfc`, ACCURACY.md) is 24,000 counters of 100 a minute over 10 regions: 88 %
quiet (1–6 % of the limit), 11 % warm (30–90 %), 0.7 % over it (110–200 %). This script runs
`--share` of those counters (default 10 %) as `guarantee: never_above` limits, each used
from one region, with one `gcounter-rls serve` per region on one MariaDB database, and the
flush and sync at the model's 10 s. Each class of counters is driven per region by one
`gcounter-loadtest` (open loop, keys drawn uniformly from the class's share of the region:
each key at about the class's mean rate).

It reports, per second of the measured run: the requests, the rights calls (takes and
give-backs, `rls_origin_operations_total{op="rights"}`), the database's statements
(MariaDB's `Com_select`, `Com_insert`, `Com_update`, `Com_delete` and `Com_commit`, all
clients: run it on an otherwise idle database) and rows (`Rows_read`, and `Handler_write` +
`Handler_update` + `Handler_delete` written), and the decisions' latency
(each class's p50 and p99 as its clients measured them, the highest of the regions), and
each class's admitted share (a single limiter admits all of `quiet` and `warm`, about
1 ÷ 1.55 of `over`).

    cargo build --release -p gcounter-rls -p gcounter-loadtest
    python3 scripts/rights_cost.py                       # 10 % of the model, 60 s measured

Needs MariaDB (root, no password) at --mysql and the `mysql` client; it creates and drops
its own database.
"""

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time

from harness import free_port, rights_calls, stop_all, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")

# The model's classes: (name, share of the counters, mean load × the limit).
CLASSES = [("quiet", 0.88, 0.035), ("warm", 0.11, 0.60), ("over", 0.007, 1.55)]
STATEMENTS = ["Com_select", "Com_insert", "Com_update", "Com_delete", "Com_commit"]
ROWS_WRITTEN = ["Handler_write", "Handler_update", "Handler_delete"]


def mysql(args, sql):
    host, port = args.mysql.split(":")
    done = subprocess.run(["mysql", "-uroot", f"-h{host}", f"-P{port}", "-N", "-B", "-e", sql],
                          check=True, capture_output=True, text=True)
    return done.stdout


def status(args):
    """MariaDB's global status counters this script reads."""
    names = STATEMENTS + ROWS_WRITTEN + ["Rows_read"]
    out = mysql(args, "SHOW GLOBAL STATUS WHERE Variable_name IN ("
                + ", ".join(f"'{n}'" for n in names) + ")")
    return {name: int(value) for name, value in (line.split("\t") for line in out.splitlines())}


def loadtest(args, grpc, region, name, keys, rate, out):
    cmd = [
        os.path.join(args.bin_dir, "gcounter-loadtest"),
        "--target", f"127.0.0.1:{grpc}",
        "--domain", "cost",
        "--descriptor", f"api_key=r{region}-{name}-{{key}}",
        "--key-space", str(keys),
        "--connections", "1", "--concurrency", "64",
        "--rate", str(rate),
        "--duration", f"{args.seconds}s", "--warmup", f"{args.warmup_s}s",
        "--log-level", "warn",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"loadtest r{region} {name}: {done.stderr.strip()}")
    out.append((name, json.loads(lines[-1])))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--regions", type=int, default=10)
    p.add_argument("--counters", type=int, default=24_000, help="the model's counters")
    p.add_argument("--share", type=float, default=0.1, help="the share of them on never_above")
    p.add_argument("--limit", type=int, default=100, help="per minute")
    p.add_argument("--interval-ms", type=int, default=10_000, help="global flush and sync")
    p.add_argument("--seconds", type=int, default=60, help="measured")
    p.add_argument("--warmup-s", type=int, default=10)
    p.add_argument("--mysql", default="127.0.0.1:3306")
    p.add_argument("--bin-dir", default=RELEASE)
    args = p.parse_args()

    db = f"rights_cost_{os.getpid()}"
    mysql(args, f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}")
    workdir = tempfile.mkdtemp(prefix="rights-cost-")
    config = os.path.join(workdir, "limits.yaml")
    with open(config, "w") as f:
        f.write("domain: cost\ndescriptors:\n  - key: api_key\n    rate_limit:\n"
                f"      unit: minute\n      requests_per_unit: {args.limit}\n"
                "      guarantee: never_above\n")
    counters = args.counters * args.share
    plan = []  # (class, keys per region, requests/s per region)
    for name, share, load in CLASSES:
        keys = max(1, round(counters * share / args.regions))
        plan.append((name, keys, max(1, round(keys * load * args.limit / 60))))
    procs, ports = [], []
    try:
        for r in range(args.regions):
            grpc, http = free_port(), free_port()
            log = open(os.path.join(workdir, f"r{r}.log"), "w")
            procs.append(subprocess.Popen([
                os.path.join(args.bin_dir, "gcounter-rls"), "serve", "--config", config,
                "--region", f"r{r}", "--database-url", f"mysql://root@{args.mysql}/{db}",
                "--migrate", "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
                "--debug-addr", f"127.0.0.1:{free_port()}",
                "--global-flush-interval", f"{args.interval_ms}ms",
                "--global-sync-interval", f"{args.interval_ms}ms",
            ], stdout=log, stderr=subprocess.STDOUT))
            ports.append((grpc, http))
        for proc, (_, http) in zip(procs, ports):
            wait_http(f"http://127.0.0.1:{http}/healthz", proc)
        out = []
        threads = [threading.Thread(target=loadtest, args=(args, grpc, r, name, keys, rate, out))
                   for r, (grpc, _) in enumerate(ports) for name, keys, rate in plan]
        for t in threads:
            t.start()
        time.sleep(args.warmup_s)
        before, calls_before, started = status(args), rights_calls(ports), time.monotonic()
        time.sleep(args.seconds)
        after, calls_after = status(args), rights_calls(ports)
        elapsed = time.monotonic() - started
        for t in threads:
            t.join()
    finally:
        stop_all(procs, grace_s=15)
        mysql(args, f"DROP DATABASE IF EXISTS {db}")

    def per_s(names):
        return sum(after[n] - before[n] for n in names) / elapsed
    requests = sum(rep["ok"] + rep["over_limit"] for _, rep in out) / args.seconds
    summary = {
        "regions": args.regions,
        "never_above_counters": round(counters),
        "plan_per_region": [{"class": n, "keys": k, "rate_per_s": r} for n, k, r in plan],
        "requests_per_s": round(requests, 1),
        "admitted_share": round(sum(rep["ok"] for _, rep in out)
                                / max(1, sum(rep["ok"] + rep["over_limit"] for _, rep in out)), 4),
        "grpc_errors": sum(rep["errors"] for _, rep in out),
        "rights_calls_per_s": round((calls_after - calls_before) / elapsed, 1),
        "statements_per_s": {n: round((after[n] - before[n]) / elapsed, 1) for n in STATEMENTS},
        "statements_per_s_total": round(per_s(STATEMENTS), 1),
        "rows_read_per_s": round(per_s(["Rows_read"]), 1),
        "rows_written_per_s": round(per_s(ROWS_WRITTEN), 1),
        "per_class": {name: {
            # A single limiter admits every request of a class below the limit.
            "admitted_share": round(sum(rep["ok"] for n, rep in out if n == name)
                                    / max(1, sum(rep["ok"] + rep["over_limit"] for n, rep in out if n == name)), 4),
            "p50_ms": max(rep["p50_us"] for n, rep in out if n == name) / 1000,
            "p99_ms": max(rep["p99_us"] for n, rep in out if n == name) / 1000,
        } for name, _, _ in plan},
        "logs": workdir,
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
