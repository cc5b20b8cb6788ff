"""Benchmark taso-verify: TASO's shipped rules and the default generated set.

    python bench/verifier.py [--timeout 10] [--workers 2] [--generated rules_db/generated.json]

Reports, per rule set, the rules, proved/refuted/unknown counts, wall seconds,
summed solver seconds and the slowest rule, from one run. TASO's own verifier
takes about ten minutes for its ~700 generated rules and hangs on four of the
133 shipped ones; compare against that, not against a fixed threshold.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from taso.rules_db import SHIPPED, load
from taso.verifier.run import verify_rules


def bench(path: Path, timeout: float, workers: int) -> dict:
    rules = load(path).rules
    start = time.perf_counter()
    recs = verify_rules(rules, timeout, workers)
    wall = time.perf_counter() - start
    counts = {k: sum(r["status"] == k for r in recs) for k in ("proved", "refuted", "unknown")}
    secs = [r["seconds"] or timeout for r in recs]
    slow = max(range(len(recs)), key=lambda i: secs[i]) if recs else None
    return {"set": path.name, "rules": len(rules), **counts, "wall_seconds": round(wall, 2),
            "solver_seconds": round(sum(secs), 2),
            "slowest": None if slow is None else [rules[slow].id, secs[slow]],
            "unknown_ids": [r.id for r, rec in zip(rules, recs) if rec["status"] == "unknown"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--generated", default=str(SHIPPED / "generated.json"))
    args = ap.parse_args()
    sets = [SHIPPED / "reference" / "graph_subst.pb", Path(args.generated)]
    rows = []
    for p in sets:
        if not p.exists():
            print(f"{p}: not found (run taso-gen to write it)")
            continue
        rows.append(bench(p, args.timeout, args.workers))
    print(f"{'rule set':<28}{'rules':>7}{'proved':>8}{'refuted':>9}{'unknown':>9}"
          f"{'wall s':>9}{'solver s':>10}  slowest")
    for r in rows:
        print(f"{Path(r['set']).name:<28}{r['rules']:>7}{r['proved']:>8}{r['refuted']:>9}"
              f"{r['unknown']:>9}{r['wall_seconds']:>9.1f}{r['solver_seconds']:>10.1f}  "
              f"{r['slowest']}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
