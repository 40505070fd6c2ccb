#!/usr/bin/env python3
"""Instructions per gRPC request of a whole server, counted by callgrind: repeatable on a
loaded machine, where req/s are not.

    python3 scripts/callgrind_server.py [--requests 20000] [--server service|noop]
        [--stack hyper|tonic] [--binary PATH] [--cache-sim] [-- FLAGS]

Starts the release server (`gcounter-rls serve` on one hot-key limit, or `rls-noop` on a
current-thread runtime, on the --stack it names: hyper's HTTP/2 directly by default) under `valgrind --tool=callgrind` with collection off, warms it with
h2load, turns collection on (`callgrind_control -i on`), sends --requests requests with h2load
(1 connection x 16 streams, the hot key of scripts/bench.py), turns it off, dumps, and prints
the instructions per request (`Ir` of the dump / requests) as one JSON line; the callgrind
file is kept for `callgrind_annotate --inclusive=yes FILE`. FLAGS after `--` go to
`gcounter-rls serve` (one setting at a time).
Needs: valgrind, h2load; the release binaries (`cargo build --release --workspace --bins`;
in $CARGO_TARGET_DIR/release when it is set, as scripts/bench.py), or --binary: the server
to run instead (`gcounter-rls` or `rls-noop`, e.g. a copy built from an earlier commit).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the same binaries, limits, body and h2load flags)


def control(*argv):
    subprocess.run(["callgrind_control", *argv], check=True, capture_output=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--server", choices=("service", "noop"), default="service")
    parser.add_argument("--stack", choices=("hyper", "tonic"), default="hyper",
                        help="the no-op's stack (with --server noop)")
    parser.add_argument("--out", help="callgrind output file (default: a temporary one)")
    parser.add_argument("--binary", help="the server binary (default: the release build's)")
    parser.add_argument("--cache-sim", action="store_true",
                        help="also simulate the caches: misses per request (I1, D1, last level)")
    parser.add_argument("flags", nargs="*", help="extra `serve` flags (after --)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="rls-callgrind-")
    limits, body = os.path.join(work, "limits.yaml"), os.path.join(work, "body.bin")
    with open(limits, "w") as f:
        f.write(bench.LIMITS)
    subprocess.run([bench.LOADTEST, "--domain", "bench", "--descriptor",
                    "remote_address=10.0.0.1", "--write-grpc-body", body], check=True)
    port = bench.free_port()
    if args.server == "service":
        argv = [args.binary or bench.SERVICE, "serve", "--config", limits, "--log-level", "warn",
                "--grpc-addr", f"127.0.0.1:{port}", "--http-addr",
                f"127.0.0.1:{bench.free_port()}", "--debug-addr",
                f"127.0.0.1:{bench.free_port()}", "--workers", "1", *args.flags]
    else:
        argv = [args.binary or bench.NOOP, "--grpc-addr", f"127.0.0.1:{port}",
                "--runtime", "current-thread", "--stack", args.stack]
    name = args.server if args.server == "service" else f"noop-{args.stack}"
    out = args.out or os.path.join(work, f"callgrind.{name}.out")
    sim = ["--cache-sim=yes"] if args.cache_sim else []
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim,
                             f"--callgrind-out-file={out}", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bench.wait_port(port, proc, timeout=120)
        run_h2load(port, body, 2_000)
        control("-i", "on", str(proc.pid))
        run_h2load(port, body, args.requests)
        control("-i", "off", str(proc.pid))
        control("-d", str(proc.pid))
        time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    # The explicit dump (`<out>.1`) holds exactly the measured requests.
    measured = f"{out}.1"
    events, totals = [], []
    with open(measured) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            m = re.match(r"^(?:summary|totals):((?: \d+)+)", line)
            if m:
                totals = [int(n) for n in m.group(1).split()]
    per_request = {event: total / args.requests for event, total in zip(events, totals)}
    report = {"server": name, "flags": args.flags, "requests": args.requests,
              "ir_per_request": round(per_request.get("Ir", 0)), "file": measured}
    if args.cache_sim:
        # Misses per request: first-level instruction and data (reads + writes), last level.
        report["i1_misses_per_request"] = round(per_request.get("I1mr", 0), 1)
        report["d1_misses_per_request"] = round(
            per_request.get("D1mr", 0) + per_request.get("D1mw", 0), 1)
        report["ll_misses_per_request"] = round(
            sum(per_request.get(e, 0) for e in ("ILmr", "DLmr", "DLmw")), 1)
    print(json.dumps(report))


def run_h2load(port, body, requests):
    subprocess.run(["h2load", "-n", str(requests), "-c", "1", "-m", "16", "-t", "1", "-d", body,
                    "-H", "content-type: application/grpc", "-H", "te: trailers",
                    f"http://127.0.0.1:{port}{bench.METHOD}"],
                   check=True, capture_output=True, timeout=600)


if __name__ == "__main__":
    main()
