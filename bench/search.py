"""Search benchmark: every model builder through the cost-based search.

    python bench/search.py [--small] [--budget N] [--models a,b] [--rules FILE ...]
                           [--cost-model analytic|ort|cupy] [--check] [--json OUT.json]

For each model: search seconds (cutting into pieces, the search core, joining;
folding weights into initializers afterwards is shown apart), CPU seconds of
the whole optimization, graphs
explored, cost before and after (by default the analytic model, which is
deterministic, so that two runs compare), rules applied, why the search
stopped (the most limited piece's reason), and the ratio of
our search time to Tensat's published figure for the model (Tensat, MLSys'21,
Table 3; TASO took 13.6 s to 1226 s on the same models). One run; figures vary
with the machine's load, so read ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from taso.optimizer.check import check_equivalence
from taso.optimizer.search import run_search
from taso.rules_db import default_rule_files

from taso.models import ALL

TENSAT_SECONDS = {"bert_base": 1.4, "resnext50": 0.7, "nasnet_a": 10.6, "inception_v3": 5.1,
                  "squeezenet": 0.3, "nasrnn": 0.5}


def bench_model(name: str, small: bool, budget: int, rules, check: bool,
                unverified: bool = False, cost_model: str = "analytic") -> dict:
    g = ALL[name](small=small)
    cpu0 = time.process_time()
    r = run_search(g, budget=budget, rules=rules, unverified=unverified, cost_model=cost_model)
    cpu = time.process_time() - cpu0
    row = {"model": name, "ops_before": g.num_ops(), "ops_after": r.graph.num_ops(),
           "cost_before": r.cost_before, "cost_after": r.cost_after,
           "speedup": r.cost_before / r.cost_after if r.cost_after else None,
           "explored": r.explored, "generated": r.generated, "pieces": r.pieces,
           "distinct_pieces": r.distinct_pieces, "search_seconds": r.search_seconds,
           "core_seconds": r.core_seconds, "fold_seconds": r.fold_seconds,
           "total_seconds": r.seconds, "cpu_seconds": cpu,
           "rules_applied": sum(r.rules_applied.values()), "rules": r.rules_applied,
           "stop_reason": getattr(r, "stop_reason", ""),  # (older reports have none)
           "tensat_seconds": TENSAT_SECONDS.get(name)}
    if row["tensat_seconds"]:
        row["vs_tensat"] = r.search_seconds / row["tensat_seconds"]
    if check:
        row["max_error"] = check_equivalence(g, r.graph)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="the builders' small variants")
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--models", default=",".join(ALL))
    p.add_argument("--rules", action="append", default=None,
                   help="rule set files (default: the proved rules of the shipped default sets)")
    p.add_argument("--unverified", action="store_true", help="unproved rules too")
    p.add_argument("--cost-model", default="analytic",
                   help="analytic (default: deterministic, so runs compare), ort or cupy")
    p.add_argument("--check", action="store_true", help="also run the onnxruntime check")
    p.add_argument("--json", default=None, help="write the rows to this file")
    args = p.parse_args(argv)
    rules = args.rules or default_rule_files()
    print(f"rules: {', '.join(str(r) for r in rules)}; budget {args.budget}; "
          f"{'small' if args.small else 'full-size'} models; cost model {args.cost_model}",
          file=sys.stderr)
    rows = []
    head = (f"{'model':<14}{'ops':>11}{'cost ms':>18}{'gain':>7}{'explored':>9}{'pieces':>8}"
            f"{'search s':>9}{'fold s':>8}{'cpu s':>7}{'rules':>6}{'/tensat':>8}  stopped")
    print(head)
    for name in args.models.split(","):
        row = bench_model(name, args.small, args.budget, rules, args.check, args.unverified,
                          args.cost_model)
        rows.append(row)
        ratio = f"{row['vs_tensat']:.2f}" if "vs_tensat" in row else "-"
        print(f"{name:<14}{row['ops_before']:>5}->{row['ops_after']:<5}"
              f"{row['cost_before']:>8.3f}->{row['cost_after']:<8.3f}{row['speedup']:>6.2f}x"
              f"{row['explored']:>9}{row['pieces']:>4}/{row['distinct_pieces']:<3}"
              f"{row['search_seconds']:>9.2f}{row['fold_seconds']:>8.2f}"
              f"{row['cpu_seconds']:>7.2f}{row['rules_applied']:>6}{ratio:>8}"
              f"  {row['stop_reason'] or '-'}"
              + (f"  err {row['max_error']:.1e}" if "max_error" in row else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
