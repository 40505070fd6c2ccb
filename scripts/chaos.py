#!/usr/bin/env python3
"""A seeded chaos run over a multi-region deployment, and a checker of what must hold.

N regions × M `gcounter-rls serve` processes, a Redis per region, one MariaDB database. Each
region lives in its own network namespace, joined to the host by two veth pairs: one to its
Redis, one to the database. Each link goes through a userspace TCP proxy at the host end of
the pair (to add delay and loss: the kernel may have no netem). Load comes from
`gcounter-loadtest` (RLS v3 over gRPC) run inside each region's namespace, one per process,
and from `rlqs-load` (RLQS, one stream standing in for an Envoy's rate_limit_quota filter),
one per region against its first process, on a limit of its own, for the whole run.

The run is a sequence of phases, each one window long. Phase 0 warms up; every later phase
draws one fault from the seed:

  kill        SIGKILL a process under load (answers not yet replayed), restart it
  stop        SIGSTOP a process for longer than every deadline, then SIGCONT
  cut-db      `ip link set … down` on a region's database link, then up
  cut-redis   `ip link set … down` on a region's Redis link, then up
  lossy-db    delay and loss on a region's database link
  lossy-redis delay and loss on a region's Redis link
  failover    the region's Redis master killed and replaced (Sentinel promotes the replica)
              while the region's database link is down

The regions' clocks disagree (libfaketime, --skew-s apart, each process's windows come from
its own clock). After the last phase the load stops, every link is healed, and the run
settles; then the checker prints one table and exits 1 if any invariant broke. The bounds
are in docs/reliability.md.

    cargo build -p gcounter-rls -p gcounter-loadtest
    sudo python3 scripts/chaos.py --seed 1                       # the short run (~2 min)
    sudo python3 scripts/chaos.py --seed 2 --phases 35           # ~6.5 min, each kind 5 times

Needs root (namespaces), `ip`, `redis-server` (also the Sentinel), libfaketime, the `mysql`
client and MariaDB (root, no password) at --mysql; it creates and drops its own database.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKETIME_LIBS = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
]
KINDS = ["kill", "stop", "cut-db", "cut-redis", "lossy-db", "lossy-redis", "failover"]


HANDED_OUT = set()


def free_port():
    """A port free on the host and not handed out before: the namespaces' ports are not seen
    from the host, so a port free here may already serve in a region."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in HANDED_OUT:
            HANDED_OUT.add(port)
            return port


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def mysql(args, sql, db=None):
    host, port = args.mysql.split(":")
    cmd = ["mysql", "-uroot", f"-h{host}", f"-P{port}", "-N", "-B", "-e", sql]
    if db:
        cmd.insert(1, f"-D{db}")
    return sh(*cmd).stdout


class Proxy:
    """A TCP proxy: `delay_s` on every chunk, `loss` the chance that a chunk resets its
    connection (a lossy link seen from TCP: stalls and resets), `cut` refuses and drops all
    (only in the loopback fallback, where there is no link to take down)."""

    def __init__(self, listen, upstream):
        self.upstream = upstream
        self.delay_s = 0.0
        self.loss = 0.0
        self.cut = False
        self.rng = random.Random(hash(listen))
        self.conns = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        self.sock.listen(256)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data or self.cut:
                    break
                if self.delay_s:
                    time.sleep(self.delay_s)
                if self.loss and self.rng.random() < self.loss:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def drop_all(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Net:
    """Each region's namespace and its two links, or, where namespaces cannot be made,
    loopback proxies only (with a warning)."""

    def __init__(self, tag, regions):
        self.tag = tag
        self.regions = regions
        self.netns = True
        try:
            for r in range(regions):
                ns = self.ns(r)
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                for link in ("d", "r"):
                    host, inner = self.veth(r, link), f"{self.veth(r, link)}n"
                    sh("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
                    sh("ip", "link", "set", inner, "netns", ns)
                    sh("ip", "addr", "add", f"{self.subnet(r, link)}.1/30", "dev", host)
                    sh("ip", "-n", ns, "addr", "add", f"{self.subnet(r, link)}.2/30", "dev", inner)
                    sh("ip", "link", "set", host, "up")
                    sh("ip", "-n", ns, "link", "set", inner, "up")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            err = getattr(e, "stderr", "") or str(e)
            print(f"warning: cannot make network namespaces ({err.strip()}); falling back to "
                  "loopback proxies: partitions are proxy cuts, not link cuts", file=sys.stderr)
            self.cleanup()
            self.netns = False

    def ns(self, r):
        return f"chaos{self.tag}r{r}"

    def veth(self, r, link):
        return f"c{self.tag}{link}{r}"

    def subnet(self, r, link):
        # One /16 per run (two runs side by side do not share addresses), one /24 per link.
        return f"10.{20 + self.tag % 200}.{2 * r + (link == 'r')}.0"[:-2]

    def host_ip(self, r, link):
        return f"{self.subnet(r, link)}.1" if self.netns else "127.0.0.1"

    def exec_prefix(self, r):
        return ["ip", "netns", "exec", self.ns(r)] if self.netns else []

    def set_link(self, r, link, up):
        if self.netns:
            sh("ip", "link", "set", self.veth(r, link), "up" if up else "down")

    def cleanup(self):
        for r in range(self.regions):
            sh("ip", "netns", "del", self.ns(r), check=False)
            for link in ("d", "r"):
                sh("ip", "link", "del", self.veth(r, link), check=False)


class Region:
    pass


class Run:
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
        self.redis_seen = {}  # region -> {key: max hits}
        self.events = []
        self.lock = threading.Lock()
        self.rlqs_procs = []
        self.rlqs_events = {}  # region -> [(monotonic time read, event)]

    # ---- set-up -------------------------------------------------------------------------
    def config(self):
        path = os.path.join(self.workdir, "limits.yaml")
        with open(path, "w") as f:
            f.write(
                "domain: chaos\n"
                "descriptors:\n"
                "  - key: tenant\n"
                "    rate_limit:\n"
                "      unit: second\n"
                f"      unit_multiplier: {self.args.window_s}\n"
                f"      requests_per_unit: {self.args.limit}\n"
                # RLQS traffic only: its own counter, its own over-admission.
                "  - key: quota\n"
                "    rate_limit:\n"
                "      unit: second\n"
                f"      unit_multiplier: {self.args.window_s}\n"
                f"      requests_per_unit: {self.args.rlqs_limit}\n"
            )
        return path

    def start_redis(self, region, r):
        a = self.args
        region.redis_port = free_port()
        region.replica_port = free_port()
        region.sentinel_port = free_port()
        logs = lambda n: open(os.path.join(self.workdir, f"r{r}-{n}.log"), "w")  # noqa: E731
        # The processes reach the nodes at the link's host end (a proxy on each node's own port):
        # the nodes announce that address, so the Sentinel names it. The host end stays
        # reachable from the host while the link is down, so a cut alone fails nothing over.
        region.announce = self.net.host_ip(r, "r")
        for port, extra in ((region.redis_port, []),
                            (region.replica_port, ["--replicaof", "127.0.0.1", str(region.redis_port)])):
            p = subprocess.Popen([a.redis_server, "--port", str(port), "--bind", "127.0.0.1",
                                  "--replica-announce-ip", region.announce,
                                  "--save", "", "--dir", self.workdir, "--appendonly", "no", *extra],
                                 stdout=logs(f"redis{port}"), stderr=subprocess.STDOUT)
            self.redis_procs.append(p)
        for port in (region.redis_port, region.replica_port):
            wait_for(lambda: sh(a.redis_cli, "-p", str(port), "ping", check=False).stdout.strip() == "PONG",
                     10, f"redis on {port}")
        conf = os.path.join(self.workdir, f"sentinel{r}.conf")
        with open(conf, "w") as f:
            f.write(f"port {region.sentinel_port}\nbind 127.0.0.1\n"
                    f"sentinel monitor m{r} {region.announce} {region.redis_port} 1\n"
                    f"sentinel down-after-milliseconds m{r} 1000\n"
                    f"sentinel failover-timeout m{r} 5000\n")
        self.redis_procs.append(subprocess.Popen([a.redis_server, conf, "--sentinel"], stdout=logs("sentinel"),
                                                 stderr=subprocess.STDOUT))
        wait_for(lambda: sh(a.redis_cli, "-p", str(region.sentinel_port), "ping",
                            check=False).stdout.strip() == "PONG", 10, "sentinel")

    def start_links(self, region, r):
        # The Sentinel and both Redis nodes sit behind the region's Redis link: each gets a proxy
        # on the link's host end, and the Sentinel announces the nodes by their proxy addresses.
        host = self.net.host_ip(r, "r")
        region.redis_proxies = {}
        for port in (region.redis_port, region.replica_port, region.sentinel_port):
            listen = (host, free_port() if not self.net.netns else port)
            region.redis_proxies[port] = Proxy(listen, ("127.0.0.1", port))
        region.db_proxy = Proxy((self.net.host_ip(r, "d"), free_port()), tuple_addr(self.args.mysql))
        if self.net.netns:
            region.redis_url = f"redis://{host}:{region.sentinel_port}"
        else:
            region.redis_url = f"redis://{host}:{region.redis_proxies[region.sentinel_port].sock.getsockname()[1]}"
            print("warning: in the loopback fallback the Sentinel announces unproxied nodes", file=sys.stderr)
        db_port = region.db_proxy.sock.getsockname()[1]
        region.db_url = f"mysql://root@{self.net.host_ip(r, 'd')}:{db_port}/{self.db}"

    def env(self, r):
        env = dict(os.environ)
        env["LD_PRELOAD"] = self.faketime
        env["FAKETIME"] = f"{self.offsets[r]:+g}"
        # Timers and deadlines run on the monotonic clock; only the wall clock disagrees.
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        env["FAKETIME_DONT_RESET"] = "1"
        return env

    def start_process(self, region, r, p):
        a = self.args
        grpc, http = region.grpc[p], region.http[p]
        log = open(os.path.join(self.workdir, f"r{r}-p{p}.log"), "a")
        proc = subprocess.Popen(
            self.net.exec_prefix(r) + [
                a.binary, "serve",
                "--config", self.config_path,
                "--region", f"r{r}",
                "--database-url", region.db_url,
                "--migrate",
                "--redis-url", region.redis_url,
                "--redis-sentinel-master", f"m{r}",
                # A prefix of the run's own: a port freed by a failover may be taken by another
                # run's Redis before this one restarts it, and its keys must not count here.
                "--redis-prefix", f"chaos{self.tag}:",
                "--grpc-addr", f"127.0.0.1:{grpc}",
                "--http-addr", f"127.0.0.1:{http}",
                "--debug-addr", f"127.0.0.1:{free_port()}",
                "--replay-interval", f"{a.replay_ms}ms",
                "--global-flush-interval", f"{a.interval_ms}ms",
                "--global-sync-interval", f"{a.interval_ms}ms",
                "--global-timeout", "1s",
                "--publish-floor", str(a.publish_floor),
                "--max-memory", f"{a.max_memory_mib}MiB",
                "--rlqs-assignment-ttl", f"{a.rlqs_ttl_s}s",
                "--log-level", "warn",
            ],
            stdout=log, stderr=subprocess.STDOUT, env=self.env(r))
        region.procs[p] = proc
        return proc

    def wait_ready(self, region, r, p):
        url = f"http://127.0.0.1:{region.http[p]}/healthz"

        def ready():
            if region.procs[p].poll() is not None:
                raise RuntimeError(f"r{r}-p{p} exited with {region.procs[p].returncode} "
                                   f"(log: {self.workdir}/r{r}-p{p}.log)")
            cmd = self.net.exec_prefix(r) + ["curl", "-sf", "-m", "1", url]
            return subprocess.run(cmd, capture_output=True).returncode == 0
        wait_for(ready, 60, f"r{r}-p{p} ready")

    def setup(self):
        a = self.args
        self.faketime = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
        n = a.regions
        self.offsets = [(-a.skew_s / 2 + a.skew_s * r / (n - 1)) if n > 1 else 0.0 for r in range(n)]
        mysql(a, f"DROP DATABASE IF EXISTS {self.db}; CREATE DATABASE {self.db}")
        self.config_path = self.config()
        self.net = Net(self.tag, n)
        for r in range(n):
            region = Region()
            region.procs = [None] * a.processes
            # Namespaces have their own loopback: the same ports serve in every region.
            region.grpc = [free_port() for _ in range(a.processes)]
            region.http = [free_port() for _ in range(a.processes)]
            self.start_redis(region, r)
            self.start_links(region, r)
            self.regions.append(region)
        for r, region in enumerate(self.regions):
            for p in range(a.processes):
                self.start_process(region, r, p)
        for r, region in enumerate(self.regions):
            for p in range(a.processes):
                self.wait_ready(region, r, p)
        threading.Thread(target=self.sample, daemon=True).start()
        for r in range(n):
            self.start_rlqs(r)

    # ---- RLQS load ----------------------------------------------------------------------
    def start_rlqs(self, r):
        """One simulated Envoy per region, on the region's first process, for the whole run:
        it reconnects whenever its stream ends, and prints a line per report and per stream
        ended, read here as they come."""
        a = self.args
        proc = subprocess.Popen(self.net.exec_prefix(r) + [
            a.rlqs_load, "--target", f"127.0.0.1:{self.regions[r].grpc[0]}",
            "--domain", "chaos", "--key", "quota", "--streams", "1", "--buckets", "1",
            "--rate", str(a.rlqs_rate), "--interval", f"{a.rlqs_interval_ms}ms",
            "--expired", "deny-all", "--duration", "24h", "--trace",
        ], stdout=subprocess.PIPE, stderr=open(os.path.join(self.workdir, f"r{r}-rlqs.log"), "w"), text=True)
        self.rlqs_procs.append(proc)
        events = self.rlqs_events.setdefault(r, [])

        def read():
            for line in proc.stdout:
                if line.startswith("{"):
                    event = json.loads(line)
                    if "event" in event:
                        events.append((time.monotonic(), event))
        threading.Thread(target=read, daemon=True).start()

    def stop_rlqs(self):
        if not hasattr(self, "rlqs_alive"):
            # A client that exited before the end of the load is an invariant broken.
            self.rlqs_alive = [proc.poll() is None for proc in self.rlqs_procs]
        for proc in self.rlqs_procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.rlqs_procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()

    # ---- sampling -----------------------------------------------------------------------
    def sample(self):
        while not self.stop_sampling.is_set():
            for r, region in enumerate(self.regions):
                for p, proc in enumerate(region.procs):
                    try:
                        with open(f"/proc/{proc.pid}/status") as f:
                            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
                        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
                    except (OSError, StopIteration):
                        continue
                    cur = self.resources.setdefault((r, p), [0, 0])
                    cur[0], cur[1] = max(cur[0], rss), max(cur[1], fds)
                self.sample_redis(r, region)
            self.stop_sampling.wait(2)

    def sample_redis(self, r, region):
        """Keys expire three windows after their last write: the regional total is the sum of
        each key's greatest value seen, sampled more often than a window."""
        seen = self.redis_seen.setdefault(r, {})
        for port in (region.redis_port, region.replica_port):
            role = sh(self.args.redis_cli, "-p", str(port), "role", check=False).stdout.split()
            if not role or role[0] != "master":
                continue
            keys = sh(self.args.redis_cli, "-p", str(port), "--scan", "--pattern", f"chaos{self.tag}:*",
                      check=False).stdout.split()
            for key in keys:
                out = sh(self.args.redis_cli, "-p", str(port), "hgetall", key, check=False).stdout.split()
                hits = sum(int(v) for f, v in zip(out[::2], out[1::2]) if not f.startswith("r:") and v.isdigit())
                seen[key] = max(seen.get(key, 0), hits)

    # ---- load ---------------------------------------------------------------------------
    def loadtest(self, r, p, tenant, rate, seconds):
        if seconds < 0.5:
            return {"ok": 0, "over_limit": 0, "errors": 0, "max_us": 0}
        cmd = self.net.exec_prefix(r) + [
            self.args.loadtest, "--target", f"127.0.0.1:{self.regions[r].grpc[p]}",
            "--domain", "chaos", "--descriptor", f"tenant={tenant}",
            "--connections", "1", "--concurrency", "8", "--rate", str(rate),
            "--duration", f"{int(seconds * 1000)}ms", "--warmup", "0s", "--log-level", "warn",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
        if not lines:
            raise RuntimeError(f"loadtest r{r}-p{p} printed no report: {done.stderr.strip()}")
        return json.loads(lines[-1])

    def drive_process(self, r, p, segments, action, out, kill_at=None):
        """Load on one process: each segment (start, end) in seconds of the phase, with
        `action` run between the first and the second. With `kill_at`, the process is
        SIGKILLed that far into the first segment, under load: the first segment's errors are
        requests severed by the kill (counted apart), not answers."""
        a = self.args
        t0 = time.monotonic()
        total = {"hot": dict(ok=0, over_limit=0, errors=0, max_us=0, severed=0),
                 "light": dict(ok=0, over_limit=0, errors=0, max_us=0, severed=0)}
        if kill_at is not None:
            proc = self.regions[r].procs[p]
            threading.Timer(kill_at, lambda: proc.send_signal(signal.SIGKILL)).start()
        for i, (start, end) in enumerate(segments):
            if i == 1 and action:
                action()
            wait = t0 + start - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            seconds = t0 + end - time.monotonic()
            res = {}
            ts = [threading.Thread(target=lambda k, rt: res.__setitem__(k, self.loadtest(r, p, k, rt, seconds)),
                                   args=(k, rt)) for k, rt in (("hot", a.hot_rate), ("light", a.light_rate))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for k, rep in res.items():
                for f in ("ok", "over_limit", "errors"):
                    total[k]["severed" if f == "errors" and i == 0 and kill_at is not None else f] += rep[f]
                if not (i == 0 and kill_at is not None):
                    # A request severed by the kill waits for the loadtest's own timeout.
                    total[k]["max_us"] = max(total[k]["max_us"], rep["max_us"])
        out[(r, p)] = total

    # ---- faults -------------------------------------------------------------------------
    def fault(self, kind, r, p, w):
        """(segments for the victim process, the action between them, the background fault,
        its undo) of one fault."""
        region = self.regions[r]
        full = [(0, w)]
        if kind == "kill":
            at = self.rng.uniform(0.3, 0.6) * w

            def restart():
                # SIGKILLed under load at `at` (drive_process): answers given within the last
                # replay interval are not in Redis yet.
                region.procs[p].wait()
                self.start_process(region, r, p)
                self.wait_ready(region, r, p)
            return [(0, at + 0.5), (at + 0.6, w)], restart, None, None, {"kill_at": at}
        if kind == "stop":
            at = self.rng.uniform(0.2, 0.4) * w
            pause = self.args.stop_s

            def stop():
                region.procs[p].send_signal(signal.SIGSTOP)
                time.sleep(pause)
                region.procs[p].send_signal(signal.SIGCONT)
            return [(0, at), (at + pause + 0.2, w)], stop, None, None, {}
        if kind in ("cut-db", "cut-redis"):
            link = "d" if kind == "cut-db" else "r"
            proxies = [region.db_proxy] if link == "d" else list(region.redis_proxies.values())

            def cut():
                self.net.set_link(r, link, False)
                if not self.net.netns:
                    for px in proxies:
                        px.cut = True
                        px.drop_all()

            def heal():
                self.net.set_link(r, link, True)
                for px in proxies:
                    px.cut = False
            return full, None, cut, heal, {}
        if kind in ("lossy-db", "lossy-redis"):
            proxies = [region.db_proxy] if kind == "lossy-db" else list(region.redis_proxies.values())

            def lossy():
                for px in proxies:
                    px.delay_s, px.loss = self.args.delay_ms / 1000, self.args.loss
                    px.drop_all()

            def clear():
                for px in proxies:
                    px.delay_s, px.loss = 0.0, 0.0
            return full, None, lossy, clear, {}
        if kind == "failover":
            def cut_and_fail():
                self.net.set_link(r, "d", False)
                if not self.net.netns:
                    region.db_proxy.cut = True
                    region.db_proxy.drop_all()
                self.failover(r, region)

            def heal():
                self.net.set_link(r, "d", True)
                region.db_proxy.cut = False
            return full, None, cut_and_fail, heal, {}
        raise ValueError(kind)

    def failover(self, r, region):
        """SIGKILL the master; the Sentinel promotes the replica; the old master comes back as
        a replica of the new one (its port reused, so the proxies stay)."""
        cli = self.args.redis_cli
        master = sh(cli, "-p", str(region.sentinel_port), "sentinel", "get-master-addr-by-name",
                    f"m{r}").stdout.split()
        old = int(master[1])
        proc = proc_on_port(self.redis_procs, old)
        proc.kill()
        proc.wait()
        new = region.replica_port if old == region.redis_port else region.redis_port

        def promoted():
            m = sh(cli, "-p", str(region.sentinel_port), "sentinel", "get-master-addr-by-name",
                   f"m{r}", check=False).stdout.split()
            return len(m) == 2 and int(m[1]) == new
        wait_for(promoted, 30, f"r{r} Sentinel failover")
        p = subprocess.Popen([self.args.redis_server, "--port", str(old), "--bind", "127.0.0.1",
                              "--replica-announce-ip", region.announce, "--save", "", "--dir", self.workdir, "--appendonly", "no", "--replicaof", "127.0.0.1", str(new)],
                             stdout=open(os.path.join(self.workdir, f"r{r}-redis{old}.log"), "a"),
                             stderr=subprocess.STDOUT)
        self.redis_procs.append(p)

    # ---- the run ------------------------------------------------------------------------
    def phase(self, index, kind):
        a = self.args
        w = a.window_s
        r = self.rng.randrange(a.regions)
        p = self.rng.randrange(a.processes)
        segments, action, start, undo, info = ([(0, w)], None, None, None, {})
        if kind:
            segments, action, start, undo, info = self.fault(kind, r, p, w)
        kill_at = info.get("kill_at")
        out = {}
        threads = []
        for rr in range(a.regions):
            for pp in range(a.processes):
                victim = kind and (rr, pp) == (r, p)
                threads.append(threading.Thread(target=self.drive_process, args=(
                    rr, pp, segments if victim else [(0, w)], action if victim else None, out,
                    kill_at if victim else None)))
        fault_at = self.rng.uniform(0.1, 0.3) * w
        fault_for = self.rng.uniform(0.3, 0.5) * w
        started = time.monotonic()
        for t in threads:
            t.start()
        if start:
            time.sleep(fault_at)
            start()
            time.sleep(max(0.0, fault_for - (time.monotonic() - started - fault_at)))
            undo()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        row = {"phase": index, "kind": kind or "-", "region": r if kind else None,
               "process": p if kind else None, "elapsed_s": round(elapsed, 2), "out": out,
               "span": (started, started + elapsed)}
        row.update(info)
        return row

    def schedule(self):
        a = self.args
        kinds = a.kinds.split(",")
        # Every kind once per round, in a seeded order: a short run still sees each kind. A
        # quiet phase follows each fault that degrades a window, so that the run also has
        # windows no partition touched, right after one healed.
        plan = []
        while len([k for k in plan if k]) < a.phases:
            round_ = kinds[:]
            self.rng.shuffle(round_)
            for kind in round_:
                plan.append(kind)
                if kind not in ("kill", "stop"):
                    plan.append(None)
        faults = 0
        out = [None]
        for kind in plan:
            if kind:
                if faults == a.phases:
                    break
                faults += 1
            out.append(kind)
        return out

    def settle(self):
        self.stop_rlqs()
        for r in range(self.args.regions):
            self.net.set_link(r, "d", True)
            self.net.set_link(r, "r", True)
        time.sleep(self.args.settle_s)
        for r, region in enumerate(self.regions):
            self.sample_redis(r, region)

    def skew(self):
        """Each region's clock minus the database's, as a process of the region reads it, and
        what each process's `rls_global_clock_offset_seconds` says (the product's own
        measurement, refreshed by its sync)."""
        out = []
        for r in range(self.args.regions):
            db_now = float(mysql(self.args, "SELECT UNIX_TIMESTAMP(NOW(6))").strip())
            host_db = time.time()
            region_now = float(subprocess.run(self.net.exec_prefix(r) + ["date", "+%s.%N"], env=self.env(r),
                                              capture_output=True, text=True, check=True).stdout)
            host_region = time.time()
            gauges = [self.clock_gauge(r, p) for p in range(self.args.processes)]
            out.append((round(region_now - db_now - (host_region - host_db), 2), gauges))
        return out

    def clock_gauge(self, r, p):
        """A process's `rls_global_clock_offset_seconds`, or None when it could not be read."""
        url = f"http://127.0.0.1:{self.regions[r].http[p]}/metrics"
        done = subprocess.run(self.net.exec_prefix(r) + ["curl", "-sf", "-m", "2", url],
                              capture_output=True, text=True)
        for line in done.stdout.splitlines():
            if line.startswith("rls_global_clock_offset_seconds "):
                return float(line.split()[1])
        return None

    def teardown(self):
        self.stop_sampling.set()
        self.stop_rlqs()
        for region in self.regions:
            for proc in region.procs:
                if proc and proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
        for region in self.regions:
            for proc in region.procs:
                if proc:
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        for proc in self.redis_procs:
            if proc.poll() is None:
                proc.kill()
        if self.net:
            self.net.cleanup()
        if not self.args.keep:
            mysql(self.args, f"DROP DATABASE IF EXISTS {self.db}")


def tuple_addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def proc_on_port(procs, port):
    """The live redis-server serving `port` (the Sentinel has no --port argument)."""
    for p in procs:
        if p.poll() is None and "--port" in p.args and p.args[p.args.index("--port") + 1] == str(port):
            return p
    raise RuntimeError(f"no redis-server on port {port}")


def wait_for(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {seconds} s")


def rlqs_server_hits(rows):
    """The phases whose fault SIGKILLed or SIGSTOPped an RLQS stream's server (each region's
    first process)."""
    return [row for row in rows if row["kind"] in ("kill", "stop") and row["process"] == 0]


def rlqs_phase(rows, t):
    """The phase running at monotonic time `t`; the few milliseconds between two phases count
    on the first."""
    found = None
    for row in rows:
        if row["span"][0] <= t:
            found = row["phase"]
    return found if rows and t < rows[-1]["span"][1] else None


def rlqs_errors(a, run, rows, checks):
    """No RLQS stream ended, or failed to open, but while its server was SIGKILLed or
    SIGSTOPped: in that phase, or the next (a restart can outlast its phase)."""
    hit = rlqs_server_hits(rows)
    explained, unexplained = 0, []
    for r, events in run.rlqs_events.items():
        for t, e in events:
            if e["event"] == "report":
                continue
            ph = rlqs_phase(rows, t)
            if any(row["region"] == r and ph in (row["phase"], row["phase"] + 1) for row in hit):
                explained += 1
            else:
                unexplained.append(f"r{r} phase {ph}: {e['event']} {e.get('detail', '')}".strip())
    reports = [sum(1 for _, e in run.rlqs_events.get(r, []) if e["event"] == "report")
               for r in range(a.regions)]
    alive = getattr(run, "rlqs_alive", [])
    gone = [f"r{r} client exited" for r, ok in enumerate(alive) if not ok]
    unexplained += gone + [f"r{r} never reported" for r, c in enumerate(reports) if c == 0]
    checks.append(("RLQS: no stream ended but by a SIGKILL/SIGSTOP of its server", not unexplained
                   and len(alive) == a.regions,
                   f"{sum(reports)} reports, {explained} ends explained by {len(hit)} such fault"
                   f"{'' if len(hit) == 1 else 's'}" + "".join("; " + u for u in unexplained[:5])))


def rlqs_windows(a, run, rows, checks, degraded, d, speedup, hit):
    """Over-admission per window of the RLQS limit, admitted as the clients reported it, held to
    the RLS v3 bounds with the delay grown by one reporting interval (a client admits on its
    assignment and the server sees it at the next report); a phase in which the RLQS server
    was SIGKILLed or SIGSTOPped, and the next, may add what the client admitted on its last
    assignment unseen until its time to live ran out, plus the reports a kill lost."""
    n = a.regions
    rho = a.rlqs_rate * n * a.window_s / a.rlqs_limit
    dq = d + a.rlqs_interval_ms / 1000
    a.rlqs_bound = round(min(rho, 1 + n * a.publish_floor + rho * dq / (speedup * a.window_s)), 2)
    unseen = (a.rlqs_rate * a.rlqs_ttl_s + 2 * a.rlqs_rate * a.rlqs_interval_ms / 1000) / a.rlqs_limit
    per_phase = {}
    for r, events in run.rlqs_events.items():
        for t, e in events:
            if e["event"] == "report":
                ph = rlqs_phase(rows, t - a.rlqs_interval_ms / 2000)
                per_phase[ph] = per_phase.get(ph, 0) + e["allowed"]
    blind = {ph for row in hit for ph in (row["phase"], row["phase"] + 1)}
    worst = [0.0, 0.0]
    broken = [[], []]
    for row in rows[1:]:
        ratio = per_phase.get(row["phase"], 0) / a.rlqs_limit
        sides = degraded.get(row["phase"])
        bound = a.rlqs_bound * (sides or 1) + (unseen if row["phase"] in blind else 0)
        i = 1 if sides else 0
        worst[i] = max(worst[i], ratio)
        if ratio > bound:
            broken[i].append(f"phase {row['phase']} ({row['kind']}) {ratio:.2f} > {bound:.2f}")
    checks.append((f"RLQS: windows no partition touched ≤ {a.rlqs_bound} × limit "
                   f"(+ {unseen:.2f} with its server killed or stopped)", not broken[0],
                   f"worst {worst[0]:.2f}" + "".join("; " + b for b in broken[0])))
    checks.append((f"RLQS: degraded windows ≤ {a.rlqs_bound} × limit × sides", not broken[1],
                   f"worst {worst[1]:.2f}" + "".join("; " + b for b in broken[1])))


def check(args, run, rows, db_counts, skew):
    """The invariants, one table row each; returns (table lines, broken)."""
    a = args
    n, m = a.regions, a.processes
    deadline_us = a.deadline_ms * 1000
    checks = []

    def add(name, ok, detail):
        checks.append((name, ok, detail))

    # 1. No gRPC error, no answer later than the deadline, in any phase.
    errors = sum(v[k]["errors"] for row in rows for v in row["out"].values() for k in v)
    late = max(v[k]["max_us"] for row in rows for v in row["out"].values() for k in v)
    per_kind = {}
    for row in rows:
        e = sum(v[k]["errors"] for v in row["out"].values() for k in v)
        mx = max(v[k]["max_us"] for v in row["out"].values() for k in v)
        pk = per_kind.setdefault(row["kind"], [0, 0, 0])
        pk[0] += 1
        pk[1] += e
        pk[2] = max(pk[2], mx)
    add("no gRPC error", errors == 0, f"{errors} errors")
    add(f"no answer later than {a.deadline_ms} ms", late <= deadline_us, f"slowest {late / 1000:.0f} ms")
    rlqs_errors(a, run, rows, checks)

    # 2. Counts: each region's Redis total and the database's rows equal what was accepted,
    # minus at most the SIGKILL bound of that region's kills.
    accepted = [0] * n
    for row in rows:
        for (r, _), v in row["out"].items():
            accepted[r] += v["hot"]["ok"] + v["light"]["ok"]
    kills = [0] * n
    severed = [0] * n
    for row in rows:
        for (r, _), v in row["out"].items():
            severed[r] += v["hot"]["severed"] + v["light"]["severed"]
    for row in rows:
        if row["kind"] == "kill":
            kills[row["region"]] += 1
    # RLQS: what the clients reported allowed counts on the same cells, so it is accepted too.
    # The RLQS stream's server (each region's first process) killed loses what it had not
    # replayed: the report it was replaying and one sent into the dying connection at most,
    # each one reporting interval of the client's rate.
    hit = rlqs_server_hits(rows)
    rlqs_reported = [sum(e["allowed"] for _, e in run.rlqs_events.get(r, []) if e["event"] == "report")
                     for r in range(n)]
    rlqs_kills = [sum(1 for row in hit if row["kind"] == "kill" and row["region"] == r) for r in range(n)]
    per_rlqs_kill = 2 * a.rlqs_rate * a.rlqs_interval_ms / 1000
    # A SIGKILL loses what the process accepted and had not replayed yet: at most
    # one replay interval of its rate, plus a batch in flight (one more interval).
    per_kill = (a.hot_rate + a.light_rate) * 2 * a.replay_ms / 1000
    for r in range(n):
        cells = run.redis_seen.get(r, {})
        redis_total = sum(cells.values())
        # A cell is written to the table once it reaches --publish-floor of its limit: the
        # cells below it stay regional by design.
        unpublished = sum(v for v in cells.values() if v < a.publish_floor * a.limit)
        db_total = db_counts.get(f"r{r}", 0)
        allowed = kills[r] * per_kill + rlqs_kills[r] * per_rlqs_kill
        total = accepted[r] + rlqs_reported[r]
        # A request severed by a kill may have been counted before its answer was lost.
        add(f"r{r}: Redis total = accepted (RLS v3 + RLQS) − ≤ SIGKILL bound (+ ≤ severed)",
            total - allowed <= redis_total <= total + severed[r],
            f"accepted {accepted[r]} + RLQS {rlqs_reported[r]}, Redis {redis_total}, severed {severed[r]}, "
            f"{kills[r]} kill{'' if kills[r] == 1 else 's'} × ≤ {per_kill:g}"
            f" + {rlqs_kills[r]} of the RLQS server × ≤ {per_rlqs_kill:g} = ≤ {allowed:g}")
        short = redis_total - unpublished - db_total
        add(f"r{r}: database rows = Redis total − cells under the publish floor",
            -unpublished <= short <= 0,
            f"database {db_total}, under the floor {unpublished}, short by {max(short, 0)}")

    # 3. Over-admission per window: ACCURACY.md's bound for this run's parameters,
    #    1 + R × φ + ρ × d / (s × D), with the clocks' spread added to the delay d: a region
    #    whose clock is behind counts another's cell of a window that much later.
    rho = a.hot_rate * m * n * a.window_s / a.limit
    d = 1.2 * 2 * a.interval_ms / 1000 + a.replay_ms / 1000 + a.db_lag_ms / 1000 + a.skew_s
    speedup = min(4, max(1, int(rho - 1))) if rho - 1 >= 2 else 1
    a.bound = round(min(rho, 1 + n * a.publish_floor + rho * d / (speedup * a.window_s)), 2)
    # Over-admission per window: the hot key's admitted ÷ limit per phase (phase 0 warms
    # up). A degraded phase is one with a partition, loss or a failover; each side of it
    # decides alone, so its bound is the clean bound × the sides. The phase after it is held to
    # the clean bound: what a side admitted meanwhile has reached the others by then. A phase with or just after a SIGKILL may also admit again
    # what the killed process had not replayed.
    degraded = {}
    for row in rows:
        if row["kind"] in ("cut-db", "cut-redis", "failover", "lossy-db", "lossy-redis"):
            sides = (m + n - 1) if row["kind"] in ("cut-redis", "lossy-redis") else min(n, 2)
            degraded[row["phase"]] = max(degraded.get(row["phase"], 1), sides)
    killed = {ph for row in rows if row["kind"] == "kill" for ph in (row["phase"], row["phase"] + 1)}
    worst_clean, worst_degraded, clean_broken, degraded_broken = 0.0, 0.0, [], []
    for row in rows[1:]:
        ratio = sum(v["hot"]["ok"] for v in row["out"].values()) / a.limit
        if row["phase"] in degraded:
            sides = degraded[row["phase"]]
            bound = a.bound * sides
            worst_degraded = max(worst_degraded, ratio)
            if ratio > bound:
                degraded_broken.append(f"phase {row['phase']} ({row['kind']}) {ratio:.2f} > {bound:.2f}")
        else:
            bound = a.bound + (per_kill / a.limit if row["phase"] in killed else 0)
            worst_clean = max(worst_clean, ratio)
            if ratio > bound:
                clean_broken.append(f"phase {row['phase']} ({row['kind']}) {ratio:.2f} > {bound:.2f}")
    add(f"windows no partition touched ≤ {a.bound} × limit (+ SIGKILL loss)", not clean_broken,
        f"worst {worst_clean:.2f}" + "".join("; " + b for b in clean_broken))
    add(f"degraded windows ≤ {a.bound} × limit × sides", not degraded_broken,
        f"worst {worst_degraded:.2f}" + "".join("; " + b for b in degraded_broken))
    rlqs_windows(a, run, rows, checks, degraded, d, speedup, hit)

    # 4. No false denial: the light client stays under the limit in total.
    light_denied = sum(v["light"]["over_limit"] for row in rows for v in row["out"].values())
    add("no false denial (a client under the limit)", light_denied == 0, f"{light_denied} denied")

    # 5. Clock skew against the database: the runner's reading beside each process's gauge.
    def gauge(g):
        return "none" if g is None else f"{g:+.2f}"
    # The product's gauge must agree with the runner's reading (both against the database's
    # clock; a quarter second covers the round trips and the gauge's age).
    agree = all(g is not None and abs(g - s) <= 0.25 for s, gauges in skew for g in gauges)
    add(f"clocks {a.skew_s:g} s apart vs the database: runner (each process's gauge, ± 0.25 s)", agree,
        ", ".join(f"r{r} {s:+.2f} s ({', '.join(gauge(g) for g in gauges)})"
                  for r, (s, gauges) in enumerate(skew)))

    # 6. Memory and open files.
    rss = max((v[0] for v in run.resources.values()), default=0)
    fds = max((v[1] for v in run.resources.values()), default=0)
    add(f"RSS ≤ --max-memory ({a.max_memory_mib} MiB) throughout", rss <= a.max_memory_mib * 1024,
        f"max {rss / 1024:.0f} MiB")
    add(f"open files ≤ {a.max_fds} throughout", fds <= a.max_fds, f"max {fds}")

    lines = ["| invariant | held | measured |", "|---|---|---|"]
    for name, ok, detail in checks:
        lines.append(f"| {name} | {'yes' if ok else '**NO**'} | {detail} |")
    lines.append("")
    lines.append("| fault | phases | gRPC errors | slowest answer |")
    lines.append("|---|---|---|---|")
    for kind, (count, e, mx) in sorted(per_kind.items()):
        lines.append(f"| {kind} | {count} | {e} | {mx / 1000:.0f} ms |")
    return lines, [c for c in checks if not c[1]]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--regions", type=int, default=2)
    p.add_argument("--processes", type=int, default=2, help="processes per region")
    p.add_argument("--phases", type=int, default=7, help="fault phases, one window each")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--window-s", type=int, default=6)
    p.add_argument("--limit", type=int, default=120, help="per window, for the hot key")
    p.add_argument("--hot-rate", type=int, default=15, help="requests/s per process on the hot key")
    p.add_argument("--light-rate", type=int, default=1, help="requests/s per process on the light key")
    p.add_argument("--rlqs-limit", type=int, default=120, help="per window, for the RLQS bucket")
    p.add_argument("--rlqs-rate", type=float, default=30,
                   help="requests/s each region's RLQS client offers its bucket")
    p.add_argument("--rlqs-interval-ms", type=int, default=1000, help="the RLQS clients' reporting interval")
    p.add_argument("--rlqs-ttl-s", type=int, default=4, help="the service's --rlqs-assignment-ttl")
    p.add_argument("--replay-ms", type=int, default=100)
    p.add_argument("--interval-ms", type=int, default=200, help="global flush and sync interval")
    p.add_argument("--stop-s", type=float, default=2.0, help="SIGSTOP length (past every deadline)")
    p.add_argument("--delay-ms", type=int, default=50)
    p.add_argument("--loss", type=float, default=0.01)
    p.add_argument("--skew-s", type=float, default=2.0, help="how far apart the first and last region's clocks are")
    p.add_argument("--deadline-ms", type=int, default=1000, help="the client's deadline")
    p.add_argument("--db-lag-ms", type=int, default=50, help="the database's lag, counted into the bound's delay")
    p.add_argument("--publish-floor", type=float, default=0.02)
    p.add_argument("--max-memory-mib", type=int, default=256)
    p.add_argument("--max-fds", type=int, default=256)
    p.add_argument("--settle-s", type=float,
                   help="how long the run settles after the load stops (default: two windows and "
                        "a second: the last window's cells are closed, their final totals read "
                        "back from Redis and published, when they expire one window after it)")
    p.add_argument("--mysql", default="127.0.0.1:3306")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "target/debug"))
    p.add_argument("--json", help="write the rows and the checks here")
    p.add_argument("--keep", action="store_true", help="keep the database")
    args = p.parse_args()
    if args.settle_s is None:
        args.settle_s = 2 * args.window_s + 1.0
    args.binary = os.path.join(args.bin_dir, "gcounter-rls")
    args.loadtest = os.path.join(args.bin_dir, "gcounter-loadtest")
    args.rlqs_load = os.path.join(args.bin_dir, "rlqs-load")
    missing = [t for t in (args.binary, args.loadtest, args.rlqs_load) if not os.access(t, os.X_OK)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: cargo build -p gcounter-rls -p gcounter-loadtest")
    tools = {"ip": "iproute2", "redis-server": "redis-server",
             "redis-cli": "redis-tools", "mysql": "mariadb-client", "curl": "curl"}
    for tool, pkg in tools.items():
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install {pkg}")
    if not any(os.path.exists(l) for l in FAKETIME_LIBS):
        sys.exit("libfaketime is missing: apt-get install faketime")
    if os.geteuid() != 0:
        print("warning: not root: network namespaces need root", file=sys.stderr)
    try:
        mysql(args, "SELECT 1")
    except subprocess.CalledProcessError as e:
        sys.exit(f"MariaDB does not answer at {args.mysql} (root, no password): {e.stderr.strip()}; "
                 "bash .ci/services.sh starts it")
    args.redis_server = shutil.which("redis-server")
    args.redis_cli = shutil.which("redis-cli")

    run = Run(args)
    t0 = time.monotonic()
    rows = []
    try:
        run.setup()
        print(f"seed {args.seed}: {args.regions} regions × {args.processes} processes, "
              f"{'network namespaces' if run.net.netns else 'loopback proxies'}, clocks "
              f"{', '.join(f'{o:+g} s' for o in run.offsets)}, logs in {run.workdir}", flush=True)
        for i, kind in enumerate(run.schedule()):
            row = run.phase(i, kind)
            rows.append(row)
            hot = sum(v["hot"]["ok"] for v in row["out"].values())
            err = sum(v[k]["errors"] for v in row["out"].values() for k in v)
            quota = sum(e["allowed"] for events in run.rlqs_events.values() for t, e in list(events)
                        if e["event"] == "report"
                        and rlqs_phase([row], t - args.rlqs_interval_ms / 2000) is not None)
            print(f"phase {i:3} {row['kind']:11} r{row['region']}-p{row['process']}  "
                  f"hot admitted {hot / args.limit:.2f} × limit, RLQS {quota / args.rlqs_limit:.2f} × "
                  f"limit, errors {err}, {row['elapsed_s']} s", flush=True)
        run.settle()
        run.stop_sampling.set()
        db = {}
        for line in mysql(args, "SELECT CAST(region AS CHAR), CAST(SUM(count) AS CHAR) "
                          "FROM ratelimit_window_counts GROUP BY region", db=run.db).splitlines():
            region, count = line.split("\t")
            db[region] = int(count)
        skew = run.skew()
    finally:
        run.teardown()
    lines, broken = check(args, run, rows, db, skew)
    kinds = {}
    for row in rows[1:]:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    print()
    print(f"seed {args.seed}, {time.monotonic() - t0:.0f} s, faults: "
          + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())))
    print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "faults": kinds, "broken": [c[0] for c in broken],
                       "redis": {f"r{r}": seen for r, seen in run.redis_seen.items()},
                       "table": lines}, f)
    if broken:
        sys.exit("broken: " + "; ".join(f"{name} ({detail})" for name, _, detail in broken))


if __name__ == "__main__":
    main()
