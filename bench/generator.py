"""Benchmark of taso-gen: graphs enumerated per second, time per round, rules per
pruning stage, and coverage of TASO's shipped rule set.

    python bench/generator.py [--max-ops 3] [--workers 2] [--write rules_db/generated.json]
                              [--json bench/results/generator.json] [--spill-dir DIR] [--verify]
                              [--from-spill DIR]

Figures are from one run on this machine; they are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from taso.generator.cli import Progress, summary
from taso.generator.family import GenConfig
from taso.generator.generate import generate, prune_spilled
from taso.rules_db import TASO_REFERENCE, load
from taso.rules_db.coverage import coverage_report
from taso.verifier.cli import summary as verify_summary
from taso.verifier.run import apply_records, verify_rules

from taso.cli import StatusLine

RAY = Path(__file__).resolve().parent / "results" / "ray.json"


def projection(seconds: float) -> dict:
    """Seconds on k workers, by Amdahl's law fitted to the local pool's measured
    1- and 2-worker times at 3 operators (bench/results/ray.json): the serial
    share there (the driver: dedup of graphs, class store, merging) taken to
    hold at this size too, scaled to this run's time on 2 workers."""
    best = json.loads(RAY.read_text())["best"]
    t1, t2 = best["local_1"]["generate"], best["local_2"]["generate"]
    serial = (2 * t2 - t1) / t1  # t(k) = t1 * (serial + (1 - serial) / k)
    one = seconds / (serial + (1 - serial) / 2)
    return {"serial_share": round(serial, 3), "from": "bench/results/ray.json local_1, local_2",
            "seconds": {k: round(one * (serial + (1 - serial) / k)) for k in (1, 2, 4, 8, 16, 64)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spill-dir", default=None,
                    help="bucket files of enumerated graphs (default: temporary folder from 4)")
    ap.add_argument("--write", default=None, help="also save the generated rule set here")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    ap.add_argument("--verify", action="store_true",
                    help="also prove every rule (taso-verify, --workers processes) and write "
                         "the records with the set")
    ap.add_argument("--from-spill", default=None, metavar="DIR",
                    help="only prune the kept bucket files of an enumeration of these "
                         "settings (a run cut short while pruning); no round figures")
    ap.add_argument("--checkpoint", default=None, metavar="DIR",
                    help="with --from-spill: keep each bucket's pruning here, and go on "
                         "from what is kept (a prune cut short)")
    args = ap.parse_args()
    cfg = GenConfig(max_ops=args.max_ops, seed=args.seed)
    t0 = time.perf_counter()
    shown = Progress(cfg.max_ops, StatusLine(plain_interval=60))
    if args.from_spill:
        rules, rep = prune_spilled(cfg, args.from_spill, args.workers, shown.pruning,
                                   args.checkpoint)
    else:
        rules, rep = generate(cfg, workers=args.workers, spill_dir=args.spill_dir,
                              progress=shown, prune_progress=shown.pruning)
    total = time.perf_counter() - t0
    verified = None
    if args.verify:
        t1 = time.perf_counter()
        apply_records(rules.rules, verify_rules(rules.rules, 10.0, args.workers or 2))
        verified = verify_summary(rules.rules, time.perf_counter() - t1)
        print(f"verified: {verified['proved']} proved, {verified['refuted']} refuted, "
              f"{verified['unknown']} unknown in {verified['wall_seconds']:.0f}s")
    if args.write:
        rules.save(args.write)
    print(summary(rep, len(rules)))
    t1 = time.perf_counter()
    cov = coverage_report(rules, load(TASO_REFERENCE))
    t_cov = time.perf_counter() - t1
    rate = rep.graphs / rep.enumerate_seconds if rep.enumerate_seconds else None
    print(f"\ngeneration total {total:.1f}s"
          + (f"; graphs/s {rate:.0f}" if rate else " (pruning only: no rounds)"))
    print(f"coverage of TASO's graph_subst.pb: {cov.found}/{cov.total} "
          f"({100 * cov.found / cov.total:.1f}%): {len(cov.direct)} equal, "
          f"{len(cov.composed)} composed ({t_cov:.1f}s)")
    print("composed:", ", ".join(f"{k} = {'+'.join(v)}" for k, v in cov.composed.items()))
    print("missing:", ", ".join(cov.missing) or "none")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"max_ops": cfg.max_ops, "rules": len(rules), "seconds": total,
                       "graphs": rep.graphs,
                       "graphs_per_second": rate,
                       "rounds": [vars(r) for r in rep.rounds],
                       "stages": dict(rep.stages.rows()),
                       "verified": verified,
                       "projection": None if args.from_spill else projection(total),
                       "coverage": {"found": cov.found, "total": cov.total,
                                    "direct": cov.direct, "composed": cov.composed,
                                    "missing": cov.missing}}, f, indent=1)


if __name__ == "__main__":
    main()
