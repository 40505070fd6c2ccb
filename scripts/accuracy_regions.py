#!/usr/bin/env python3
"""Real processes against the simulator: N regions of `gcounter-rls` sharing one MariaDB.

A benchmark, not a test (ACCURACY.md, "Method"). For each scenario it
starts one `gcounter-rls serve` per region (its own `--region`, the in-process regional
origin, one shared MariaDB database), drives every region with `gcounter-loadtest` (open loop,
one hot key), and compares admitted ÷ limit per window with what `gcounter-sim` computes for
the same regions, loads, limit, window and intervals.

    cargo build --release -p gcounter-rls -p gcounter-loadtest -p gcounter-sim
    python3 scripts/accuracy_regions.py                       # even-5x5 and concentrated
    python3 scripts/accuracy_regions.py --scenario even --regions 3 --windows 3
    python3 scripts/accuracy_regions.py --scenario onset --regions 10 --load 20 --windows 1 \
        --serve-arg=--global-onset-fraction=0.02 --sim-arg=--onset-fraction=0.02

Scenarios (as the simulator's):
  even          --load × the limit spread evenly over --regions regions (default 5 × over 5)
  concentrated  one region at 2× the limit, two at 0.1× (3 regions)
  onset         as even, and the first window's length of load (which starts in every
                region at once) is measured too: the onset
  bursts        5 × the limit per window over 10 regions, all of it within 1 s either side
                of each window boundary

With --guarantee never_above the limit is a bounded counter (docs/bounded-counter.md): the
regions take rights from the database. The simulator models the default, so the figures are
the real ones only: admitted ÷ limit (never above 1), the refusals against an ideal single
limiter (which admits the limit in every window of a load at or above it: 1 − admitted ÷
limit) and the database's work for the rights (takes and give-backs per second, all regions).

Admitted ÷ limit is the OK answers of the measured windows ÷ (limit × windows); one window
is sent first and not counted (the simulator leaves out its first window too). The onset is
the OK answers of that first window's length ÷ limit, against the simulator's first window
(`onset_window`). For bursts, each window's figure is the OK answers of the second half of
the burst at its start and the first half of the one at its end; the first window is not
counted either. Needs MariaDB
(root, no password) at --mysql and the `mysql` client; it creates and drops its own database.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from harness import free_port, rights_calls, stop_all, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `cargo build --release` put the binaries (a shared CARGO_TARGET_DIR too).
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")


def mysql(host, port, sql):
    subprocess.run(
        ["mysql", "-uroot", f"-h{host}", f"-P{port}", "-e", sql],
        check=True,
    )


def loads(args):
    """(region index, load as a multiple of the limit) per region, and the sim's name."""
    if args.scenario in ("even", "onset"):
        share = args.load / args.regions
        name = f"{args.scenario}-{args.regions}x{args.load:g}"
        return [share] * args.regions, name
    if args.scenario == "bursts":
        return [args.load / args.regions] * args.regions, "bursts"
    return [2.0, 0.1, 0.1], "concentrated"


def loadtest(args, grpc_port, rate, seconds, out, index):
    cmd = [
        args.loadtest,
        "--target", f"127.0.0.1:{grpc_port}",
        "--domain", "accuracy",
        "--descriptor", "tenant=acme",
        "--connections", "1",
        "--concurrency", "8",
        "--rate", str(rate),
        "--duration", f"{seconds}s",
        "--warmup", "0s",
        "--log-level", "warn",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"loadtest {index} printed no report: {done.stderr.strip()}")
    out[index] = json.loads(lines[-1])


def drive(args, ports, rates, seconds):
    """Every region's load at once; returns the reports in region order."""
    out = [None] * len(ports)
    threads = [
        threading.Thread(target=loadtest, args=(args, grpc, rate, seconds, out, i))
        for i, ((grpc, _), rate) in enumerate(zip(ports, rates))
        if rate > 0
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


BURST_HALF_S = 1


def drive_bursts(args, ports, rates, window_s):
    """The bursts: the second half of one at the next boundary, then a whole one at each of
    the windows' ends. Returns the OK answers of each window (the first one included)."""
    def ok(reports):
        return sum(r["ok"] for r in reports if r), sum(r["errors"] for r in reports if r)

    time.sleep(window_s - time.time() % window_s)
    windows, errors = [], 0
    ok_after, e = ok(drive(args, ports, rates, BURST_HALF_S))
    errors += e
    for _ in range(args.windows + 1):
        time.sleep(max(0.0, window_s - BURST_HALF_S - time.time() % window_s))
        ok_before, e1 = ok(drive(args, ports, rates, BURST_HALF_S))
        windows.append(ok_after + ok_before)
        ok_after, e2 = ok(drive(args, ports, rates, BURST_HALF_S))
        errors += e1 + e2
    return windows, errors


def simulate(args, name):
    cmd = [
        args.sim,
        "--scenario", name,
        "--format", "json",
        "--limit", str(args.limit),
        "--window-ms", str(args.window_s * 1000),
        "--flush-ms", str(args.interval_ms),
        "--sync-ms", str(args.interval_ms),
        "--write-latency-ms", str(args.db_lag_ms),
        "--read-latency-ms", str(args.db_lag_ms),
        "--minutes", str(max(10, (args.windows + 1) * args.window_s // 60 + 1)),
        *args.sim_arg,
    ]
    for seed in (1, 2, 3):
        done = subprocess.run(cmd + ["--seed", str(seed)], capture_output=True, text=True, check=True)
        yield json.loads(done.stdout.strip().splitlines()[-1])


def run(args):
    shares, name = loads(args)
    window_s = args.window_s
    # Open-loop rates are whole requests per second; a burst sends a window's share in
    # 2 × BURST_HALF_S.
    active_s = 2 * BURST_HALF_S if args.scenario == "bursts" else window_s
    rates = [max(1, round(share * args.limit / active_s)) for share in shares]
    offered = sum(rates) * active_s / args.limit
    db = f"accuracy_regions_{os.getpid()}"
    host, port = args.mysql.split(":")
    mysql(host, port, f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}")
    procs = []
    workdir = tempfile.mkdtemp(prefix="accuracy-regions-")
    config = os.path.join(workdir, "limits.yaml")
    with open(config, "w") as f:
        f.write(
            "domain: accuracy\n"
            "descriptors:\n"
            "  - key: tenant\n"
            "    rate_limit:\n"
            f"      unit: {args.unit}\n"
            f"      requests_per_unit: {args.limit}\n"
            f"      guarantee: {args.guarantee}\n"
        )
    try:
        ports = []
        for r in range(len(rates)):
            grpc, http = free_port(), free_port()
            log = open(os.path.join(workdir, f"region{r}.log"), "w")
            proc = subprocess.Popen(
                [
                    args.binary, "serve",
                    "--config", config,
                    "--region", f"r{r}",
                    "--database-url", f"mysql://root@{args.mysql}/{db}",
                    "--migrate",
                    "--grpc-addr", f"127.0.0.1:{grpc}",
                    "--http-addr", f"127.0.0.1:{http}",
                    "--debug-addr", f"127.0.0.1:{free_port()}",
                    "--global-flush-interval", f"{args.interval_ms}ms",
                    "--global-sync-interval", f"{args.interval_ms}ms",
                    *args.serve_arg,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            procs.append(proc)
            ports.append((grpc, http))
        for proc, (_, http) in zip(procs, ports):
            wait_http(f"http://127.0.0.1:{http}/healthz", proc)
        # One window not counted by the per-window figure (no previous window to slide
        # over): the onset, which starts in every region at once. Then the measured ones.
        # The load starts at a window boundary, as the simulator's does: started mid-window,
        # the onset's length of load spans two windows, and the second admits what the sliding
        # window frees on top of the first's limit (a figure of the phase, not of the regions).
        per_window = []
        started, calls_before = time.time(), rights_calls(ports)
        if args.scenario == "bursts":
            counted, errors = drive_bursts(args, ports, rates, window_s)
            per_window = [round(ok / args.limit, 3) for ok in counted[1:]]
            onset = counted[0] / args.limit
            real = sum(counted[1:]) / (args.limit * args.windows)
        else:
            time.sleep(window_s - time.time() % window_s)
            started = time.time()
            onset_reports = drive(args, ports, rates, window_s)
            onset = sum(r["ok"] for r in onset_reports if r) / args.limit
            reports = drive(args, ports, rates, window_s * args.windows)
            ok = sum(r["ok"] for r in reports if r)
            errors = sum(r["errors"] for r in reports + onset_reports if r)
            real = ok / (args.limit * args.windows)
        rights_per_s = (rights_calls(ports) - calls_before) / (time.time() - started)
    finally:
        stop_all(procs, grace_s=15)
        if not args.keep:
            mysql(host, port, f"DROP DATABASE IF EXISTS {db}")
    common = {
        "scenario": name,
        "regions": len(rates),
        "rates_per_s": rates,
        "offered_x_limit": round(offered, 2),
        "limit": args.limit,
        "window_s": window_s,
        "windows": args.windows,
        "real_admitted_x_limit": round(real, 3),
        "grpc_errors": errors,
        "logs": workdir,
    }
    if args.guarantee == "never_above":
        return {
            **common,
            "guarantee": args.guarantee,
            "refused_vs_ideal": round(max(0.0, 1.0 - real), 3),
            "real_onset_x_limit": round(onset, 3),
            "rights_calls_per_s": round(rights_per_s, 1),
        }
    sims = list(simulate(args, name))
    medians = [s["per_window"]["median"] for s in sims]
    sim = sum(medians) / len(medians)
    onsets = [s["onset_window"] for s in sims]
    extra = {}
    if per_window:
        extra = {
            "real_per_window_x_limit": per_window,
            "sim_per_window_max_seeds_1_3": [s["per_window"]["max"] for s in sims],
        }
    if args.scenario == "onset":
        extra = {
            "real_onset_x_limit": round(onset, 3),
            "sim_onset_window_seeds_1_3": onsets,
            "sim_onset_sliding_seeds_1_3": [s["onset_sliding"] for s in sims],
            "onset_difference": round(onset - sum(onsets) / len(onsets), 3),
        }
    return {
        **common,
        "interval_ms": args.interval_ms,
        "sim_median_x_limit": round(sim, 3),
        "sim_medians_seeds_1_3": medians,
        "sim_worst_sliding_seeds_1_3": [s["worst_sliding"] for s in sims],
        "difference": round(real - sim, 3),
        **extra,
    }


def figures(values):
    return ", ".join(f"{x:.2f}" for x in values)


def table(header, rows):
    """A markdown table, printed after a blank line; nothing without rows."""
    if not rows:
        return
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=["even", "concentrated", "onset", "bursts", "both"], default="both")
    p.add_argument("--regions", type=int, help="regions of the even and onset scenarios (5)")
    p.add_argument("--load", type=float, default=5.0, help="offered load of the even and onset scenarios, × the limit")
    p.add_argument("--limit", type=int, default=600)
    p.add_argument("--unit", default="minute", choices=["second", "minute", "hour"])
    p.add_argument("--windows", type=int, default=4, help="measured windows")
    p.add_argument("--interval-ms", type=int, default=1000, help="global flush and sync interval")
    p.add_argument("--db-lag-ms", type=int, default=1, help="the simulator's database lag")
    p.add_argument("--mysql", default="127.0.0.1:3306")
    p.add_argument("--binary", default=os.path.join(RELEASE, "gcounter-rls"))
    p.add_argument("--loadtest", default=os.path.join(RELEASE, "gcounter-loadtest"))
    p.add_argument("--sim", default=os.path.join(RELEASE, "gcounter-sim"))
    p.add_argument("--serve-arg", action="append", default=[], help="one more argument for every `serve`")
    p.add_argument("--sim-arg", action="append", default=[], help="one more argument for `gcounter-sim` (the serve arguments' counterpart)")
    p.add_argument("--keep", action="store_true", help="keep the database")
    p.add_argument("--guarantee", default="never_below", choices=["never_below", "never_above"],
                   help="the limit's guarantee; never_above reports the real figures only")
    args = p.parse_args()
    if args.regions is None:
        args.regions = 10 if args.scenario == "bursts" else 5
    if args.scenario == "bursts" and (args.regions, args.load) != (10, 5.0):
        sys.exit("bursts is the simulator's scenario of the same name: 10 regions at 5×")
    args.window_s = {"second": 1, "minute": 60, "hour": 3600}[args.unit]
    for tool in (args.binary, args.loadtest, args.sim):
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: cargo build --release -p gcounter-rls -p gcounter-loadtest -p gcounter-sim")
    scenarios = ["even", "concentrated"] if args.scenario == "both" else [args.scenario]
    results = []
    for scenario in scenarios:
        args.scenario = scenario
        result = run(args)
        print(json.dumps(result), flush=True)
        results.append(result)
    bounded = [r for r in results if r.get("guarantee") == "never_above"]
    results = [r for r in results if r not in bounded]
    table(
        ["scenario", "regions", "offered × limit", f"windows of {args.window_s} s",
         "admitted ÷ limit", "refused vs ideal", "onset ÷ limit", "rights calls/s"],
        [[r["scenario"], r["regions"], r["offered_x_limit"], r["windows"],
          f"{r['real_admitted_x_limit']:.3f}", f"{100 * r['refused_vs_ideal']:.1f} %",
          f"{r['real_onset_x_limit']:.2f}", r["rights_calls_per_s"]] for r in bounded],
    )
    table(
        ["scenario", "regions", "offered × limit", f"windows of {args.window_s} s",
         "real admitted ÷ limit", "simulated (median, seeds 1–3)", "difference"],
        [[r["scenario"], r["regions"], r["offered_x_limit"], r["windows"],
          f"{r['real_admitted_x_limit']:.2f}", f"{r['sim_median_x_limit']:.2f}",
          f"{r['difference']:+.2f}"] for r in results],
    )
    table(
        ["scenario", "real onset ÷ limit", "simulated onset window (seeds 1–3)", "difference"],
        [[r["scenario"], f"{r['real_onset_x_limit']:.2f}", figures(r["sim_onset_window_seeds_1_3"]),
          f"{r['onset_difference']:+.2f}"] for r in results if "real_onset_x_limit" in r],
    )
    table(
        ["scenario", "real per window ÷ limit", "simulated per-window max (seeds 1–3)"],
        [[r["scenario"], figures(r["real_per_window_x_limit"]), figures(r["sim_per_window_max_seeds_1_3"])]
         for r in results if "real_per_window_x_limit" in r],
    )
    if any(r["grpc_errors"] for r in results + bounded):
        sys.exit("gRPC errors during the run")


if __name__ == "__main__":
    main()
