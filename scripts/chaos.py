#!/usr/bin/env python3
"""A seeded chaos run over a multi-region deployment, and a checker of what must hold.

N regions × M `gcounter-rls serve` processes, a Redis per region, one MariaDB database. Each
region lives in its own network namespace, joined to the host by two veth pairs: one to its
Redis, one to the database. Each link goes through a userspace TCP proxy at the host end of
the pair (to add delay and loss: the kernel may have no netem). Load comes from
`gcounter-loadtest` (RLS v3 over gRPC) run inside each region's namespace, one per process,
and from `rlqs-load` (RLQS, each stream standing in for an Envoy's rate_limit_quota filter),
two clients per region against its first process, each on a limit of its own, for the whole
run: one stream on the `quota` limit, three on the `never_above` `quota_capped` limit.

The run is a sequence of phases, each one window long. Phase 0 warms up; every later phase
either draws one fault from the seed or is the quiet phase after one:

  kill        SIGKILL a process under load (answers not yet replayed), restart it
  stop        SIGSTOP a process under load for longer than every deadline, then SIGCONT
  cut-db      `ip link set … down` on a region's database link, then up
  cut-redis   `ip link set … down` on a region's Redis link, then up
  lossy-db    delay and loss on a region's database link
  lossy-redis delay and loss on a region's Redis link
  failover    the region's Redis master killed and replaced (Sentinel promotes the replica)
              while the region's database link is down

A third tenant's limit is `guarantee: never_above`: its admissions spend rights taken from
the database, and each process's `--clock-skew` covers its clock's offset, so that no
admission may be above the sliding rule by true time whatever the faults; the checker
holds every admission to it by its client's send and answer times. The second RLQS client's
limit is `never_above` too: its token buckets are taken from the counter before they are
sent, and the checker holds each request the client admitted to the rule by the time it did.

The regions' clocks disagree (libfaketime, --skew-s apart, each process's windows come from
its own clock). After the last phase the load stops, every link is healed, and the run
settles; then the checker prints one table, writes a JSON summary (--json) and exits 1 if any
invariant broke. The bounds, derived from the flags, are in docs/reliability.md.

    cargo build -p gcounter-rls -p gcounter-loadtest
    sudo python3 scripts/chaos.py --seed 1                       # the short run (~2 min)
    sudo python3 scripts/chaos.py --seed 2 --phases 21           # each kind 3 times

--plant NAME plants a defect the checker must catch (the run must then fail); see
docs/reliability.md for the table of defects and the invariant each one breaks.

Needs root (network namespaces), `ip`, `redis-server` (also the Sentinel), libfaketime, the
`mysql` client and MariaDB (root, no password) at --mysql; it creates and drops its own
database. --loopback runs without namespaces for development only: partitions are then proxy
cuts, and Redis cuts never touch the data path.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from chaoslib import bounds as bounds_mod
from chaoslib.check import check, db_range, rlqs_phase
from chaoslib.deploy import CODE_PLANTS, DEPLOYMENT_PLANTS, FAKETIME_LIBS, Deployment, mysql
from chaoslib.net import NoNamespaces
from chaoslib.phases import KINDS, Phases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Run(Deployment, Phases):
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.tag = os.getpid() % 10000
        self.workdir = tempfile.mkdtemp(prefix="chaos-")
        self.db = f"chaos_{self.tag}"
        self.net = None
        self.redis_procs = []
        self.regions = []
        self.stop_sampling = threading.Event()
        self.resources = {}  # (region, process) -> [max rss kB, max fds]
        self.redis_seen = {}  # region -> KeyHistory
        self.lock = threading.Lock()
        self.rlqs_procs = []  # [(region, process, its events)]
        self.rlqs_events = {}  # region -> [(monotonic time read, event)]
        self.capped_rlqs_events = {}  # the same, of the `never_above` RLQS client
        self.killed_at = {}  # (region, process) -> wall-clock time of its last SIGKILL
        self.kills = {}  # (region, process) -> wall-clock times of its SIGKILLs
        self.failing_over = []  # the failover of the phase, running beside its load
        self.failover_errors = []  # what stopped a failover thread


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--regions", type=int, default=2)
    p.add_argument("--processes", type=int, default=2, help="processes per region")
    p.add_argument("--phases", type=int, default=7, help="fault phases, one window each (each followed by a quiet one)")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--window-s", type=int, default=6)
    p.add_argument("--limit", type=int, default=60, help="per window, for the hot and the light key")
    p.add_argument("--hot-rate", type=int, default=15, help="requests/s per process on the hot key")
    p.add_argument("--light-rate", type=int, default=2, help="requests/s per process on the light key")
    p.add_argument("--capped-limit", type=int, default=30,
                   help="per window, for the `never_above` tenant (docs/bounded-counter.md)")
    p.add_argument("--capped-rate", type=int, default=10,
                   help="requests/s per process on the `never_above` tenant")
    p.add_argument("--rlqs-limit", type=int, default=60, help="per window, for the RLQS bucket")
    p.add_argument("--rlqs-rate", type=float, default=30,
                   help="requests/s each region's RLQS client offers its bucket")
    p.add_argument("--rlqs-capped-limit", type=int, default=30,
                   help="per --rlqs-capped-window-s, for the `never_above` RLQS bucket")
    p.add_argument("--rlqs-capped-window-s", type=int,
                   help="the `never_above` RLQS bucket's window (default: two phases; a token "
                        "bucket ends the clock margin and a delivery before its window does)")
    p.add_argument("--rlqs-capped-rate", type=float, default=10,
                   help="requests/s each region's `never_above` RLQS client offers its bucket")
    p.add_argument("--rlqs-interval-ms", type=int, default=1000, help="the RLQS clients' reporting interval")
    p.add_argument("--rlqs-ttl-s", type=int, default=4, help="the service's --rlqs-assignment-ttl")
    p.add_argument("--replay-ms", type=int, default=100)
    p.add_argument("--interval-ms", type=int, default=200, help="global flush and sync interval")
    p.add_argument("--stop-s", type=float, default=2.0, help="SIGSTOP length (past every deadline)")
    p.add_argument("--delay-ms", type=int, default=50)
    p.add_argument("--loss", type=float, default=0.01)
    p.add_argument("--skew-s", type=float, default=2.0, help="how far apart the first and last region's clocks are")
    p.add_argument("--deadline-ms", type=int, default=1000, help="the slowest answer allowed")
    p.add_argument("--db-lag-ms", type=int, default=50, help="the database's lag, counted into the bound's delay")
    p.add_argument("--publish-floor", type=float, default=0.02)
    p.add_argument("--max-memory-mib", type=int, default=256)
    p.add_argument("--max-fds", type=int, default=256)
    p.add_argument("--settle-s", type=float,
                   help="how long the run settles after the load stops (default: two windows and "
                        "a second: the last window's cells are closed, their final totals read "
                        "back from Redis and published, when they expire one window after it)")
    p.add_argument("--plant", choices=CODE_PLANTS + DEPLOYMENT_PLANTS,
                   help="plant a defect the checker must catch: the run must fail")
    p.add_argument("--loopback", action="store_true",
                   help="development only: no network namespaces (no root needed); link cuts become "
                        "proxy cuts and Redis cuts miss the data path, so the run proves less")
    p.add_argument("--mysql", default="127.0.0.1:3306")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "target/debug"))
    p.add_argument("--json", help="write the summary here: the network, the bounds, each check's verdict")
    p.add_argument("--keep", action="store_true", help="keep the database")
    args = p.parse_args()
    if args.rlqs_capped_window_s is None:
        args.rlqs_capped_window_s = 2 * args.window_s
    if args.settle_s is None:
        args.settle_s = 2 * args.window_s + 1.0
    return args


def preflight(args):
    """Every tool the run needs, or exit saying what is missing and how to get it."""
    args.binary = os.path.join(args.bin_dir, "gcounter-rls")
    args.loadtest = os.path.join(args.bin_dir, "gcounter-loadtest")
    args.rlqs_load = os.path.join(args.bin_dir, "rlqs-load")
    missing = [t for t in (args.binary, args.loadtest, args.rlqs_load) if not os.access(t, os.X_OK)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: cargo build -p gcounter-rls -p gcounter-loadtest")
    tools = {"redis-server": "redis-server", "redis-cli": "redis-tools", "mysql": "mariadb-client",
             "curl": "curl"}
    if not args.loopback:
        tools["ip"] = "iproute2"
    for tool, pkg in tools.items():
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install {pkg}")
    if not any(os.path.exists(l) for l in FAKETIME_LIBS):
        sys.exit("libfaketime is missing: apt-get install faketime")
    if not args.loopback and os.geteuid() != 0:
        sys.exit("the chaos run puts each region in a network namespace, which needs root: run it "
                 "as `sudo python3 scripts/chaos.py ...` (or the test suite as root, as .ci/run "
                 "does); --loopback runs without namespaces, for development only")
    try:
        mysql(args, "SELECT 1")
    except subprocess.CalledProcessError as e:
        sys.exit(f"MariaDB does not answer at {args.mysql} (root, no password): {e.stderr.strip()}; "
                 "bash .ci/services.sh starts it")
    args.redis_server = shutil.which("redis-server")
    args.redis_cli = shutil.which("redis-cli")
    bounds = bounds_mod.derive(args)
    loose = bounds_mod.too_loose(bounds)
    if loose:
        sys.exit("these bounds are not below what is offered by "
                 f"{bounds_mod.MARGIN:.0%}, so their checks could not fail; offer more load: "
                 + "; ".join(f"{b.name}: {b.value:.2f} of {b.offered:.2f} offered" for b in loose))
    return bounds


def settled_rows(args, run):
    """The database's rows per region, read once they hold each region's Redis total (but the
    cells under the floor), or one window after the settling: a cell's last count may wait
    that long for its flush after the cell expired (a flush backing off after a lossy or cut
    link). Rows still short then are a finding."""
    deadline = time.monotonic() + args.window_s
    while True:
        db = run.db_counts()
        if time.monotonic() >= deadline or all(lo <= db.get(f"r{r}", 0) <= hi
                                                for r, (lo, hi) in enumerate(db_range(args, run))):
            return db
        time.sleep(1)
        for r, region in enumerate(run.regions):
            run.sample_redis(r, region)


def main():
    # A SIGTERM ends the run through its teardown (namespaces, processes, the database).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    args = parse()
    bounds = preflight(args)
    run = Run(args)
    t0 = time.monotonic()
    rows = []
    try:
        run.setup()
        print(f"seed {args.seed}: {args.regions} regions × {args.processes} processes, "
              f"{'network namespaces' if run.net.netns else 'loopback proxies (--loopback)'}, clocks "
              f"{', '.join(f'{o:+g} s' for o in run.offsets)}"
              f"{f', planted: {args.plant}' if args.plant else ''}, logs in {run.workdir}", flush=True)
        for i, kind in enumerate(run.schedule()):
            row = run.phase(i, kind)
            rows.append(row)
            hot = sum(v["hot"]["ok"] for v in row["out"].values())
            err = sum(v[k]["errors"] for v in row["out"].values() for k in v)
            quota = sum(e["allowed"] for events in run.rlqs_events.values() for t, e in list(events)
                        if e["event"] == "report"
                        and rlqs_phase([row], t - args.rlqs_interval_ms / 2000) is not None)
            where = f"r{row['region']}-p{row['process']}" if kind else "     "
            print(f"phase {i:3} {row['kind']:11} {where}  hot admitted {hot / args.limit:.2f} × limit, "
                  f"RLQS {quota / args.rlqs_limit:.2f} × limit, errors {err}, {row['elapsed_s']} s", flush=True)
        run.settle()
        run.stop_sampling.set()
        db = settled_rows(args, run)
        skew = run.skew()
    except NoNamespaces as e:
        sys.exit(f"{e}: the run needs root and iproute2 (`sudo python3 scripts/chaos.py ...`); "
                 "--loopback runs without namespaces, for development only")
    finally:
        run.teardown()
    checks, lines = check(args, run, rows, db, skew, bounds)
    broken = [c for c in checks if not c["held"]]
    kinds = {}
    for row in rows[1:]:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    print()
    print(f"seed {args.seed}, {time.monotonic() - t0:.0f} s, phases: "
          + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())))
    print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "network": "namespaces" if run.net.netns else "loopback",
                       "plant": args.plant, "phases": kinds, "seconds": round(time.monotonic() - t0),
                       "bounds": [b.as_json() for b in bounds.values()],
                       "checks": checks, "broken": [c["id"] for c in broken], "table": lines,
                       "redis_cells": {f"r{r}": h.totals() for r, h in run.redis_seen.items()},
                       "database_rows": db},
                      f, indent=1, ensure_ascii=False)
    if broken:
        sys.exit("broken: " + "; ".join(f"{c['invariant']} ({c['measured']})" for c in broken))


if __name__ == "__main__":
    main()
