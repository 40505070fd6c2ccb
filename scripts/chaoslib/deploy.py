"""The deployment under test: Redis (master, replica, Sentinel) and the links per region, the
`gcounter-rls serve` processes, the RLQS clients, and what is sampled while it runs (Redis keys,
memory, open files)."""

import json
import os
import signal
import subprocess
import threading
import time

from .net import Net, Proxy, free_port, sh

FAKETIME_LIBS = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
]

# Defects planted in the service's code (debug builds only; crates/engine/src/plant.rs).
CODE_PLANTS = ("replay-short", "flush-short", "rlqs-report-ignored", "never-above-unshared",
               "never-above-previous-full", "rlqs-take-short")
# Defects planted in the deployment: regions that share no database; a failover onto a
# replica that missed every write.
DEPLOYMENT_PLANTS = ("shared-nothing", "failover-loses")

# Beyond each process's clock offset, for the libfaketime's own slack.
CLOCK_MARGIN_S = 0.05

# Each cell's regional total and time to live, read in one call: a key's hits are the sum of its
# process fields (`r:` fields are refunds). Rights of `never_above` counters are not cells.
SAMPLE_SCRIPT = """
local out, cursor = {}, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if not string.find(key, ':rights', 1, true) then
    local all, hits = redis.call('HGETALL', key), 0
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) ~= 'r:' then hits = hits + (tonumber(all[i + 1]) or 0) end
    end
    table.insert(out, key)
    table.insert(out, tostring(hits))
    table.insert(out, tostring(redis.call('PTTL', key)))
    end
  end
until cursor == '0'
return out
"""


def mysql(args, sql, db=None):
    host, port = args.mysql.split(":")
    cmd = ["mysql", "-uroot", f"-h{host}", f"-P{port}", "-N", "-B", "-e", sql]
    if db:
        cmd.insert(1, f"-D{db}")
    return sh(*cmd).stdout


def wait_for(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {seconds} s")


def tuple_addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def proc_on_port(procs, port):
    """The live redis-server serving `port` (the Sentinel has no --port argument)."""
    for p in procs:
        if p.poll() is None and "--port" in p.args and p.args[p.args.index("--port") + 1] == str(port):
            return p
    raise RuntimeError(f"no redis-server on port {port}")


def in_sync(cli, port):
    """Whether the replica on `port` holds its master's keys: its first sync is done."""
    info = sh(cli, "-p", str(port), "info", "replication", check=False).stdout
    return "master_link_status:up" in info and "master_sync_in_progress:0" in info


def eligible(cli, sentinel_port, name, port):
    """Whether the Sentinel would promote the replica on `port`: it sees it up, linked to its
    master, and with a priority above 0 (its view of the priority is refreshed by INFO, every
    10 s)."""
    lines = sh(cli, "-p", str(sentinel_port), "--raw", "sentinel", "replicas", name, check=False).stdout.split("\n")
    replicas = []
    for key, value in zip(lines[0::2], lines[1::2]):
        if key == "name":
            replicas.append({})
        if replicas:
            replicas[-1][key] = value
    for fields in replicas:
        if fields.get("port") == str(port):
            flags = fields.get("flags", "")
            return (fields.get("master-link-status") == "ok" and fields.get("slave-priority", "0") != "0"
                    and "down" not in flags and "disconnected" not in flags)
    return False


def acked(cli, port):
    """Whether a replica acknowledged every write the master on `port` took (`WAIT`)."""
    out = sh(cli, "-p", str(port), "wait", "1", "1000", check=False).stdout.strip()
    return out.isdigit() and int(out) >= 1


class Region:
    pass


class KeyHistory:
    """What the sampler saw of one region's cells: each key's last total, and every decrease or
    disappearance before its time to live ran out (a count Redis held and then lost)."""

    def __init__(self):
        self.last = {}  # key -> (hits, monotonic time read, ms to live then)
        self.findings = []

    def update(self, now, seen):
        for key, (hits, pttl) in seen.items():
            before = self.last.get(key)
            if before and hits < before[0]:
                self.findings.append(f"{short_key(key)} fell from {before[0]} to {hits}")
            self.last[key] = (hits, now, pttl)
        for key, (hits, t, pttl) in list(self.last.items()):
            # A second of slack for the time between reading the TTL and this sample.
            if key not in seen and pttl > 0 and now < t + pttl / 1000 - 1.0 and hits > 0:
                self.findings.append(f"{short_key(key)} ({hits}) vanished "
                                     f"{t + pttl / 1000 - now:.1f} s before its TTL")
                self.last[key] = (0, now, 0)

    def totals(self):
        return {key: v[0] for key, v in self.last.items()}


def short_key(key):
    """The cell's identifier and window number, for a table."""
    parts = key.split(":")
    return ":".join(parts[-3:]) if len(parts) > 3 else key


class Deployment:
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
                # Over-admission is money here: never above the limit.
                "  - key: tenant\n"
                "    value: capped\n"
                "    rate_limit:\n"
                "      unit: second\n"
                f"      unit_multiplier: {self.args.window_s}\n"
                f"      requests_per_unit: {self.args.capped_limit}\n"
                "      guarantee: never_above\n"
                # RLQS traffic only: its own counter, its own over-admission.
                "  - key: quota\n"
                "    rate_limit:\n"
                "      unit: second\n"
                f"      unit_multiplier: {self.args.window_s}\n"
                f"      requests_per_unit: {self.args.rlqs_limit}\n"
                # RLQS traffic on a limit of its own that is never above: token buckets taken
                # from its counter before they are sent.
                "  - key: quota_capped\n"
                "    rate_limit:\n"
                "      unit: second\n"
                f"      unit_multiplier: {self.args.rlqs_capped_window_s}\n"
                f"      requests_per_unit: {self.args.rlqs_capped_limit}\n"
                "      guarantee: never_above\n"
            )
        return path

    def database(self, r):
        """The region's database: one for all regions, or one each (`shared-nothing`)."""
        return f"{self.db}_r{r}" if self.args.plant == "shared-nothing" else self.db

    def start_redis(self, region, r):
        a = self.args
        region.redis_port = free_port()
        region.replica_port = free_port()
        region.sentinel_port = free_port()
        # The processes reach the nodes at the link's host end (a proxy on each node's own port):
        # the nodes announce that address, so the Sentinel names it. The host end stays
        # reachable from the host while the link is down, so a cut alone fails nothing over.
        region.announce = self.net.host_ip(r, "r")
        for port, extra in ((region.redis_port, []),
                            (region.replica_port, ["--replicaof", "127.0.0.1", str(region.redis_port)])):
            self.redis_procs.append(self.redis_node(region, r, port, extra))
        for port in (region.redis_port, region.replica_port):
            wait_for(lambda: sh(a.redis_cli, "-p", str(port), "ping", check=False).stdout.strip() == "PONG",
                     10, f"redis on {port}")

    def redis_node(self, region, r, port, extra):
        """A Redis node of region `r` on `port`, starting empty. Each node has its own RDB file
        (a replica writes the one its master streams it): a node restarted after a failover must
        not load another node's, let alone another region's, keys."""
        rdb = f"r{r}-{port}.rdb"
        try:
            os.remove(os.path.join(self.workdir, rdb))
        except FileNotFoundError:
            pass
        return subprocess.Popen([self.args.redis_server, "--port", str(port), "--bind", "127.0.0.1",
                                 "--replica-announce-ip", region.announce, "--save", "", "--dir", self.workdir,
                                 "--dbfilename", rdb, "--appendonly", "no", *extra],
                                stdout=open(os.path.join(self.workdir, f"r{r}-redis{port}.log"), "a"),
                                stderr=subprocess.STDOUT)

    def start_sentinel(self, region, r):
        """The region's Sentinel, once the links' proxies listen: it reaches the nodes at their
        proxy addresses, and a master it cannot reach at its start is one it tries to fail
        over, which holds back its next failover for two `failover-timeout`s."""
        a = self.args
        logs = lambda n: open(os.path.join(self.workdir, f"r{r}-{n}.log"), "w")  # noqa: E731
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
        db_port = region.db_proxy.sock.getsockname()[1]
        region.db_url = f"mysql://root@{self.net.host_ip(r, 'd')}:{db_port}/{self.database(r)}"
        self.start_sentinel(region, r)

    def env(self, r):
        env = dict(os.environ)
        env["LD_PRELOAD"] = self.faketime
        env["FAKETIME"] = f"{self.offsets[r]:+g}"
        # Timers and deadlines run on the monotonic clock; only the wall clock disagrees.
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        env["FAKETIME_DONT_RESET"] = "1"
        env.pop("GCOUNTER_PLANT", None)
        if self.args.plant in CODE_PLANTS:
            env["GCOUNTER_PLANT"] = self.args.plant
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
                "--clock-skew", f"{self.clock_skew_ms()}ms",
                "--log-level", "warn",
            ],
            stdout=log, stderr=subprocess.STDOUT, env=self.env(r))
        region.procs[p] = proc
        return proc

    def clock_skew_ms(self):
        """Every process's `--clock-skew`: the farthest any region's clock is from true time
        (the host's), with a margin."""
        return round((max(abs(o) for o in self.offsets) + CLOCK_MARGIN_S) * 1000)

    def wait_ready(self, region, r, p):
        url = f"http://127.0.0.1:{region.http[p]}/healthz"

        def ready():
            if region.procs[p].poll() is not None:
                raise RuntimeError(f"r{r}-p{p} exited with {region.procs[p].returncode} "
                                   f"(log: {self.workdir}/r{r}-p{p}.log)")
            cmd = self.net.exec_prefix(r) + ["curl", "-sf", "-m", "1", url]
            return subprocess.run(cmd, capture_output=True).returncode == 0
        wait_for(ready, 60, f"r{r}-p{p} ready")

    def plant_took(self):
        """With a defect planted in the code, whether every process said it carries it (a
        release build reads no GCOUNTER_PLANT)."""
        if self.args.plant not in CODE_PLANTS:
            return True
        for r, region in enumerate(self.regions):
            for p in range(len(region.procs)):
                with open(os.path.join(self.workdir, f"r{r}-p{p}.log"), errors="replace") as f:
                    if "planted defects active" not in f.read():
                        return False
        return True

    def setup(self):
        a = self.args
        self.faketime = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
        n = a.regions
        self.offsets = [(-a.skew_s / 2 + a.skew_s * r / (n - 1)) if n > 1 else 0.0 for r in range(n)]
        for db in sorted({self.database(r) for r in range(n)}):
            mysql(a, f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}")
        self.config_path = self.config()
        self.net = Net(self.tag, n, a.loopback)
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
        if not self.plant_took():
            raise RuntimeError(f"--plant {a.plant}: the processes did not report it; only a debug "
                               "build carries planted defects")
        threading.Thread(target=self.sample, daemon=True).start()
        for r in range(n):
            self.start_rlqs(r)

    # ---- RLQS load ----------------------------------------------------------------------
    def start_rlqs(self, r):
        """Two simulated Envoys per region, on the region's first process, for the whole run:
        one on the `quota` limit, one on the `never_above` `quota_capped` limit (both fallbacks
        `DENY_ALL`, as such a limit requires). Each reconnects whenever its stream ends, and
        prints a line per report and per stream ended, read here as they come."""
        a = self.args
        clients = (
            (self.rlqs_events, ["--key", "quota", "--streams", "1", "--rate", str(a.rlqs_rate)]),
            (self.capped_rlqs_events, ["--key", "quota_capped", "--value-prefix", "c", "--streams", "3",
                                       "--rate", str(a.rlqs_capped_rate), "--unassigned", "deny-all"]),
        )
        for name, (sink, extra) in zip(("rlqs", "rlqs-capped"), clients):
            proc = subprocess.Popen(self.net.exec_prefix(r) + [
                a.rlqs_load, "--target", f"127.0.0.1:{self.regions[r].grpc[0]}",
                "--domain", "chaos", "--buckets", "1",
                "--interval", f"{a.rlqs_interval_ms}ms",
                "--expired", "deny-all", "--duration", "24h", "--trace",
            ] + extra, stdout=subprocess.PIPE,
                stderr=open(os.path.join(self.workdir, f"r{r}-{name}.log"), "w"), text=True)
            events = sink.setdefault(r, [])
            self.rlqs_procs.append((r, proc, events))
            threading.Thread(target=self.read_rlqs, args=(proc, events), daemon=True).start()

    @staticmethod
    def read_rlqs(proc, events):
        for line in proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                if "event" in event:
                    events.append((time.monotonic(), event))

    def stop_rlqs(self):
        """End each client just after a report: the report it printed has then left, and what
        it admitted since is neither reported nor counted."""
        if not hasattr(self, "rlqs_alive"):
            # A client that exited before the end of the load is an invariant broken.
            self.rlqs_alive = [(r, proc.poll() is None) for r, proc, _ in self.rlqs_procs]
        for _, proc, events in self.rlqs_procs:
            if proc.poll() is not None:
                continue
            seen = len(events)
            deadline = time.monotonic() + 3 * self.args.rlqs_interval_ms / 1000
            while time.monotonic() < deadline and not any(
                    e["event"] == "report" for _, e in events[seen:]):
                time.sleep(0.02)
            time.sleep(0.2)
            proc.terminate()
        for _, proc, _ in self.rlqs_procs:
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
        """Each cell's regional total and time to live, from the region's master, more often
        than a window (keys expire three windows after their last write). A sample is taken
        only while exactly one node is master (not in the midst of a failover)."""
        with self.lock:
            masters = []
            for port in (region.redis_port, region.replica_port):
                role = sh(self.args.redis_cli, "-p", str(port), "role", check=False).stdout.split()
                if role and role[0] == "master":
                    masters.append(port)
            if len(masters) != 1:
                return
            out = sh(self.args.redis_cli, "-p", str(masters[0]), "--raw", "eval", SAMPLE_SCRIPT, "0",
                     f"chaos{self.tag}:*", check=False)
            if out.returncode != 0 or out.stdout.startswith("ERR"):
                return
            lines = out.stdout.splitlines()
            seen = {}
            for i in range(0, len(lines) - 2, 3):
                seen[lines[i]] = (int(lines[i + 1]), int(lines[i + 2]))
            self.redis_seen.setdefault(r, KeyHistory()).update(time.monotonic(), seen)

    # ---- the Redis failover ---------------------------------------------------------------
    def failover(self, r, region):
        """SIGKILL the master; the Sentinel promotes the replica; the old master comes back as
        a replica of the new one (its port reused, so the proxies stay). With the
        `failover-loses` plant the promoted node first loses every key, as a replica that
        missed every write would."""
        cli = self.args.redis_cli
        master = sh(cli, "-p", str(region.sentinel_port), "sentinel", "get-master-addr-by-name",
                    f"m{r}").stdout.split()
        old = int(master[1])
        # Read every cell just before the kill and just after the promotion: a count the new
        # master lacks shows before any process writes it again.
        self.sample_redis(r, region)
        # Every write the master took so far, the sampled ones included, reaches the replica
        # before the kill: the failover then loses only the writes of the last instant, which
        # the processes republish. A replica still behind would lose counts as the
        # `failover-loses` plant does: one restarted by the region's last failover whose first
        # sync is still under way (a master streams a new replica its keys only after
        # `repl-diskless-sync-delay`, 5 s, and the Sentinel promotes such a replica), or one
        # that lags (a loaded machine; replication goes through the link's proxy).
        new = region.replica_port if old == region.redis_port else region.redis_port
        wait_for(lambda: eligible(cli, region.sentinel_port, f"m{r}", new) and acked(cli, old), 30,
                 f"r{r}: the replica in step")
        proc = proc_on_port(self.redis_procs, old)
        proc.kill()
        proc.wait()

        def promoted():
            m = sh(cli, "-p", str(region.sentinel_port), "sentinel", "get-master-addr-by-name",
                   f"m{r}", check=False).stdout.split()
            return len(m) == 2 and int(m[1]) == new
        wait_for(promoted, 30, f"r{r} Sentinel failover")
        if self.args.plant == "failover-loses":
            sh(cli, "-p", str(new), "flushall")
        self.sample_redis(r, region)
        # The node comes back empty, and a Sentinel that sees its new master down for a moment
        # (a loaded machine: the probes go through the link's proxy) would promote it before its
        # first sync ends, losing every key: it may be promoted only once in step.
        self.redis_procs.append(self.redis_node(
            region, r, old, ["--replicaof", "127.0.0.1", str(new), "--replica-priority", "0"]))
        threading.Thread(target=self.admit_when_in_sync, args=(r, old), daemon=True).start()

    def admit_when_in_sync(self, r, port):
        """Let the Sentinel promote the restarted node on `port` once its first sync is done."""
        cli = self.args.redis_cli
        try:
            wait_for(lambda: in_sync(cli, port), 60, f"r{r}: the restarted node's first sync")
            # The Sentinel may be reconfiguring the node at that moment (it briefly turns
            # master, then replica of the new master again): a refused CONFIG SET is tried
            # again.
            wait_for(lambda: sh(cli, "-p", str(port), "config", "set", "replica-priority", "100",
                                check=False).returncode == 0,
                     10, f"r{r}: the restarted node made promotable")
        except (RuntimeError, subprocess.CalledProcessError) as e:
            self.failover_errors.append(f"r{r}: {e}")

    # ---- clocks -------------------------------------------------------------------------
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

    def db_counts(self):
        """Each region's rows in the global table, summed (its own database's, with
        `shared-nothing`)."""
        counts = {}
        for db in sorted({self.database(r) for r in range(self.args.regions)}):
            for line in mysql(self.args, "SELECT CAST(region AS CHAR), CAST(SUM(count) AS CHAR) "
                              "FROM ratelimit_window_counts GROUP BY region", db=db).splitlines():
                region, count = line.split("\t")
                counts[region] = counts.get(region, 0) + int(count)
        return counts

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
            for db in sorted({self.database(r) for r in range(self.args.regions)}):
                mysql(self.args, f"DROP DATABASE IF EXISTS {db}")
