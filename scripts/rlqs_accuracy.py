#!/usr/bin/env python3
"""RLQS through real Envoys: how close to its limit one bucket's admitted requests stay.

A benchmark, not a test (docs/rlqs.md, "Measured"). It starts `gcounter-rls serve` (one
process per region; two or more regions share one SQLite file as their global store), Envoys
running envoy/quota.yaml (the `rate_limit_quota` filter) and, with --rls-envoys, Envoys running
envoy/per-api-key.yaml (the RLS v3 `ratelimit` filter) on the same domain, so every Envoy's
requests count on the one counter of `api_key=<key>`. It drives each Envoy with HTTP requests
of one x-api-key at a steady rate from the start of a window, and prints, per window, the
requests admitted (HTTP 200) by all Envoys together ÷ the limit.

    cargo build --release -p gcounter-rls
    python3 scripts/rlqs_accuracy.py --split 10,10,10            # three RLQS Envoys, 3x, even
    python3 scripts/rlqs_accuracy.py --split 24,3,3              # 80/10/10
    python3 scripts/rlqs_accuracy.py --split 15 --rls-split 15   # one RLQS, one RLS v3 Envoy
    python3 scripts/rlqs_accuracy.py --split 15,15 --regions 2   # one RLQS Envoy per region
    python3 scripts/rlqs_accuracy.py --split 27,3 --shift-after 1.5   # demand moves to the 2nd

Rates are requests per second per Envoy. The limit is --limit per minute (default 600, 10 a
second): --split 10,10,10 offers three times it. Window 1 is the onset (the first assignment
starts from nothing); the rest are steady. Envoy is installed by integration/install-envoy.sh.
"""

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from harness import free_port, stop_all, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW_S = 60


def envoy_binary():
    out = subprocess.run(
        ["bash", os.path.join(ROOT, "integration", "install-envoy.sh")],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def envoy_config(example, rls_port, tmp, name):
    """The example with free ports (listener, upstream, admin) and the service's port; the
    RLS v3 example is moved onto the RLQS example's domain."""
    text = open(os.path.join(ROOT, "envoy", example)).read()
    listen, upstream, admin = free_port(), free_port(), free_port()
    text = text.replace("port_value: 10000", f"port_value: {listen}")
    text = text.replace("port_value: 10001", f"port_value: {upstream}")
    text = text.replace("port_value: 9901", f"port_value: {admin}")
    text = text.replace("port_value: 8081", f"port_value: {rls_port}")
    text = re.sub(r"domain: per-api-key", "domain: quota", text)
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path, listen, admin


class Load(threading.Thread):
    """Requests at `rate` a second to one Envoy, from `start` (monotonic) for `seconds`;
    `rate_after` from `shift_at` on. Records (wall time, status) of every answer."""

    def __init__(self, port, rate, start, seconds, shift_at=None, rate_after=None):
        super().__init__(daemon=True)
        self.port, self.rate, self.start_at, self.seconds = port, rate, start, seconds
        self.shift_at, self.rate_after = shift_at, rate_after
        self.answers = []

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        t = self.start_at
        end = self.start_at + self.seconds
        while t < end:
            rate = self.rate
            if self.shift_at is not None and t >= self.shift_at:
                rate = self.rate_after
            if rate <= 0:
                t += 0.1
                continue
            delay = t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("GET", "/", headers={"x-api-key": "hot"})
                r = conn.getresponse()
                r.read()
                self.answers.append((time.time(), r.status))
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                self.answers.append((time.time(), 0))
            t += 1.0 / rate


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="10,10,10", help="RLQS Envoys' rates, requests a second each")
    p.add_argument("--rls-split", default="", help="RLS v3 Envoys' rates, requests a second each")
    p.add_argument("--regions", type=int, default=1, help="service processes, one region each; Envoys are spread over them")
    p.add_argument("--limit", type=int, default=600, help="requests per minute")
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--shift-after", type=float, default=0,
                   help="after this many windows, the first RLQS Envoy's rate moves to the last one")
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "gcounter-rls"))
    p.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = p.parse_args()

    rlqs_rates = [float(x) for x in args.split.split(",") if x]
    rls_rates = [float(x) for x in args.rls_split.split(",") if x]
    envoy = envoy_binary()
    tmp = tempfile.mkdtemp(prefix="rlqs-accuracy-")
    limits = os.path.join(tmp, "limits.yaml")
    with open(limits, "w") as f:
        f.write(f"domain: quota\ndescriptors:\n  - key: api_key\n"
                f"    rate_limit: {{unit: minute, requests_per_unit: {args.limit}}}\n")
    procs = []
    try:
        services = []
        database = os.path.join(tmp, "global.db")
        for r in range(args.regions):
            grpc, http_port = free_port(), free_port()
            cmd = [args.binary, "serve", "--config", limits,
                   "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http_port}",
                   "--debug-addr", f"127.0.0.1:{free_port()}", "--log-level", "warn"]
            if args.regions > 1:
                cmd += ["--region", f"r{r}", "--database-url", f"sqlite://{database}?mode=rwc",
                        "--migrate", "--global-flush-interval", "1s", "--global-sync-interval", "1s"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"rls-{r}.log"), "w"))
            procs.append(proc)
            wait_http(f"http://127.0.0.1:{http_port}/healthz", proc)
            services.append(grpc)
        envoys = []
        for i, rate in enumerate(rlqs_rates + rls_rates):
            example = "quota.yaml" if i < len(rlqs_rates) else "per-api-key.yaml"
            config, listen, admin = envoy_config(example, services[i % len(services)], tmp, f"envoy-{i}")
            proc = subprocess.Popen([envoy, "-c", config, "--base-id", str(1000 + i), "-l", "warn"],
                                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"envoy-{i}.log"), "w"))
            procs.append(proc)
            wait_http(f"http://127.0.0.1:{admin}/ready", proc)
            envoys.append((listen, rate))
        # Start at the beginning of a window, so window 1 is the onset.
        now = time.time()
        first = (int(now) // WINDOW_S + 1) * WINDOW_S
        start = time.monotonic() + (first - now)
        seconds = args.windows * WINDOW_S
        shift_at = start + args.shift_after * WINDOW_S if args.shift_after else None
        loads = []
        for i, (port, rate) in enumerate(envoys):
            rate_after = None
            if shift_at is not None and i < len(rlqs_rates):
                if i == 0:
                    rate_after = 0.0
                elif i == len(rlqs_rates) - 1:
                    rate_after = rate + rlqs_rates[0]
            load = Load(port, rate, start, seconds, shift_at if rate_after is not None else None, rate_after)
            load.start()
            loads.append(load)
        for load in loads:
            load.join()
        per_window = []
        for w in range(args.windows):
            lo, hi = first + w * WINDOW_S, first + (w + 1) * WINDOW_S
            admitted = [sum(1 for t, s in load.answers if lo <= t < hi and s == 200) for load in loads]
            offered = [sum(1 for t, s in load.answers if lo <= t < hi) for load in loads]
            errors = sum(1 for load in loads for t, s in load.answers if lo <= t < hi and s not in (200, 429))
            per_window.append({"window": w + 1, "admitted": sum(admitted), "ratio": sum(admitted) / args.limit,
                               "per_envoy": admitted, "offered": sum(offered), "errors": errors})
        result = {"split": rlqs_rates, "rls_split": rls_rates, "regions": args.regions,
                  "limit": args.limit, "windows": per_window}
        if args.shift_after:
            # Admitted per second of each Envoy in 5 s bins around the shift.
            shift_wall = first + args.shift_after * WINDOW_S
            bins = []
            for b in range(-2, 6):
                lo, hi = shift_wall + b * 5, shift_wall + (b + 1) * 5
                bins.append({"from_s": b * 5, "per_second": [
                    sum(1 for t, s in load.answers if lo <= t < hi and s == 200) / 5 for load in loads]})
            result["shift"] = bins
        if args.json:
            print(json.dumps(result))
        else:
            print(f"RLQS Envoys {rlqs_rates} req/s, RLS v3 Envoys {rls_rates}, {args.regions} region(s), "
                  f"limit {args.limit}/min")
            print("window | offered | admitted | ÷ limit | per Envoy | errors")
            for w in per_window:
                print(f"{w['window']:6} | {w['offered']:7} | {w['admitted']:8} | {w['ratio']:7.2f} | "
                      f"{w['per_envoy']} | {w['errors']}")
            for b in result.get("shift", []):
                print(f"after the shift {b['from_s']:+4} s: admitted per second {b['per_second']}")
    finally:
        stop_all(procs, grace_s=10)


if __name__ == "__main__":
    sys.exit(main())
