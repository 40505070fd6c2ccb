#!/usr/bin/env python3
"""The service benchmarks of BENCHMARKS.md, every figure a ratio to the no-op servers of the
same run.

    python3 scripts/bench.py [--runs 5] [--requests 300000] [--rate 10000] [--seconds 5]
        [--no-redis] [--variant NAME=FLAGS ...] [--binary NAME=PATH ...]
        [--limitador BINARY [--limitador-redis] [--limitador-limits FILE]]
        [--interleave ROUNDS]
    python3 scripts/bench.py --open-loop [--workers 2] [--rates 5000,10000,20000] [--runs 3]
        [--live-cells 1000000] [--cpu] [--stall-probe 1ms]

Each run measures, in turn, on core 0 (taskset), with the load on core 1:
  * the ceiling: the no-op server `rls-noop` on hyper's HTTP/2 directly (`--stack hyper`,
    current-thread runtime), the stack the service runs on: what the transport and the protobuf
    codec cost alone. Beside it `rls-noop --stack tonic` on a current-thread and on a
    multi-thread runtime (one worker): what a plain tonic server costs, the faster of the two;
    every server is reported as a ratio to both;
  * the service, embedded default (in-process origin);
  * the service with the Redis origin (local redis-server, keys under a fresh prefix), unless
    --no-redis;
  * each --variant: the embedded service with extra flags (`--variant
    "window 1M=--http2-stream-window 1048576"`), to measure one setting at a time;
  * each --binary NAME=PATH: the embedded service from another build (an A/B of two
    commits in one run);
  * with --limitador BINARY: Limitador (Kuadrant's RLS; this project neither ships nor builds
    it) with its memory storage, and with --limitador-redis its Redis storage too, on a limits
    file equivalent to ours (1e9 per hour per `remote_address`; its 2.x syntax,
    `descriptors[0].remote_address`: give --limitador-limits for another version's).
Two loads per server: h2load, hot key, 4 connections x 16 streams, throughput; and
`gcounter-loadtest`, open loop at --rate over 1,000 keys, latency percentiles.
Prints one JSON line per measurement, then a Markdown table of medians over the runs.

--interleave ROUNDS measures the same servers' h2load throughput (hot key) paired in time
instead: every server runs at once (all on core 0; an idle one costs nothing), and each round
sends --requests requests to each of them in turn, in an order that rotates by one server per
round, so a server is measured seconds from the ceiling it is divided by. On this VM the same
no-op moves ±20 % between minutes; adjacent bursts share the minute. The ratio of a round is
a server's req/s over the hyper no-op's of that round (and over the faster tonic no-op's);
the table gives the median of the rounds' ratios and the interquartile range of the first. Use short bursts (--requests 50000) and many
rounds (21).

--open-loop measures latency, not a ceiling, with both cores serving: the hyper no-op server
(a multi-thread runtime with --workers workers) and the service with `--workers`, neither
pinned, each under `gcounter-loadtest` at each of --rates (open loop, 1,000 keys; the load
generator shares the cores, as it must on a 2-core machine). Prints p50/p99/p99.9 per rate
and the service's p99 as a ratio to the no-op's at the same rate.
With --live-cells N (the p99 at a fixed open-loop rate while the table is large), the
service holds at least N live window cells through the measurement: its limit is per year (no
window ends during a run), --max-cells and --max-cell-bytes are raised so nothing is evicted,
and before the measurement `gcounter-loadtest --sequential` sends each key of a key space once
(closed loop: as fast as the machine sustains), the key space sized from a probe of 1,000 keys
(cells per key: the current window's and the previous one's). Both servers are then measured
over that whole key space (a request finds its cell among the N), and the service's
`rls_live_cells` (from /metrics) is checked before and after each rate: fewer than N fails
the run. Each --binary NAME=PATH is measured the same way, after the service (an A/B of two
builds' latency in one run).
Diagnostics of --open-loop (they add fields to the JSON lines, the table is unchanged):
--cpu adds each server's CPU time (user + system, from /proc) per answered request over each
rate, `cpu_us_per_request`: a figure the machine's other load changes far less than the
latency. --stall-probe INTERVAL starts the service with `--stall-probe-interval INTERVAL` and
adds, per rate, its wake-ups (`stall_samples`) and how many woke more than 2, 4, 8 and 16 ms
late (`stalls_over_ms`, from `rls_runtime_stall_seconds`): how often a runtime thread could
not run a ready task for that long (the kernel's preemption included).
Needs: h2load (Debian nghttp2-client), taskset, redis-server on 127.0.0.1:6379.
"""

import argparse
import contextlib
import json
import math
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

from harness import free_port, warn_if_autogrouped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `cargo build --release` put the binaries (a shared CARGO_TARGET_DIR too).
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                       "release")
SERVICE = os.path.join(RELEASE, "gcounter-rls")
NOOP = os.path.join(RELEASE, "rls-noop")
# The servers' names in the tables: the ceiling, and the prefix of tonic's two runtimes.
HYPER_NOOP = "noop hyper"
TONIC_NOOP = "noop tonic"
LOADTEST = os.path.join(RELEASE, "gcounter-loadtest")
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
SERVER_CORE, LOAD_CORE = "0", "1"
LIMITS = """\
domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
"""
# For --live-cells: a year's window, so no cell expires or rolls over during a run.
LIVE_LIMITS = LIMITS.replace("unit: hour", "unit: year")
# The same limit for Limitador 2.x (namespace = the request's domain).
LIMITADOR_LIMITS = """\
- namespace: bench
  max_value: 1000000000
  seconds: 3600
  conditions: []
  variables: ["descriptors[0].remote_address"]
"""


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

    def __init__(self, name, argv, grpc_port, http_port=None, cores=SERVER_CORE):
        self.name, self.argv, self.grpc_port, self.http_port = name, argv, grpc_port, http_port
        self.cores = cores

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", self.cores] + self.argv,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.grpc_port, self.proc)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def metric(self, pattern):
        """The sum of the service's samples matching `pattern` (a regex over the metric name
        and labels) on /metrics; 0 for a server that is not ours."""
        if self.http_port is None or not self.name.startswith("service"):
            return 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics").read().decode()
        return sum(float(m.group(1)) for m in
                   re.finditer(rf"^{pattern} (\S+)", text, re.M))

    def origin_operations(self):
        """Regional origin round trips so far (the service's own counter)."""
        return self.metric(r"rls_origin_operations_total\{[^}]*\}")

    def live_cells(self):
        return int(self.metric(r"rls_live_cells"))

    def cpu_seconds(self):
        """User + system CPU time of the server process so far (its threads included)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # utime and stime: fields 14 and 15 of stat(5), counted after the command's ")".
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stall_buckets(self):
        """The stall probe's cumulative buckets, {upper bound in seconds: wake-ups}."""
        if self.http_port is None or not self.name.startswith("service"):
            return {}
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics").read().decode()
        return {float(m.group(1)): int(float(m.group(2))) for m in re.finditer(
            r'^rls_runtime_stall_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M)}


def h2load(port, body, requests, cores=(LOAD_CORE,)):
    """Hot-key throughput: one h2load thread per core of `cores`, 4 connections each with 16
    streams."""
    threads = len(cores)
    out = subprocess.run(
        ["taskset", "-c", ",".join(map(str, cores)), "h2load", "-n", str(requests),
         "-c", str(4 * threads), "-m", "16", "-t", str(threads), "-d", body,
         "-H", "content-type: application/grpc", "-H", "te: trailers",
         f"http://127.0.0.1:{port}{METHOD}"],
        capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out).group(1))
    ok = int(re.search(r"status codes: (\d+) 2xx", out).group(1))
    if ok != requests:
        sys.exit(f"h2load: {ok} of {requests} requests answered 2xx\n{out}")
    return rps


def loadtest(port, args, seconds=None, rate=None, cores=LOAD_CORE, key_space=1000,
             sequential=False):
    """Open loop at `rate` (default --rate); `sequential`: closed loop, each key once."""
    pace = (["--sequential", "--duration", "1h", "--warmup", "0s"] if sequential else
            ["--rate", str(rate or args.rate), "--duration", f"{seconds or args.seconds}s",
             "--warmup", "0s" if seconds else "1s"])
    return run_loadtest(port, cores, key_space, pace)


def run_loadtest(port, cores, key_space, pace):
    """`gcounter-loadtest` on `cores` over `key_space` keys of the bench limit, at `pace`
    (its flags of rate or sequence, duration and warm-up); its JSON report."""
    out = subprocess.run(
        ["taskset", "-c", cores, LOADTEST, "--target", f"127.0.0.1:{port}",
         "--domain", "bench", "--descriptor", "remote_address=10.0.{key}",
         "--key-space", str(key_space), "--connections", "4", "--concurrency", "64", *pace],
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
    parser.add_argument("--no-redis", action="store_true",
                        help="leave out the service with the Redis origin")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="also the embedded service with these extra flags")
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                        help="also the embedded service from another build (e.g. a commit's)")
    parser.add_argument("--no-build", action="store_true",
                        help="use the release binaries as they are")
    parser.add_argument("--limitador", metavar="BINARY",
                        help="also Limitador's limitador-server (memory storage)")
    parser.add_argument("--limitador-redis", action="store_true",
                        help="with --limitador: its Redis storage too (on --redis-url)")
    parser.add_argument("--limitador-limits", metavar="FILE",
                        help="with --limitador: its limits file (default: 2.x syntax)")
    parser.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                        help="h2load throughput in paired rounds (see above)")
    parser.add_argument("--open-loop", action="store_true",
                        help="latency at fixed rates with --workers workers (see above)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rates", default="5000,10000,20000")
    parser.add_argument("--live-cells", type=int, default=0, metavar="N",
                        help="with --open-loop: the service holds N live cells (see above)")
    parser.add_argument("--cpu", action="store_true",
                        help="with --open-loop: CPU time per request of each server")
    parser.add_argument("--stall-probe", metavar="INTERVAL",
                        help="with --open-loop: the service's stall probe (see above)")
    args = parser.parse_args()
    for tool in ("h2load", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing (h2load: apt-get install nghttp2-client)")
    if args.limitador and not os.access(args.limitador, os.X_OK):
        sys.exit(f"--limitador {args.limitador}: not an executable")
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--workspace", "--bins"], cwd=ROOT,
                       check=True)
    warn_if_autogrouped()

    work = tempfile.mkdtemp(prefix="rls-bench-")
    limits = os.path.join(work, "limits.yaml")
    body = os.path.join(work, "body.bin")
    with open(limits, "w") as f:
        f.write(LIVE_LIMITS if args.live_cells else LIMITS)
    limitador_limits = args.limitador_limits or os.path.join(work, "limitador.yaml")
    if not args.limitador_limits:
        with open(limitador_limits, "w") as f:
            f.write(LIMITADOR_LIMITS)
    subprocess.run([LOADTEST, "--domain", "bench", "--descriptor", "remote_address=10.0.0.1",
                    "--write-grpc-body", body], check=True)

    def noop(stack, flavor, workers=1, cores=SERVER_CORE):
        port = free_port()
        name = f"noop {stack}" if stack == "hyper" else f"noop {stack} {flavor}"
        return Server(name, [NOOP, "--grpc-addr", f"127.0.0.1:{port}", "--stack", stack,
                             "--runtime", flavor, "--workers", str(workers)],
                      port, cores=cores)

    def service(name, *extra, cores=SERVER_CORE, binary=SERVICE):
        grpc, http = free_port(), free_port()
        return Server(name, [binary, "serve", "--config", limits, "--log-level", "warn",
                             "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr",
                             f"127.0.0.1:{http}", "--debug-addr", f"127.0.0.1:{free_port()}",
                             *extra], grpc, http, cores=cores)

    def limitador(name, *storage):
        grpc, http = free_port(), free_port()
        return Server(name, [args.limitador, limitador_limits, "--rls-ip", "127.0.0.1",
                             "--rls-port", str(grpc), "--http-ip", "127.0.0.1",
                             "--http-port", str(http), *storage], grpc, http)

    if args.open_loop:
        live = []
        if args.live_cells:
            # Room for every cell: nothing evicted (bytes: ~260 B a cell, with headroom for
            # the evictable share of the cap).
            live = ["--max-cells", str(args.live_cells * 2 + 100_000),
                    "--max-cell-bytes", f"{args.live_cells * 2}KiB"]
        if args.stall_probe:
            live += ["--stall-probe-interval", args.stall_probe]
        open_loop(args, noop, lambda name, *extra, cores, binary=SERVICE: service(
            name, *extra, *live, cores=cores, binary=binary))
        return

    def servers_of(run):
        prefix = f"bench{os.getpid()}r{run}:"
        servers = [noop("hyper", "current-thread"), noop("tonic", "current-thread"),
                   noop("tonic", "multi-thread"), service("service, embedded")]
        if not args.no_redis:
            servers.append(service("service, Redis origin", "--redis-url", args.redis_url,
                                   "--redis-prefix", prefix))
        for variant in args.variant:
            name, _, flags = variant.partition("=")
            servers.append(service(f"service, {name}", *flags.split()))
        for other in args.binary:
            name, _, path = other.partition("=")
            servers.append(service(f"service, {name}", binary=path))
        if args.limitador:
            servers.append(limitador("limitador, memory", "memory"))
            if args.limitador_redis:
                servers.append(limitador("limitador, redis", "redis", args.redis_url))
        return servers

    if args.interleave:
        interleave(args, servers_of(1), body)
        return

    rows = []
    for run in range(1, args.runs + 1):
        servers = servers_of(run)
        for server in servers:
            with server:
                time.sleep(0.3)
                rows.append(measure(server, args, body, run))
    summarize(rows)


def interleave(args, servers, body):
    """h2load throughput of every server in paired rounds (see the module's doc)."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        time.sleep(0.3)
        for server in servers:  # warm-up, discarded
            h2load(server.grpc_port, body, args.requests // 5)
        ratios = {server.name: [] for server in servers}
        tonic_ratios = {server.name: [] for server in servers}
        rps = {server.name: [] for server in servers}
        for round_ in range(args.interleave):
            shift = round_ % len(servers)
            measured = {}
            for server in servers[shift:] + servers[:shift]:
                measured[server.name] = h2load(server.grpc_port, body, args.requests)
            ceiling = measured[HYPER_NOOP]
            tonic = max(v for name, v in measured.items() if name.startswith(TONIC_NOOP))
            for name, value in measured.items():
                rps[name].append(value)
                ratios[name].append(value / ceiling)
                tonic_ratios[name].append(value / tonic)
            print(json.dumps({"round": round_ + 1, **{name: round(value)
                                                       for name, value in measured.items()}}),
                  flush=True)
    print()
    print(f"| server | median req/s | ratio to the hyper no-op: median | quartiles "
          f"({args.interleave} rounds of {args.requests:,} requests) | "
          f"ratio to the tonic no-op: median |")
    print("|---|---|---|---|---|")
    for server in servers:
        q1, _, q3 = statistics.quantiles(ratios[server.name], n=4)
        print(f"| {server.name} | {statistics.median(rps[server.name]):,.0f} | "
              f"{statistics.median(ratios[server.name]):.3f} | {q1:.3f}–{q3:.3f} | "
              f"{statistics.median(tonic_ratios[server.name]):.3f} |")


def open_loop(args, noop, service):
    """Latency at fixed rates, both cores serving (see the module's doc)."""
    rates = [int(rate) for rate in args.rates.split(",")]
    both = f"{SERVER_CORE},{LOAD_CORE}"
    key_space = 1000
    rows = []
    for run in range(1, args.runs + 1):
        name = f"service, --workers {args.workers}"
        if args.live_cells:
            name += f", {args.live_cells:,} live cells"
        servers = [noop("hyper", "multi-thread", args.workers, cores=both),
                   service(name, "--workers", str(args.workers), cores=both)]
        for other in args.binary:
            label, _, path = other.partition("=")
            servers.append(service(f"service, {label}", "--workers", str(args.workers),
                                   cores=both, binary=path))
        if args.live_cells:
            # The services first: their fill sizes the key space all are measured over.
            servers = servers[1:] + servers[:1]
        for server in servers:
            with server:
                time.sleep(0.3)
                if args.live_cells and server.name.startswith("service"):
                    key_space = fill(server, args, both)
                loadtest(server.grpc_port, args, seconds=1, rate=rates[0], cores=both,
                         key_space=key_space)
                for rate in rates:
                    cpu_before = server.cpu_seconds() if args.cpu else 0
                    stalls_before = server.stall_buckets() if args.stall_probe else {}
                    latency = loadtest(server.grpc_port, args, rate=rate, cores=both,
                                       key_space=key_space)
                    row = {"run": run, "server": server.name, "rate": rate,
                           "key_space": key_space,
                           "answered": latency["ok"] + latency["over_limit"],
                           "p50_us": latency["p50_us"], "p99_us": latency["p99_us"],
                           "p99_9_us": latency["p99_9_us"], "errors": latency["errors"]}
                    if args.cpu:
                        # The load generator's own warm-up second is in both figures.
                        row["cpu_us_per_request"] = round(
                            (server.cpu_seconds() - cpu_before) * 1e6 / max(row["answered"], 1), 1)
                    if stalls_before:
                        after = server.stall_buckets()
                        delta = {le: after[le] - stalls_before.get(le, 0) for le in after}
                        total = delta.get(math.inf, 0)
                        row["stall_samples"] = total
                        row["stalls_over_ms"] = {
                            ms: total - delta.get(ms / 1000, total) for ms in (2, 4, 8, 16)}
                    if args.live_cells and server.name.startswith("service"):
                        row["live_cells"] = server.live_cells()
                        if row["live_cells"] < args.live_cells:
                            sys.exit(f"only {row['live_cells']:,} live cells after the run "
                                     f"at {rate}/s, fewer than --live-cells {args.live_cells:,}")
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    by = {(r["run"], r["server"], r["rate"]): r for r in rows}
    # The no-op first, the reference of the ratios, whichever ran first.
    servers = sorted(dict.fromkeys(r["server"] for r in rows),
                     key=lambda name: not name.startswith("noop"))
    runs = sorted({r["run"] for r in rows})
    print()
    print("| server | rate /s | p50 µs | p99 µs | p99.9 µs | p99 ratio to the no-op's | errors |")
    print("|---|---|---|---|---|---|---|")
    for rate in rates:
        for server in servers:
            mine = [by[(run, server, rate)] for run in runs]
            ratio = statistics.median(
                by[(run, server, rate)]["p99_us"] / max(by[(run, servers[0], rate)]["p99_us"], 1)
                for run in runs)
            print(f"| {server} | {rate:,} | {statistics.median(r['p50_us'] for r in mine):,.0f} | "
                  f"{statistics.median(r['p99_us'] for r in mine):,.0f} | "
                  f"{statistics.median(r['p99_9_us'] for r in mine):,.0f} | {ratio:.2f} | "
                  f"{sum(r['errors'] for r in mine)} |")


def fill(server, args, cores):
    """Makes the service hold at least --live-cells live cells; returns the key space that
    holds them (the measurement's, for both servers)."""
    probe = 1000
    loadtest(server.grpc_port, args, cores=cores, key_space=probe, sequential=True)
    per_key = server.live_cells() / probe
    if per_key <= 0:
        sys.exit("the service reports no live cells after the probe (rls_live_cells)")
    # Keys 0..probe-1 again, no new cells: the key space is a superset of the probe's.
    key_space = max(probe, math.ceil(args.live_cells / per_key))
    started = time.monotonic()
    report = loadtest(server.grpc_port, args, cores=cores, key_space=key_space,
                      sequential=True)
    live = server.live_cells()
    print(json.dumps({"fill": key_space, "cells_per_key": per_key, "live_cells": live,
                      "seconds": round(time.monotonic() - started, 1),
                      "fill_rps": round(report["requests_per_s"]),
                      "errors": report["errors"]}), flush=True)
    if live < args.live_cells or report["errors"]:
        sys.exit(f"fill: {live:,} live cells (wanted {args.live_cells:,}), "
                 f"{report['errors']} errors")
    return key_space


def summarize(rows):
    runs = sorted({r["run"] for r in rows})
    servers = list(dict.fromkeys(r["server"] for r in rows))
    by = {(r["run"], r["server"]): r for r in rows}
    ceiling, tonic = {}, {}
    for run in runs:
        ceiling[run] = by[(run, HYPER_NOOP)]
        noops = [by[(run, s)] for s in servers if s.startswith(TONIC_NOOP) and (run, s) in by]
        tonic[run] = max(noops, key=lambda r: r["h2load_rps"])
    print()
    print("| server | h2load req/s, hot key | ratio to the hyper no-op | ratio to the tonic no-op "
          "| p50 µs | p99 µs | p99 ratio to the hyper no-op's | origin round trips / request "
          "(hot; 1,000 keys) |")
    print("|---|---|---|---|---|---|---|---|")
    for server in servers:
        mine = [by[(run, server)] for run in runs]

        def med(key):
            return statistics.median(r[key] for r in mine)

        rps_ratio = statistics.median(by[(run, server)]["h2load_rps"] / ceiling[run]["h2load_rps"]
                                      for run in runs)
        tonic_ratio = statistics.median(
            by[(run, server)]["h2load_rps"] / tonic[run]["h2load_rps"] for run in runs)
        p99_ratio = statistics.median(by[(run, server)]["p99_us"] / ceiling[run]["p99_us"]
                                      for run in runs)
        print(f"| {server} | {med('h2load_rps'):,.0f} | {rps_ratio:.2f} | {tonic_ratio:.2f} | "
              f"{med('p50_us'):,.0f} | "
              f"{med('p99_us'):,.0f} | {p99_ratio:.2f} | "
              f"{med('origin_ops_per_request_hot'):.4f}; "
              f"{med('origin_ops_per_request_1000_keys'):.4f} |")


if __name__ == "__main__":
    main()
