#!/usr/bin/env python3
"""What RLQS costs the server, against RLS v3 at the same request rate.

A benchmark, not a test (docs/rlqs.md, "Measured"). It starts `gcounter-rls serve` (release,
the embedded default) and, in turn:

- RLS v3: `gcounter-loadtest` at --rate requests a second for --seconds, one hot key;
- RLQS: `rlqs-load` with --streams streams (Envoys) reporting the same --buckets buckets each
  second, as many requests per bucket as makes the same --rate in all;
- RLQS at scale: --scale-streams × --scale-buckets buckets reporting one request each second;
- one stream reporting one new bucket: how soon its first assignment comes back;
- memory per bucket (`--memory-only` runs just this): --memory-buckets buckets held by 4
  streams (`rls-abuse rlqs-flood`), with ids of the largest size the server allows (about
  16 KB) and with short ones; the resident memory they add per bucket, against what
  `rls_memory_bytes{pool="rlqs_buckets"}` counts per bucket (the `--rlqs-max-bucket-bytes`
  budget).

For each it prints the server's CPU time per million requests decided (user + system, from
/proc), its peak resident memory, and for RLQS the report handling p50/p99
(`rls_rlqs_report_duration_seconds`) and how long the first report of every stream waited for
all its buckets' first assignments.

    cargo build --release -p gcounter-rls -p gcounter-loadtest
    python3 scripts/rlqs_cost.py [--memory-only]
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request

from accuracy_regions import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sample(metrics, name, labels=""):
    m = re.search(rf"^{name}{re.escape(labels)} (\S+)$", metrics, re.M)
    return float(m.group(1)) if m else 0.0


# Every bucket of the memory runs is counted: a short id on `api_key`'s rule, the largest
# ids (api_key and four 4 KB entries that `rls-abuse rlqs-flood --id-bytes` adds) on the
# nested rule, whose counter's identifier holds those values again.
MEMORY_LIMITS = """\
domain: quota
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 1000000000}
    descriptors:
      - key: pad0
        descriptors:
          - key: pad1
            descriptors:
              - key: pad2
                descriptors:
                  - key: pad3
                    rate_limit: {unit: second, requests_per_unit: 1000000000}
"""


def memory_per_bucket(binary, abuse, limits, buckets, id_bytes):
    """Holds `buckets` buckets of `id_bytes`-byte ids; RSS and counted bytes per bucket."""
    service = Service(binary, limits, ["--rlqs-max-bucket-bytes", "4GiB",
                                       "--rlqs-max-buckets", "10000000",
                                       "--rlqs-max-buckets-per-stream", "10000000"])
    baseline = rss_mib(service.proc.pid)
    streams = 4
    flood = subprocess.Popen(
        [abuse, "rlqs-flood", "--target", f"127.0.0.1:{service.grpc}", "--domain", "quota",
         "--key", "api_key", "--value-prefix", "k-", "--streams", str(streams),
         "--buckets", str(buckets // streams), "--id-bytes", str(id_bytes),
         "--usages-per-report", "1000", "--reports", "0", "--duration", "600s"],
        stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    held = 0.0
    while time.monotonic() < deadline:
        time.sleep(1)
        text = service.metrics()
        now = sample(text, "rls_rlqs_buckets")
        if now >= buckets or (now == held and now > 0):
            held = now
            break
        held = now
    text = service.metrics()
    counted = sample(text, "rls_memory_bytes", '{pool="rlqs_buckets"}')
    rss = rss_mib(service.proc.pid)
    flood.kill()
    service.stop()
    return {"buckets": held, "id_bytes": id_bytes,
            "rss_per_bucket": (rss - baseline) * (1 << 20) / max(held, 1),
            "counted_per_bucket": counted / max(held, 1),
            "rss_mib": rss, "baseline_mib": baseline}


def histogram_quantiles(metrics, name, quantiles):
    buckets = []
    for line in metrics.splitlines():
        m = re.match(rf'{name}_bucket{{le="([^"]+)"}} (\S+)', line)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets.append((le, float(m.group(2))))
    total = buckets[-1][1] if buckets else 0
    out = {}
    for q in quantiles:
        want = q * total
        out[q] = next((le for le, count in buckets if count >= want), float("nan"))
    return out, total


class Service:
    def __init__(self, binary, limits, extra):
        self.grpc, self.http = free_port(), free_port()
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", limits, "--grpc-addr", f"127.0.0.1:{self.grpc}",
             "--http-addr", f"127.0.0.1:{self.http}", "--debug-addr", f"127.0.0.1:{free_port()}",
             "--log-level", "warn", *extra],
            stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the service did not start")
                time.sleep(0.2)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def measure(service, command, requests):
    before = cpu_seconds(service.proc.pid)
    out = subprocess.run(command, capture_output=True, text=True)
    spent = cpu_seconds(service.proc.pid) - before
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
    return {"cpu_s": spent, "cpu_s_per_million": spent / (requests / 1e6) if requests else None,
            "client": json.loads(line), "exit": out.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=int, default=20_000, help="requests a second, both protocols")
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--buckets", type=int, default=1_000)
    p.add_argument("--scale-streams", type=int, default=10)
    p.add_argument("--scale-buckets", type=int, default=10_000)
    p.add_argument("--memory-buckets", type=int, default=10_000)
    p.add_argument("--memory-only", action="store_true")
    p.add_argument("--release", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release"))
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="rlqs-cost-")
    limits = os.path.join(tmp, "limits.yaml")
    with open(limits, "w") as f:
        # Never reached: both protocols admit everything, so the cost is the same work.
        f.write("domain: quota\ndescriptors:\n  - key: api_key\n"
                "    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
    binary = os.path.join(args.release, "gcounter-rls")
    abuse = os.path.join(args.release, "rls-abuse")
    memory_limits = os.path.join(tmp, "memory.yaml")
    with open(memory_limits, "w") as f:
        f.write(MEMORY_LIMITS)
    print("RLQS memory | buckets held | id bytes | RSS per bucket | counted per bucket | RSS / counted")
    for id_bytes in (16_000, 0):
        m = memory_per_bucket(binary, abuse, memory_limits, args.memory_buckets, id_bytes)
        print(f"RLQS memory | {m['buckets']:.0f} | {id_bytes or 'short'} | "
              f"{m['rss_per_bucket']:.0f} B | {m['counted_per_bucket']:.0f} B | "
              f"{m['rss_per_bucket'] / max(m['counted_per_bucket'], 1):.2f}", flush=True)
    if args.memory_only:
        return
    rows = []

    service = Service(binary, limits, [])
    requests = args.rate * args.seconds
    rls = measure(service, [os.path.join(args.release, "gcounter-loadtest"), "--target", f"127.0.0.1:{service.grpc}",
                            "--domain", "quota", "--descriptor", "api_key=hot", "--rate", str(args.rate),
                            "--duration", f"{args.seconds}s", "--warmup", "0s", "--log-level", "warn"], requests)
    rows.append(("RLS v3", args.rate, rls, peak_rss_mib(service.proc.pid), None))
    service.stop()

    per_bucket = max(1, args.rate // (args.streams * args.buckets))
    service = Service(binary, limits, [])
    requests = args.streams * args.buckets * per_bucket * args.seconds
    rlqs = measure(service, [os.path.join(args.release, "rlqs-load"), "--target", f"127.0.0.1:{service.grpc}",
                             "--streams", str(args.streams), "--buckets", str(args.buckets),
                             "--requests-per-report", str(per_bucket), "--duration", f"{args.seconds}s"], requests)
    quantiles, reports = histogram_quantiles(service.metrics(), "rls_rlqs_report_duration_seconds", [0.5, 0.99])
    rows.append((f"RLQS {args.streams}×{args.buckets}", requests // args.seconds, rlqs,
                 peak_rss_mib(service.proc.pid), (quantiles, reports)))
    service.stop()

    # 10,000 buckets reported by 10 Envoys in one message each: over the default 256KiB.
    service = Service(binary, limits, ["--max-request-bytes", "4MiB"])
    requests = args.scale_streams * args.scale_buckets * args.seconds
    scale = measure(service, [os.path.join(args.release, "rlqs-load"), "--target", f"127.0.0.1:{service.grpc}",
                              "--streams", str(args.scale_streams), "--buckets", str(args.scale_buckets),
                              "--requests-per-report", "1", "--duration", f"{args.seconds}s"], requests)
    quantiles, reports = histogram_quantiles(service.metrics(), "rls_rlqs_report_duration_seconds", [0.5, 0.99])
    rows.append((f"RLQS {args.scale_streams}×{args.scale_buckets}", requests // args.seconds, scale,
                 peak_rss_mib(service.proc.pid), (quantiles, reports)))
    service.stop()

    # A new bucket's first report alone: how soon its first assignment comes back.
    service = Service(binary, limits, [])
    first = measure(service, [os.path.join(args.release, "rlqs-load"), "--target", f"127.0.0.1:{service.grpc}",
                              "--streams", "1", "--buckets", "1", "--duration", "1s"], 1)
    rows.append(("RLQS 1×1, first report", 1, first, peak_rss_mib(service.proc.pid), None))
    service.stop()

    print("protocol | requests/s | server CPU s per million | peak RSS MiB | report p50 / p99 ms | all buckets assigned (ms, slowest stream) | client")
    for name, rate, m, rss, reports in rows:
        report = "—"
        if reports:
            q, n = reports
            report = f"{q[0.5] * 1000:.2f} / {q[0.99] * 1000:.2f} ({int(n)} reports)"
        first = m["client"].get("all_assigned_ms_max", "—")
        print(f"{name} | {rate} | {m['cpu_s_per_million']:.2f} | {rss:.0f} | {report} | {first} | "
              f"exit {m['exit']}, {json.dumps(m['client'])[:160]}")


if __name__ == "__main__":
    main()
