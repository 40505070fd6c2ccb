"""The checker: each invariant of docs/reliability.md against what the run measured, one table
row each, with a stable id for the machine-readable summary."""

import bisect
import math
import re

from .bounds import losses
from .phases import DEGRADING

# Faults held to the database link's degraded bound; the others of DEGRADING to the Redis
# link's: a failover leaves the region without a master until the promotion.
DB_FAULTS = ("cut-db", "lossy-db")


def protocol(key):
    """Which load a Redis key counts: its identifier (the descriptor's values, before the
    window's length and number) is the RLQS bucket's `k0`, the `never_above` RLQS bucket's
    `c0` (what its token buckets took, `rlqs-capped`), or an RLS v3 tenant's."""
    if re.search(r":k0:\d+:\d+$", key):
        return "rlqs"
    return "rlqs-capped" if re.search(r":c0:\d+:\d+$", key) else "v3"


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


def least_effectives(spans, window_ms):
    """For each admission (sent, answered: ms, true time) of a sliding window, the least
    `effective` it can have had: the service decided it at an instant between the two, so it
    counts in its cell only the admissions certainly before it there (answered before it was
    sent), in the previous cell only those certainly in it, weighted at the latest instant it
    can have been decided; the smaller of its two cells when it straddles a boundary. The true
    `effective` is at least this, so one above the limit is an admission above the rule."""
    certain = {}
    for sent, answered in spans:
        if sent // window_ms == answered // window_ms:
            certain.setdefault(sent // window_ms, []).append(answered)
    for answers in certain.values():
        answers.sort()
    out = []
    for sent, answered in spans:
        least = None
        for cell in {sent // window_ms, answered // window_ms}:
            current = bisect.bisect_left(certain.get(cell, []), sent)
            previous = len(certain.get(cell - 1, []))
            elapsed = min(answered, (cell + 1) * window_ms - 1) - cell * window_ms
            effective = 1 + current + previous * (window_ms - elapsed) // window_ms
            least = effective if least is None else min(least, effective)
        out.append(((sent, answered), least))
    return out


def tallies(rows):
    for row in rows:
        for (r, p), v in row["out"].items():
            for k, t in v.items():
                yield row, r, p, k, t


def redis_recovery(a):
    """The windows after a Redis fault's own that it may still degrade: the fault ends within
    its window, and each process's circuit closes up to about 10 s later (redis.md)."""
    return math.ceil((a.window_s + 10) / a.window_s) - 1


def db_range(a, run):
    """Per region, the (least, most) its database rows may hold: its Redis total, but the
    cells under the publish floor, which may stay regional."""
    out = []
    for r in range(a.regions):
        history = run.redis_seen.get(r)
        cells = history.totals() if history else {}
        total = sum(cells.values())
        out.append((total - sum(v for v in cells.values() if v < a.publish_floor * a.limit), total))
    return out


class Checker:
    def __init__(self, a, run, rows, db_counts, skew, bounds):
        self.a, self.run, self.rows, self.db, self.skew, self.b = a, run, rows, db_counts, skew, bounds
        self.checks = []

    def add(self, cid, name, ok, detail):
        self.checks.append({"id": cid, "invariant": name, "held": bool(ok), "measured": detail})

    def answers(self):
        a = self.a
        errors = sum(t["errors"] for *_, t in tallies(self.rows))
        severed = sum(t["severed"] for *_, t in tallies(self.rows))
        self.add("grpc-errors", "no gRPC error (but requests a SIGKILL severed)", errors == 0,
                 f"{errors} errors; {severed} severed by kills")
        late = max((t["max_us"] for *_, t in tallies(self.rows)), default=0)
        stopped = max((t["max_us_stopped"] for *_, t in tallies(self.rows)), default=0)
        met = sum(t["met_stop"] for *_, t in tallies(self.rows))
        stop_limit = a.stop_s * 1e6 + a.deadline_ms * 1000
        self.add("late-answers",
                 f"no answer later than {a.deadline_ms} ms ({a.stop_s:g} s more for one that met a stopped process)",
                 late <= a.deadline_ms * 1000 and stopped <= stop_limit,
                 f"slowest {late / 1000:.0f} ms; {met} requests met a stopped process, slowest {stopped / 1000:.0f} ms")

    def rlqs_streams(self):
        a, run, rows = self.a, self.run, self.rows
        hit = rlqs_server_hits(rows)
        explained, unexplained = 0, []
        streams = list(run.rlqs_events.items()) + list(run.capped_rlqs_events.items())
        for r, events in streams:
            for t, e in events:
                if e["event"] == "report":
                    continue
                ph = rlqs_phase(rows, t)
                if any(row["region"] == r and ph in (row["phase"], row["phase"] + 1) for row in hit):
                    explained += 1
                else:
                    unexplained.append(f"r{r} phase {ph}: {e['event']} {e.get('detail', '')}".strip())
        reports = [(r, sum(1 for _, e in events if e["event"] == "report")) for r, events in streams]
        alive = getattr(run, "rlqs_alive", [])
        unexplained += [f"r{r} client exited" for r, ok in alive if not ok]
        unexplained += [f"r{r} never reported" for r, c in reports if c == 0]
        self.add("rlqs-streams", "RLQS: no stream ended but by a SIGKILL/SIGSTOP of its server",
                 not unexplained and len(alive) == 2 * a.regions and len(reports) == 2 * a.regions,
                 f"{sum(c for _, c in reports)} reports, {explained} ends explained by {len(hit)} such fault"
                 f"{'' if len(hit) == 1 else 's'}" + "".join("; " + u for u in unexplained[:5]))

    def totals(self):
        """Each region's Redis totals per protocol against what was accepted, exact but for
        the named allowance of each SIGKILL; the database's rows against Redis, exact."""
        a, run = self.a, self.run
        loss_v3, loss_rlqs = losses(a)
        findings = []
        for r in range(a.regions):
            history = run.redis_seen.get(r)
            cells = history.totals() if history else {}
            findings += [f"r{r} {f}" for f in (history.findings if history else [])]
            accepted = sum(t["ok"] for _, rr, _, _, t in tallies(self.rows) if rr == r)
            severed = sum(t["severed"] for _, rr, _, _, t in tallies(self.rows) if rr == r)
            kills = [row for row in self.rows if row["kind"] == "kill" and row["region"] == r]
            v3 = sum(v for k, v in cells.items() if protocol(k) == "v3")
            allowance = len(kills) * loss_v3
            named = "".join(f"; kill in phase {row['phase']} (r{r}-p{row['process']}) ≤ {loss_v3:g}"
                            for row in kills)
            self.add(f"redis-v3-r{r}",
                     f"r{r}: Redis = RLS v3 accepted, − ≤ 2·replay·rate per SIGKILL, + ≤ severed",
                     accepted - allowance <= v3 <= accepted + severed,
                     f"accepted {accepted}, Redis {v3}, severed {severed}" + (named or "; no kill: exact"))
            reported = sum(e["allowed"] for _, e in run.rlqs_events.get(r, []) if e["event"] == "report")
            server_kills = [row for row in kills if row["process"] == 0]
            quota = sum(v for k, v in cells.items() if protocol(k) == "rlqs")
            named = "".join(f"; kill of its server in phase {row['phase']} ≤ {loss_rlqs:g}" for row in server_kills)
            self.add(f"redis-rlqs-r{r}",
                     f"r{r}: Redis = RLQS reported allowed, − ≤ 2·rate·interval per SIGKILL of its server",
                     reported - len(server_kills) * loss_rlqs <= quota <= reported,
                     f"reported {reported}, Redis {quota}" + (named or "; no kill of its server: exact"))
            unpublished = sum(v for v in cells.values() if v < a.publish_floor * a.limit)
            total = sum(cells.values())
            db_total = self.db.get(f"r{r}", 0)
            # A cell under the floor may stay regional, or be published by the fast cadence
            # (another region counts it): it is the only tolerance.
            self.add(f"db-r{r}", f"r{r}: database rows = Redis total, but cells under the publish floor",
                     total - unpublished <= db_total <= total,
                     f"database {db_total}, Redis {total}, under the floor {unpublished}")
        self.add("redis-kept", "no Redis cell fell or vanished before its TTL between samples", not findings,
                 f"{sum(len(h.last) for h in run.redis_seen.values())} cells sampled"
                 + "".join("; " + f for f in findings[:5]) + (f"; {len(findings)} in all" if len(findings) > 5 else ""))

    def windows(self):
        """Admitted per phase (one window long, phase 0 warms up) against the bound of the
        phase's fault."""
        a, b, rows = self.a, self.b, self.rows
        killed = {ph for row in rows if row["kind"] == "kill" for ph in (row["phase"], row["phase"] + 1)}
        # A link fault degrades its window and the next ones: the flush backs off after a
        # database fault (the next window); a process's Redis circuit closes up to about 10 s
        # after Redis is back, more than a window after the fault's end (the next two).
        degraded = {}
        for row in rows:
            if row["kind"] in DEGRADING:
                side = "db" if row["kind"] in DB_FAULTS else "redis"
                after = 1 if side == "db" else redis_recovery(a)
                for ph in range(row["phase"], row["phase"] + after + 1):
                    if degraded.get(ph) != "redis":
                        degraded[ph] = side
        blind = {ph for row in rlqs_server_hits(rows) for ph in (row["phase"], row["phase"] + 1)}
        quota = {}
        for r, events in self.run.rlqs_events.items():
            for t, e in events:
                if e["event"] == "report":
                    ph = rlqs_phase(rows, t - a.rlqs_interval_ms / 2000)
                    quota[ph] = quota.get(ph, 0) + e["allowed"]
        results = {k: [0.0, []] for k in ("v3-clean", "v3-degraded", "rlqs-clean", "rlqs-degraded")}

        def hold(cid, ratio, bound, row):
            results[cid][0] = max(results[cid][0], ratio)
            if ratio > bound.value:
                results[cid][1].append(f"phase {row['phase']} ({row['kind']}) {ratio:.2f} > {bound.value:.2f}")
        for row in rows[1:]:
            hot = sum(v["hot"]["ok"] for v in row["out"].values()) / a.limit
            q = quota.get(row["phase"], 0) / a.rlqs_limit
            side = degraded.get(row["phase"])
            if side:
                hold("v3-degraded", hot, b[f"v3-degraded-{side}"], row)
                hold("rlqs-degraded", q, b[f"rlqs-degraded-{side}"], row)
            else:
                hold("v3-clean", hot, b["v3-kill" if row["phase"] in killed else "v3-clean"], row)
                hold("rlqs-clean", q, b["rlqs-blind" if row["phase"] in blind else "rlqs-clean"], row)
        names = {
            "v3-clean": f"RLS v3: windows no link fault touched ≤ {b['v3-clean'].value:.2f} × limit "
                        f"({b['v3-kill'].value:.2f} by a SIGKILL)",
            "v3-degraded": f"RLS v3: a link fault's windows (database: 2, Redis: {1 + redis_recovery(a)}) ≤ {b['v3-degraded-db'].value:.2f} (database) / "
                           f"{b['v3-degraded-redis'].value:.2f} (Redis) × limit",
            "rlqs-clean": f"RLQS: windows no link fault touched ≤ {b['rlqs-clean'].value:.2f} × limit "
                          f"({b['rlqs-blind'].value:.2f} with its server killed or stopped)",
            "rlqs-degraded": f"RLQS: a link fault's windows (database: 2, Redis: {1 + redis_recovery(a)}) ≤ {b['rlqs-degraded-db'].value:.2f} (database) / "
                             f"{b['rlqs-degraded-redis'].value:.2f} (Redis) × limit",
        }
        for cid, (worst, broken) in results.items():
            self.add(cid, names[cid], not broken, f"worst {worst:.2f}" + "".join("; " + x for x in broken))

    def judge_never_above(self, cid, name, spans, limit, window_ms, how):
        """One check of admissions (sent, answered: ms, true time) against the sliding rule of
        `limit` per `window_ms`, by the oracle of `least_effectives`: none above it, and the
        oracle came near the limit (a check that never does proves nothing)."""
        judged = least_effectives(spans, window_ms)
        above = sorted((span, e) for span, e in judged if e > limit)
        most = {}
        for (sent, _), e in judged:
            most[sent // window_ms] = max(most.get(sent // window_ms, 0), e)
        near = max(most.values(), default=0)
        self.add(cid, name, not above and near >= limit / 2,
                 f"{len(spans)} admitted in {len(most)} windows, {len(above)} above the rule; the "
                 f"oracle's least effective reached {near} of {limit}"
                 + "".join(f"; {how(span)}: ≥ {e}" for span, e in above[:3]))

    def never_above(self):
        """The `never_above` tenant: no admission above the sliding rule by true time, by the
        oracle of its clients' send and answer times."""
        a = self.a
        spans = [tuple(span) for *_, k, t in tallies(self.rows) if k == "capped" for span in t["spans"]]
        self.judge_never_above(
            "never-above", f"never_above tenant: no admission above the sliding rule of "
                           f"{a.capped_limit} a window (by its clients' send and answer times)",
            spans, a.capped_limit, a.window_s * 1000, lambda span: f"sent {span[0]} answered {span[1]}")

    def rlqs_never_above(self):
        """The `never_above` RLQS bucket: no request its clients admitted (each at a known
        instant of true time, on the token buckets they were sent) above the sliding rule,
        all regions together."""
        a = self.a
        admitted = [(t, t) for events in self.run.capped_rlqs_events.values() for _, e in events
                    if e["event"] == "report" for t in e.get("admitted_ms", [])]
        self.judge_never_above(
            "rlqs-never-above", f"never_above RLQS bucket: no request admitted above the sliding rule "
                                f"of {a.rlqs_capped_limit} per {a.rlqs_capped_window_s} s (by when its "
                                "clients admitted it)",
            admitted, a.rlqs_capped_limit, a.rlqs_capped_window_s * 1000, lambda span: f"at {span[0]}")

    def never_above_live(self):
        """The `never_above` tenant goes on admitting. Rights are taken per cell of each
        process's own clock (true time plus its region's offset), and its admissions are
        counted in those cells (by when each was answered): in steady over-demand the fleet
        spends most of the limit in each (all of it but what the clock margin refuses at the
        cells' edges). The rights a SIGKILLed process held count as spent until their cell
        ends and weigh in the next one (a sliding window), so from the second cell after the
        kill's the whole limit is there again. Every cell wholly under load, but the two from a kill's, admits more
        than half the limit: the demand is several times the limit, and a link fault or a
        stop strands only what its region or process holds. (A take that weighed the previous
        cell's rights in full would leave two cells in a row no more than the limit together.)"""
        a = self.a
        window_ms = a.window_s * 1000
        offsets_ms = [round(o * 1000) for o in self.run.offsets]
        # Each admission in the cell it was answered in: one that met a stopped process was
        # decided, and its right spent, once the process went on, perhaps a cell after it was
        # sent.
        cells = [(answered + offsets_ms[r]) // window_ms
                 for _, r, _, k, t in tallies(self.rows) if k == "capped" for _, answered in t["spans"]]
        per_cell = {}
        for cell in cells:
            per_cell[cell] = per_cell.get(cell, 0) + 1
        # The cells every process's clock spent wholly under load.
        start_ms, end_ms = (round(t * 1000) for t in (self.rows[0]["wall"][0], self.rows[-1]["wall"][1]))
        first = max(-(-(start_ms + o) // window_ms) for o in offsets_ms)
        last = min((end_ms + o) // window_ms for o in offsets_ms) - 1
        excused = set()
        for (r, _), kills in self.run.kills.items():
            for kill_s in kills:
                cell = (round(kill_s * 1000) + offsets_ms[r]) // window_ms
                excused.update((cell, cell + 1))
        checked = [c for c in range(first, last + 1) if c not in excused]
        starved = [(c, per_cell.get(c, 0)) for c in checked if per_cell.get(c, 0) <= a.capped_limit / 2]
        least = min((per_cell.get(c, 0) for c in checked), default=0)
        self.add("never-above-live",
                 "never_above tenant: more than half its limit admitted in every cell (each process's "
                 "clock) wholly under load but the two from a SIGKILL's (its rights are back by then)",
                 checked and not starved,
                 f"{len(checked)} cells checked, the fewest admitted {least} of {a.capped_limit}; per "
                 "cell (* excused): "
                 + ", ".join(f"{per_cell.get(c, 0)}{'' if c in checked else '*'}"
                             for c in range(first, last + 1))
                 + "".join(f"; cell {c}: {n}" for c, n in starved[:3]))

    def rest(self):
        a, run = self.a, self.run
        denied = sum(t["over_limit"] for _, _, _, k, t in tallies(self.rows) if k == "light")
        offered = a.light_rate * a.processes * a.regions * a.window_s / a.limit
        self.add("false-denial", f"no false denial (a tenant offered {offered:.2f} × its limit)",
                 denied == 0, f"{denied} denied")

        def gauge(g):
            return "none" if g is None else f"{g:+.2f}"
        # The product's gauge must agree with the runner's reading (both against the database's
        # clock; a quarter second covers the round trips and the gauge's age).
        agree = all(g is not None and abs(g - s) <= 0.25 for s, gauges in self.skew for g in gauges)
        self.add("clocks", f"clocks {a.skew_s:g} s apart vs the database: runner (each process's gauge, ± 0.25 s)",
                 agree, ", ".join(f"r{r} {s:+.2f} s ({', '.join(gauge(g) for g in gauges)})"
                                  for r, (s, gauges) in enumerate(self.skew)))
        rss = max((v[0] for v in run.resources.values()), default=0)
        fds = max((v[1] for v in run.resources.values()), default=0)
        self.add("rss", f"RSS ≤ --max-memory ({a.max_memory_mib} MiB) throughout", rss <= a.max_memory_mib * 1024,
                 f"max {rss / 1024:.0f} MiB")
        self.add("fds", f"open files ≤ {a.max_fds} throughout", fds <= a.max_fds, f"max {fds}")

    def table(self):
        lines = ["| invariant | held | measured |", "|---|---|---|"]
        for c in self.checks:
            lines.append(f"| {c['invariant']} | {'yes' if c['held'] else '**NO**'} | {c['measured']} |")
        per_kind = {}
        for row in self.rows:
            pk = per_kind.setdefault(row["kind"], [0, 0, 0, 0, 0])
            pk[0] += 1
            for v in row["out"].values():
                for t in v.values():
                    pk[1] += t["errors"]
                    pk[2] += t["severed"]
                    pk[3] += t["met_stop"]
                    pk[4] = max(pk[4], t["max_us"])
        lines += ["", "| fault | phases | gRPC errors | severed by a kill | met a stopped process | slowest answer |",
                  "|---|---|---|---|---|---|"]
        for kind, (count, e, sev, met, mx) in sorted(per_kind.items()):
            lines.append(f"| {kind} | {count} | {e} | {sev} | {met} | {mx / 1000:.0f} ms |")
        return lines


def check(a, run, rows, db_counts, skew, bounds):
    """The checks (dicts: id, invariant, held, measured) and the printed tables."""
    c = Checker(a, run, rows, db_counts, skew, bounds)
    c.answers()
    c.rlqs_streams()
    c.totals()
    c.windows()
    c.never_above()
    c.never_above_live()
    c.rlqs_never_above()
    c.rest()
    return c.checks, c.table()
