"""The bounds the checker holds each window to, derived from the run's flags by the formulas of
docs/reliability.md, each with the assumption it rests on. A bound at or above what is offered
cannot fail: the run refuses flags under which one is not below it by a margin."""

from dataclasses import dataclass

# A bound must stay this far below what is offered, as a fraction of it.
MARGIN = 0.10
# The flush and sync intervals' jitter (ACCURACY.md's `1 + jitter`).
JITTER = 0.2


@dataclass
class Bound:
    key: str
    name: str
    value: float  # × the limit
    offered: float  # × the limit
    formula: str
    assumption: str

    def as_json(self):
        return {"key": self.key, "name": self.name, "value": round(self.value, 3),
                "offered": round(self.offered, 3), "formula": self.formula, "assumption": self.assumption}


def speedup(rho, max_speedup=4, overload=2):
    """ACCURACY.md's `s`: ⌊ρ − 1⌋ between 1 and --global-contended-speedup once ρ − 1 ≥
    --global-contended-overload, else 1."""
    return min(max_speedup, max(1, int(rho - 1))) if rho - 1 >= overload else 1


def clean(rho, regions, floor, d, window_s):
    s = speedup(rho)
    return min(rho, 1 + regions * floor + rho * d / (s * window_s)), s


def sides_sum(sides, cap):
    """A window split into sides that each decide alone: each admits at most what it is
    offered and at most the clean bound."""
    return sum(min(side, cap) for side in sides)


def derive(a):
    """Every bound of the run, by key: `v3-clean`, `v3-kill`, `v3-degraded-db`,
    `v3-degraded-redis`, `rlqs-clean`, `rlqs-blind`, `rlqs-degraded-db`,
    `rlqs-degraded-redis`; and the per-kill losses `kill-v3` and `kill-rlqs` (requests)."""
    n, m, w = a.regions, a.processes, a.window_s
    out = {}
    # RLS v3: the hot key, offered by every process alike.
    per_proc = a.hot_rate * w / a.limit
    rho = per_proc * m * n
    d = (1 + JITTER) * 2 * a.interval_ms / 1000 + a.db_lag_ms / 1000 + a.replay_ms / 1000 + a.skew_s
    c, s = clean(rho, n, a.publish_floor, d, w)
    out["v3-clean"] = Bound(
        "v3-clean", "RLS v3, a window no fault touched", c, rho,
        f"min(ρ, 1 + R·φ + ρ·d/(s·D)) = min({rho:g}, 1 + {n}·{a.publish_floor:g} + {rho:g}·{d:.2f}/"
        f"({s}·{w})) = {c:.2f}; d = {1 + JITTER:g}·(flush + sync) + db lag + replay + skew = {d:.2f} s",
        "a region sees another's count within d (the clocks' spread included): ACCURACY.md's bound")
    loss_hot = 2 * a.replay_ms / 1000 * a.hot_rate
    out["v3-kill"] = Bound(
        "v3-kill", "RLS v3, the window of a SIGKILL and the next", c + loss_hot / a.limit, rho,
        f"clean + 2·replay·rate/limit = {c:.2f} + 2·{a.replay_ms / 1000:g}·{a.hot_rate:g}/{a.limit} "
        f"= {c + loss_hot / a.limit:.2f}",
        "a killed process loses at most two replay intervals of its accepts, which the region "
        "then admits again")
    region = per_proc * m
    db = sides_sum([region, rho - region], c)
    out["v3-degraded-db"] = Bound(
        "v3-degraded-db", "RLS v3, a database cut or loss", db, rho,
        f"Σ sides min(offered, clean) = min({region:g}, {c:.2f}) + min({rho - region:g}, {c:.2f}) = {db:.2f}",
        "two sides (the region, the others) each decide alone, each within the clean bound")
    redis = sides_sum([per_proc] * m + [rho - region], c)
    out["v3-degraded-redis"] = Bound(
        "v3-degraded-redis", "RLS v3, a Redis cut, loss or failover", redis, rho,
        f"Σ sides min(offered, clean) = {m}·min({per_proc:g}, {c:.2f}) + min({rho - region:g}, {c:.2f}) "
        f"= {redis:.2f}",
        "each of the region's processes decides alone, beside the other regions")
    # RLQS: one client per region, on its first process.
    q_region = a.rlqs_rate * w / a.rlqs_limit
    q_rho = q_region * n
    dq = d + a.rlqs_interval_ms / 1000
    qc, qs = clean(q_rho, n, a.publish_floor, dq, w)
    out["rlqs-clean"] = Bound(
        "rlqs-clean", "RLQS, a window no fault touched", qc, q_rho,
        f"min(ρ, 1 + R·φ + ρ·(d + report interval)/(s·D)) = min({q_rho:g}, 1 + {n}·{a.publish_floor:g} + "
        f"{q_rho:g}·{dq:.2f}/({qs}·{w})) = {qc:.2f}",
        "as RLS v3, the server seeing requests one reporting interval after the client admits them")
    unseen = (a.rlqs_rate * a.rlqs_ttl_s + 2 * a.rlqs_rate * a.rlqs_interval_ms / 1000) / a.rlqs_limit
    out["rlqs-blind"] = Bound(
        "rlqs-blind", "RLQS, the window its server is killed or stopped and the next", qc + unseen, q_rho,
        f"clean + (rate·ttl + 2·rate·interval)/limit = {qc:.2f} + ({a.rlqs_rate:g}·{a.rlqs_ttl_s:g} + "
        f"2·{a.rlqs_rate:g}·{a.rlqs_interval_ms / 1000:g})/{a.rlqs_limit} = {qc + unseen:.2f}",
        "the client admits on its last assignment until its time to live runs out (DENY_ALL "
        "after), and a kill loses at most two reports")
    qdb = sides_sum([q_region, q_rho - q_region], qc)
    out["rlqs-degraded-db"] = Bound(
        "rlqs-degraded-db", "RLQS, a database cut or loss", qdb, q_rho,
        f"min({q_region:g}, {qc:.2f}) + min({q_rho - q_region:g}, {qc:.2f}) = {qdb:.2f}",
        "two sides, each within the clean bound")
    # The region's RLQS load is all on its first process: cut from Redis, the other one adds
    # nothing to the bucket's counter.
    qredis = sides_sum([q_region, q_rho - q_region], qc)
    out["rlqs-degraded-redis"] = Bound(
        "rlqs-degraded-redis", "RLQS, a Redis cut, loss or failover", qredis, q_rho,
        f"min({q_region:g}, {qc:.2f}) + min({q_rho - q_region:g}, {qc:.2f}) = {qredis:.2f}",
        "the stream's server decides alone beside the other regions; the region's other process "
        "carries no RLQS load")
    return out


def losses(a):
    """What one SIGKILL may lose (requests): RLS v3 accepts not yet replayed, and RLQS
    reports not yet replayed when the killed process serves the stream."""
    v3 = 2 * a.replay_ms / 1000 * (a.hot_rate + a.light_rate)
    rlqs = 2 * a.rlqs_rate * a.rlqs_interval_ms / 1000
    return v3, rlqs


def too_loose(bounds):
    """The bounds that are not below what is offered by MARGIN: checks that could not fail."""
    return [b for b in bounds.values() if b.value > b.offered * (1 - MARGIN)]
