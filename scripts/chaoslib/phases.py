"""The load and the faults: one phase per window, each with one fault drawn from the seed."""

import json
import signal
import subprocess
import threading
import time

KINDS = ["kill", "stop", "cut-db", "cut-redis", "lossy-db", "lossy-redis", "failover"]
# Faults that degrade a window: a side of a partition decides alone.
DEGRADING = ("cut-db", "cut-redis", "lossy-db", "lossy-redis", "failover")


def empty_tally():
    """One client's answers in a phase. `severed`: requests whose answer a SIGKILL took (after
    the kill, before the restart); `met_stop`: requests sent while their process was stopped,
    whose latency is held to the stop's length, not to the deadline."""
    return dict(ok=0, over_limit=0, errors=0, severed=0, max_us=0, met_stop=0, max_us_stopped=0,
                spans=[])


class Phases:
    # ---- load ---------------------------------------------------------------------------
    def loadtest(self, r, p, tenant, rate, seconds):
        if seconds < 0.5:
            return None
        # The `never_above` tenant's admissions are each placed in time for the oracle.
        spans = ["--ok-spans"] if tenant == "capped" else []
        cmd = self.net.exec_prefix(r) + [
            self.args.loadtest, "--target", f"127.0.0.1:{self.regions[r].grpc[p]}",
            "--domain", "chaos", "--descriptor", f"tenant={tenant}",
            "--connections", "1", "--concurrency", "8", "--rate", str(rate),
            "--duration", f"{int(seconds * 1000)}ms", "--warmup", "0s", "--log-level", "warn",
        ] + spans
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
        if not lines:
            raise RuntimeError(f"loadtest r{r}-p{p} printed no report: {done.stderr.strip()}")
        return json.loads(lines[-1])

    def drive_process(self, r, p, segments, action, out, timers):
        """Load on one process: each segment (start, end, kind) in seconds of the phase, with
        `action` run before the second (once the first has had all its answers). A segment's kind says how its answers count: `normal`;
        `kill` (the process is SIGKILLed in it: an error answered before the kill is an error,
        one after it a request the kill severed); `stopped` (the process is SIGSTOPped in it:
        its answers may wait for the SIGCONT). `timers` are (delay, function) started with the
        load."""
        a = self.args
        t0 = time.monotonic()
        total = {"hot": empty_tally(), "light": empty_tally(), "capped": empty_tally()}
        for delay, fn in timers:
            threading.Timer(delay, fn).start()
        for i, (start, end, kind) in enumerate(segments):
            wait = t0 + start - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if i == 1 and action:
                action()
            seconds = t0 + end - time.monotonic()
            res = {}
            ts = [threading.Thread(target=lambda k, rt: res.__setitem__(k, self.loadtest(r, p, k, rt, seconds)),
                                   args=(k, rt))
                  for k, rt in (("hot", a.hot_rate), ("light", a.light_rate), ("capped", a.capped_rate))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for k, rep in res.items():
                if rep is None:
                    continue
                tally = total[k]
                tally["ok"] += rep["ok"]
                tally["over_limit"] += rep["over_limit"]
                tally["spans"] += rep.get("ok_spans_ms", [])
                if kind == "kill":
                    killed_at = self.killed_at.get((r, p))
                    times = rep.get("error_times_ms", [])
                    before = sum(1 for t in times if killed_at is None or t / 1000 < killed_at)
                    tally["errors"] += before
                    tally["severed"] += rep["errors"] - before
                    # A severed request waits for the client's own timeout: its latency says
                    # nothing of the service. The answers before the kill are not told apart.
                elif kind == "stopped":
                    tally["errors"] += rep["errors"]
                    tally["met_stop"] += rep["ok"] + rep["over_limit"] + rep["errors"]
                    tally["max_us_stopped"] = max(tally["max_us_stopped"], rep["max_us"])
                else:
                    tally["errors"] += rep["errors"]
                    tally["max_us"] = max(tally["max_us"], rep["max_us"])
        out[(r, p)] = total

    # ---- faults -------------------------------------------------------------------------
    def fault(self, kind, r, p, w):
        """(the victim's segments, the action before its second, its timers, the background
        fault, its undo, what the row records) of one fault."""
        region = self.regions[r]
        full = [(0, w, "normal")]
        if kind == "kill":
            at = self.rng.uniform(0.3, 0.6) * w

            def kill():
                self.killed_at[(r, p)] = time.time()
                self.kills.setdefault((r, p), []).append(self.killed_at[(r, p)])
                region.procs[p].send_signal(signal.SIGKILL)

            def restart():
                # SIGKILLed under load at `at`: answers given within the last replay interval
                # are not in Redis yet.
                region.procs[p].wait()
                self.start_process(region, r, p)
                self.wait_ready(region, r, p)
            return ([(0, at + 0.5, "kill"), (at + 0.6, w, "normal")], restart, [(at, kill)],
                    None, None, {"kill_at": at})
        if kind == "stop":
            # The victim's load runs on through the stop: the requests it sends meanwhile wait in
            # the kernel for the SIGCONT. The stop starts once the segment before it has had all
            # its answers, however late a slow machine started it, so that no request of a
            # `normal` segment meets the stopped process.
            at = self.rng.uniform(0.2, 0.4) * w
            pause = self.args.stop_s

            def stop():
                region.procs[p].send_signal(signal.SIGSTOP)
                threading.Timer(pause, lambda: region.procs[p].send_signal(signal.SIGCONT)).start()
            segments = [(0, at, "normal"), (at, at + pause + 0.3, "stopped"), (at + pause + 0.3, w, "normal")]
            return segments, stop, [], None, None, {}
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
            return full, None, [], cut, heal, {}
        if kind in ("lossy-db", "lossy-redis"):
            proxies = [region.db_proxy] if kind == "lossy-db" else list(region.redis_proxies.values())

            def lossy():
                for px in proxies:
                    px.delay_s, px.loss = self.args.delay_ms / 1000, self.args.loss
                    px.drop_all()

            def clear():
                for px in proxies:
                    px.delay_s, px.loss = 0.0, 0.0
            return full, None, [], lossy, clear, {}
        if kind == "failover":
            def cut_and_fail():
                self.net.set_link(r, "d", False)
                if not self.net.netns:
                    region.db_proxy.cut = True
                    region.db_proxy.drop_all()
                # The promotion may take long on a loaded machine: the database link still
                # comes back on time (the phase heals it), and the phase waits for the failover.
                t = threading.Thread(target=self.failover_or_record, args=(r, region))
                t.start()
                self.failing_over.append(t)

            def heal():
                self.net.set_link(r, "d", True)
                region.db_proxy.cut = False
            return full, None, [], cut_and_fail, heal, {}
        raise ValueError(kind)

    def failover_or_record(self, r, region):
        """A failover on its own thread: what stops it fails the run when the phase ends,
        rather than leaving a phase that never failed over."""
        try:
            self.failover(r, region)
        except Exception as e:  # noqa: BLE001 - any of them ends the run, said
            self.failover_errors.append(f"r{r} failover: {e}")

    # ---- the run ------------------------------------------------------------------------
    def phase(self, index, kind):
        a = self.args
        w = a.window_s
        r = self.rng.randrange(a.regions)
        p = self.rng.randrange(a.processes)
        segments, action, timers, start, undo, info = ([(0, w, "normal")], None, [], None, None, {})
        if kind:
            segments, action, timers, start, undo, info = self.fault(kind, r, p, w)
        out = {}
        threads = []
        for rr in range(a.regions):
            for pp in range(a.processes):
                victim = kind and (rr, pp) == (r, p)
                threads.append(threading.Thread(target=self.drive_process, args=(
                    rr, pp, segments if victim else [(0, w, "normal")], action if victim else None, out,
                    timers if victim else [])))
        fault_at = self.rng.uniform(0.1, 0.3) * w
        fault_for = self.rng.uniform(0.3, 0.5) * w
        started, wall = time.monotonic(), time.time()
        for t in threads:
            t.start()
        if start:
            time.sleep(fault_at)
            start()
            time.sleep(max(0.0, fault_for - (time.monotonic() - started - fault_at)))
            undo()
        for t in threads:
            t.join()
        while self.failing_over:
            self.failing_over.pop().join()
        if self.failover_errors:
            raise RuntimeError("; ".join(self.failover_errors))
        elapsed = time.monotonic() - started
        row = {"phase": index, "kind": kind or "-", "region": r if kind else None,
               "process": p if kind else None, "elapsed_s": round(elapsed, 2), "out": out,
               "span": (started, started + elapsed), "wall": (wall, wall + elapsed)}
        row.update(info)
        return row

    def schedule(self):
        """Every kind once per round, in a seeded order: a short run still sees each kind. A
        quiet phase follows each fault, so that the windows right after one are checked
        against the clean bound, and no window carries two faults' allowances."""
        a = self.args
        kinds = a.kinds.split(",")
        plan = []
        while len(plan) < a.phases:
            round_ = kinds[:]
            self.rng.shuffle(round_)
            plan.extend(round_)
        out = [None]
        for kind in plan[:a.phases]:
            out += [kind, None]
        return out

    def settle(self):
        self.stop_rlqs()
        for r in range(self.args.regions):
            self.net.set_link(r, "d", True)
            self.net.set_link(r, "r", True)
        time.sleep(self.args.settle_s)
        for r, region in enumerate(self.regions):
            self.sample_redis(r, region)
