#!/usr/bin/env python3
"""The soak table of docs/reliability.md, one row per seed, from the JSON summaries that
`scripts/chaos.py --json` wrote:

    python3 scripts/chaos_soak_table.py soak-2.json soak-3.json
"""

import json
import re
import sys


def numbers(text):
    return [int(n) for n in re.findall(r"-?\d+", text)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = []
    totals = {}
    for path in sys.argv[1:]:
        with open(path) as f:
            s = json.load(f)
        checks = {c["id"]: c for c in s["checks"]}
        m = {k: c["measured"] for k, c in checks.items()}

        def worst(cid):
            return re.search(r"worst ([\d.]+)", m[cid]).group(1)
        regions = []
        for r in (0, 1):
            v3 = re.search(r"accepted (\d+), Redis (\d+), severed (\d+)", m[f"redis-v3-r{r}"]).groups()
            q = re.search(r"reported (\d+), Redis (\d+)", m[f"redis-rlqs-r{r}"]).groups()
            db = re.search(r"database (\d+), Redis (\d+), under the floor (\d+)", m[f"db-r{r}"]).groups()
            kills = m[f"redis-v3-r{r}"].count("kill in phase")
            regions.append(f"{v3[0]}, {v3[1]} ({v3[2]} severed); {q[0]}, {q[1]}; {db[0]} of {db[1]} "
                           f"(+ {db[2]}); {kills}")
        late = re.search(r"slowest (\d+) ms; (\d+) requests met a stopped process, slowest (\d+) ms",
                         m["late-answers"]).groups()
        rows.append("| " + " | ".join([
            str(s["seed"]), f"{s['seconds']} s", str(sum(v for k, v in s["phases"].items() if k != "-")),
            str(numbers(m["grpc-errors"])[0]), f"{late[0]} ms", f"{late[1]} ({late[2]} ms)",
            *regions,
            f"{worst('v3-clean')} / {worst('v3-degraded')}", f"{worst('rlqs-clean')} / {worst('rlqs-degraded')}",
            "none" if checks["redis-kept"]["held"] else "**some**",
            str(numbers(m["false-denial"])[0]), m["clocks"], m["rss"].replace("max ", ""),
            m["fds"].replace("max ", ""), "all" if not s["broken"] else "**" + ", ".join(s["broken"]) + "**",
        ]) + " |")
        for k, v in s["phases"].items():
            totals[k] = totals.get(k, 0) + v
    print("| seed | time | faults | gRPC errors | slowest answer | met a stopped process (slowest) "
          "| r0: RLS v3 accepted, Redis; RLQS reported, Redis; database of Redis (+ under the floor); kills "
          "| r1: the same | worst RLS v3 window, clean / degraded | worst RLQS window, clean / degraded "
          "| cells fallen or gone | false denials | clocks: runner (gauges) | max RSS | max open files | held |")
    print("|" + "---|" * 16)
    print("\n".join(rows))
    print()
    print("Phases in all: " + ", ".join(f"{'quiet' if k == '-' else k} {v}" for k, v in sorted(totals.items())))


if __name__ == "__main__":
    main()
