"""Do more rules help? Every suite model searched with each rule set.

    python bench/more_rules.py [--models bert_base,nasrnn] [--sets default,n4,transformer]
                               [--cost-cache FILE] [--no-measured] [--out bench/results]
                               [--name more_rules]

Sets: "default" (the shipped defaults), "n4" (4-operator generated rules in place of
the 3-operator ones), "transformer" (the defaults plus the transformer set). For
each model and set: the analytic model's predicted gain and search seconds
(deterministic, so sets compare), then the measured (ort) search: its predicted
gain, and the result timed against the original side by side (the search's own
verdict, with its interval). The rules that fired and are not in the default
set are listed by id. One run, on this machine; ratios, never limits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from taso.optimizer.cost.factory import make_cost_model
from taso.optimizer.search import run_search
from taso.rules_db import SHIPPED, RuleSet, default_rule_files, load
from taso.rules_db.canonical import canonical

import taso
from taso.models import ALL

RESULTS = Path(__file__).resolve().parent / "results"


def rule_sets() -> dict[str, list[Path]]:
    base = default_rule_files()
    return {"default": base,
            "n4": [*(p for p in base if p.name != "generated.json"),
                   SHIPPED / "generated4.json.gz"],
            "transformer": [*base, SHIPPED / "transformer.json"]}


def form(rule) -> tuple:
    """A rule up to renaming, with its variables' ranks: the transformer set
    holds TASO's 2-D rules again for 3-D operands, which is new."""
    key, order, _ = canonical(rule)
    return key, tuple(rule.vars[v].get("rank") for v in order)


def new_ids(sets: list[RuleSet], default: set) -> set[str]:
    """Ids of the rules not in the default set up to renaming (another set may
    hold a default rule under another id)."""
    return {r.id for rs in sets for r in rs.rules if form(r) not in default}


def search(name: str, rules: list[RuleSet], cost_model) -> dict[str, Any]:
    """The model as taso-opt --example reads it (exported and loaded back: GELU
    arrives as erf, div and mul), searched and checked against that export."""
    original = taso.export_onnx(ALL[name](batch_size=1))
    start = time.perf_counter()
    r = run_search(taso.load_onnx(original), rules=rules,
                   cost_model=cost_model, reference=original)
    seconds = time.perf_counter() - start
    timed = r.extra.get("timed") or {}
    ratio, low, high = (timed.get(k) for k in ("ratio", "low", "high"))
    return {"predicted": r.cost_before / r.cost_after if r.cost_after else None,
            "search_s": r.search_seconds, "total_s": seconds, "rules": r.rules_applied,
            "ops": [r.extra.get("ops_before"), r.graph.num_ops()],
            "verdict": timed.get("verdict"),
            # timed ratios are optimized over original time: speedups are 1/ratio
            "measured": 1 / ratio if ratio else None,
            "interval": [1 / high, 1 / low] if ratio else None}


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| model | set | rules in the files | analytic gain | search s | ort predicted "
           "| measured speedup [99% interval] | verdict | new rules fired |", "|---" * 9 + "|"]
    for r in rows:
        a, m = r["analytic"], r.get("ort") or {}
        iv = m.get("interval") or [None, None]
        meas = (f"×{m['measured']:.3f} [{iv[0]:.2f}, {iv[1]:.2f}]"
                if m.get("measured") and iv[0] else "—")
        new = ", ".join(f"{k}×{v}" for k, v in sorted(r["new_fired"].items())) or "none"
        pred = f"×{m['predicted']:.3f}" if m.get("predicted") else "—"
        out.append(f"| {r['model']} | {r['set']} | {r['n_rules']} | ×{a['predicted']:.3f} | "
                   f"{a['search_s']:.1f} | {pred} | {meas} | {m.get('verdict') or '—'} | "
                   f"{new} |")
    return "\n".join(out)


def write(out: Path, name: str, rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1))
    (out / f"{name}.md").write_text(
        "# Do more rules help? (bench/more_rules.py)\n\n" + markdown(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--sets", default="default,n4,transformer")
    p.add_argument("--cost-cache", default=None, help="ort cost cache (default: user cache)")
    p.add_argument("--no-measured", action="store_true", help="the analytic model only")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--name", default="more_rules",
                   help="file names under --out: NAME.json and NAME.md")
    args = p.parse_args(argv)
    sets = rule_sets()
    chosen = [s for s in args.sets.split(",") if s]
    missing = [f for s in chosen for f in sets.get(s, [Path(s)]) if not f.exists()]
    if missing or any(s not in sets for s in chosen):
        print(f"unknown set or missing file: {chosen} {missing}", file=sys.stderr)
        return 2
    models = [m for m in args.models.split(",") if m] or list(ALL)
    default = {form(r) for f in sets["default"] for r in load(f).rules}
    # each set read once (the 4-operator one takes seconds), searched as RuleSets
    loaded = {s: [load(f) for f in sets[s]] for s in chosen}
    new = {s: new_ids(loaded[s], default) for s in chosen}
    ort = None if args.no_measured else make_cost_model("ort", cache_path=args.cost_cache)
    rows = []
    for name in models:
        for s in chosen:
            n_rules = sum(len(rs.rules) for rs in loaded[s])
            row = {"model": name, "set": s, "n_rules": n_rules,
                   "analytic": search(name, loaded[s], "analytic")}
            if ort is not None:
                row["ort"] = search(name, loaded[s], ort)
                ort.save()
            fired = {**row["analytic"]["rules"], **(row.get("ort") or {}).get("rules", {})}
            row["new_fired"] = {k: v for k, v in fired.items() if k in new[s]}
            rows.append(row)
            print(markdown([row]).splitlines()[-1], flush=True)
            write(args.out, args.name, rows)  # after each row: a long run cut short keeps them
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
