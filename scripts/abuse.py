#!/usr/bin/env python3
"""One hostile client against the service, phase by phase: the figures of BENCHMARKS.md's
"Under abuse" table.

    python3 scripts/abuse.py [--binary target/release/gcounter-rls] [--seconds 30]

The binaries default to $CARGO_TARGET_DIR/release when it is set, target/release otherwise.

Starts the binary (`serve --config config/example.yaml` on free loopback ports; add server
flags after `--`), then runs, one after the other, each for --seconds:
  * baseline: legitimate load only;
  * slow-loris: `rls-abuse slow-loris` (4 connections x 250 streams, each announcing 4 MB,
    sending 3.9 MB, then a byte every 5 s) and again announcing just under
    --max-request-bytes (the budget's worst case);
  * idle flood: `rls-abuse idle` (20,000 TCP connections that never send a byte);
  * unique-key flood: `gcounter-loadtest --key-space 100000000` at --flood-rate;
  * RLQS announcements: `rls-abuse slow-loris --path .../StreamRateLimitQuotas` (10
    connections x 86 streams, each sending only a 5-byte prefix announcing
    --max-request-bytes) and 2 x 86 such ShouldRateLimit streams;
  * RLQS group: `rls-abuse rlqs-flood` (2 streams x 20,000 buckets on one share_threshold
    wildcard, then 10 reports of 5,000 usages each);
  * RLQS hot key: 900 streams, each its own connection, reporting one hot bucket;
  * RLQS largest ids: 10 streams x 1,046 buckets of 16 KB ids;
  * RLQS silent: 100 streams x 100 buckets of 16 KB ids that never read a response;
  * all at once: every attack above together.
During each phase a legitimate client (`gcounter-loadtest`, 200 requests/s, connected
before the attack starts) measures gRPC latency, a well-behaved RLQS client
(`rls-abuse rlqs-probe`: one long-lived stream reporting every second, a new stream every
2 s) counts the seconds its long-lived stream holds an unexpired assignment and the new
streams answered within 2 s, /healthz is fetched every 200 ms on a new connection,
and the server's RSS is read from /proc every 200 ms; the CPU time the server and the client
processes used in the phase is reported beside. The server runs on config/example.yaml
plus a domain for the RLQS attacks, with --rlqs-abandon-after 10s so the silent streams are
let go within a phase. Prints one JSON line per phase, then a Markdown table: RSS peak, gRPC
p99 and errors, the probe's covered seconds and answered new streams, /healthz p99 and
failures. Loopback only; every phase is bounded in time. Exit status 1 if the server died,
gRPC or /healthz stopped answering, the probe's long-lived stream went without an assignment,
or RSS passed --rss-bound-mib. New streams are reported, not judged: past the connection cap
(the idle flood) a new connection waits, as documented.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from harness import free_port, warn_if_autogrouped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `cargo build --release` put the binaries (a shared CARGO_TARGET_DIR too).
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid):
    """User plus system CPU time of a running process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are the 14th and 15th fields; fields[0] is the 3rd.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    """CPU time of every client process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Sampler(threading.Thread):
    """RSS and /healthz every 200 ms until stopped."""

    def __init__(self, pid, http_port):
        super().__init__(daemon=True)
        self.pid, self.http_port = pid, http_port
        self.stop = threading.Event()
        self.rss, self.health_ms, self.health_failures = [], [], 0

    def run(self):
        while not self.stop.is_set():
            rss = rss_mib(self.pid)
            if rss is not None:
                self.rss.append(rss)
            start = time.monotonic()
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{self.http_port}/healthz", timeout=2) as r:
                    ok = r.status == 200
            except OSError:
                ok = False
            if ok:
                self.health_ms.append((time.monotonic() - start) * 1000)
            else:
                self.health_failures += 1
            self.stop.wait(0.2)


class Client:
    """A client process whose output goes to files: a chatty one never blocks on a full pipe
    while another is waited for."""

    def __init__(self, argv):
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(argv, stdout=self.out, stderr=self.err, text=True)

    def last_json(self, timeout, what):
        """The last line the client printed, as JSON, once it has stopped."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return {"error": f"{what} did not stop"}
        self.out.seek(0)
        self.err.seek(0)
        lines = self.out.read().strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else {"error": self.err.read()[-500:]}
        except json.JSONDecodeError:
            return {"error": f"{what} printed no JSON"}


def legit_load(loadtest, grpc_port, seconds):
    return Client(
        [loadtest, "--target", f"127.0.0.1:{grpc_port}", "--domain", "example",
         "--descriptor", "remote_address=10.1.{key}", "--key-space", "100",
         "--connections", "2", "--concurrency", "8", "--rate", "200",
         "--warmup", "1s", "--duration", f"{seconds}s"])


# The RLQS attacks' limits, beside config/example.yaml: one share_threshold wildcard (every
# /api/ bucket counts on one counter), and a key per bucket.
RLQS_LIMITS = """\
domain: abuse
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"""


def probe(abuse, grpc_port, seconds):
    return Client(
        [abuse, "rlqs-probe", "--target", f"127.0.0.1:{grpc_port}", "--domain", "abuse",
         "--key", "k", "--value", "probe", "--duration", f"{seconds}s"])


def phase(name, args, server, attack_argvs):
    sampler = Sampler(server.pid, args.http_port)
    server_cpu, clients_cpu = cpu_seconds(server.pid), children_cpu_seconds()
    sampler.start()
    legit = legit_load(args.loadtest_binary, args.grpc_port, args.seconds + 1)
    quota = probe(args.abuse_binary, args.grpc_port, args.seconds)
    time.sleep(1.5)  # the legitimate clients are connected before the attack starts
    attacks = [Client(argv) for argv in attack_argvs]
    report = legit.last_json(args.seconds + 30, "the legitimate client")
    probe_report = quota.last_json(args.seconds + 30, "the RLQS probe")
    attack_report = [a.last_json(args.seconds + 30, "the attack") for a in attacks] or None
    after = cpu_seconds(server.pid)
    server_cpu = None if server_cpu is None or after is None else after - server_cpu
    clients_cpu = children_cpu_seconds() - clients_cpu
    time.sleep(1)
    sampler.stop.set()
    sampler.join()
    answered = (report.get("ok") or 0) + (report.get("over_limit") or 0)
    row = {
        "phase": name,
        "rss_peak_mib": round(max(sampler.rss), 1) if sampler.rss else None,
        "grpc_p99_ms": None if report.get("p99_us") is None else report["p99_us"] / 1000,
        "grpc_answered": answered,
        "grpc_errors": report.get("errors"),
        "grpc_client_error": report.get("error"),
        "rlqs_seconds": probe_report.get("long_lived_seconds", 0),
        "rlqs_covered": probe_report.get("long_lived_covered", 0),
        "rlqs_short": probe_report.get("short_streams", 0),
        "rlqs_short_answered": probe_report.get("short_answered", 0),
        "rlqs_first_max_ms": probe_report.get("first_assignment_max_ms"),
        "rlqs_errors": probe_report.get("errors", probe_report.get("error")),
        "healthz_p99_ms": percentile(sampler.health_ms, 0.99),
        "healthz_failures": sampler.health_failures,
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 1),
        "clients_cpu_s": round(clients_cpu, 1),
        "server_alive": server.poll() is None,
        "attack": attack_report,
    }
    if row["healthz_p99_ms"] is not None:
        row["healthz_p99_ms"] = round(row["healthz_p99_ms"], 1)
    print(json.dumps(row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(RELEASE, "gcounter-rls"))
    parser.add_argument("--abuse-binary", help="default: rls-abuse next to --binary")
    parser.add_argument("--loadtest-binary", help="default: gcounter-loadtest next to --binary")
    parser.add_argument("--config", default=os.path.join(ROOT, "config", "example.yaml"))
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--loris-connections", type=int, default=4)
    parser.add_argument("--loris-streams", type=int, default=250)
    parser.add_argument("--idle-connections", type=int, default=20_000)
    parser.add_argument("--flood-rate", type=int, default=20_000)
    parser.add_argument("--max-request-bytes", type=int, default=256 << 10,
                        help="the server's --max-request-bytes (for the second slow-loris)")
    parser.add_argument("--rss-bound-mib", type=float, default=768)
    parser.add_argument("--only", action="append",
                        help="run only this phase (and the baseline); repeatable")
    parser.add_argument("server_args", nargs="*", help="extra `serve` flags, after --")
    args = parser.parse_args()
    abuse = args.abuse_binary or os.path.join(os.path.dirname(args.binary), "rls-abuse")
    args.abuse_binary = abuse
    args.loadtest_binary = args.loadtest_binary or os.path.join(
        os.path.dirname(args.binary), "gcounter-loadtest")
    for binary in (args.binary, abuse, args.loadtest_binary):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} not found: cargo build --release --workspace --bins")
    warn_if_autogrouped()
    args.grpc_port, args.http_port = free_port(), free_port()
    target = f"127.0.0.1:{args.grpc_port}"
    log = tempfile.NamedTemporaryFile(prefix="abuse-server-", suffix=".log", delete=False)
    limits = tempfile.mkdtemp(prefix="abuse-limits-")
    shutil.copy(args.config, os.path.join(limits, "example.yaml"))
    with open(os.path.join(limits, "rlqs-abuse.yaml"), "w") as f:
        f.write(RLQS_LIMITS)
    server = subprocess.Popen(
        [args.binary, "serve", "--config", limits, "--rlqs-abandon-after", "10s",
         "--grpc-addr", target, "--http-addr", f"127.0.0.1:{args.http_port}",
         "--debug-addr", f"127.0.0.1:{free_port()}"]
        + args.server_args, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{args.http_port}/healthz", timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"server did not start; log: {log.name}")
                time.sleep(0.1)
        s = f"{args.seconds}s"
        loris = [abuse, "slow-loris", "--target", target,
                 "--connections", str(args.loris_connections),
                 "--streams", str(args.loris_streams), "--trickle-every", "5s", "--duration", s]
        under = args.max_request_bytes - 64
        rlqs_path = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
        announce = [abuse, "slow-loris", "--target", target, "--streams", "86",
                    "--announce-bytes", str(args.max_request_bytes), "--send-bytes", "0",
                    "--trickle-every", "3600s", "--duration", s]
        flood = [abuse, "rlqs-flood", "--target", target, "--domain", "abuse",
                 "--duration", s]
        rlqs = {
            "RLQS announcements": [
                announce + ["--path", rlqs_path, "--connections", "10"],
                announce + ["--connections", "2"],
            ],
            "RLQS group": [flood + ["--streams", "2", "--buckets", "20000",
                                    "--usages-per-report", "5000", "--reports", "10"]],
            "RLQS hot key": [flood + ["--streams", "900", "--buckets", "1", "--key", "k",
                                      "--value-prefix", "hot", "--reports", "30",
                                      "--usages-per-report", "1"]],
            "RLQS largest ids": [flood + ["--streams", "10", "--buckets", "1046", "--key", "k",
                                          "--id-bytes", "16000", "--usages-per-report", "100",
                                          "--reports", "0"]],
            "RLQS silent": [flood + ["--streams", "100", "--buckets", "100", "--key", "k",
                                     "--id-bytes", "16000", "--usages-per-report", "100",
                                     "--reports", "0", "--no-read"]],
        }
        phases = [
            ("baseline", []),
            ("slow-loris 4 MB", [loris + ["--announce-bytes", "4000000",
                                          "--send-bytes", "3900000"]]),
            ("slow-loris max-request", [loris + ["--announce-bytes", str(under),
                                                 "--send-bytes", str(under - 1024)]]),
            ("idle flood", [[abuse, "idle", "--target", target,
                             "--connections", str(args.idle_connections), "--duration", s]]),
            ("unique-key flood", [[args.loadtest_binary, "--target", target,
                                   "--domain", "example", "--descriptor",
                                   "remote_address={key}", "--key-space", "100000000",
                                   "--connections", "4", "--concurrency", "64",
                                   "--rate", str(args.flood_rate), "--warmup", "0s",
                                   "--duration", s]]),
            *rlqs.items(),
            ("RLQS all at once", [argv for argvs in rlqs.values() for argv in argvs]),
        ]
        if args.only:
            phases = [p for p in phases if p[0] in args.only or p[0] == "baseline"]
        rows = [phase(name, args, server, argvs) for name, argvs in phases]
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    print()
    print("| phase | RSS peak (MiB) | gRPC p99 (ms) | gRPC answered / errors "
          "| RLQS stream: seconds with an assignment "
          "| new RLQS streams answered (slowest, ms) "
          "| /healthz p99 (ms) | /healthz failures | CPU s: server / clients |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for r in rows:
        first = r["rlqs_first_max_ms"]
        first = "—" if first is None else f"{first:.1f}"
        print(f"| {r['phase']} | {r['rss_peak_mib']} | {r['grpc_p99_ms']} | "
              f"{r['grpc_answered']} / {r['grpc_errors']} | "
              f"{r['rlqs_covered']} of {r['rlqs_seconds']} | "
              f"{r['rlqs_short_answered']} of {r['rlqs_short']} ({first}) | "
              f"{r['healthz_p99_ms']} | {r['healthz_failures']} | "
              f"{r['server_cpu_s']} / {r['clients_cpu_s']} |")
        failed |= (not r["server_alive"] or not r["grpc_answered"] or r["grpc_errors"]
                   or r["healthz_failures"]
                   # The first second passes before the first assignment can arrive.
                   or r["rlqs_covered"] < r["rlqs_seconds"] - 1
                   or (r["rss_peak_mib"] or 0) > args.rss_bound_mib)
    print(f"\nserver log: {log.name}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
