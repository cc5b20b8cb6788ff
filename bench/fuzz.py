"""Differential fuzzing: random valid ONNX models (taso.fuzz) through the API
and taso-opt, each result compared with the original in onnxruntime by the
harness itself.

    python bench/fuzz.py [--count 1000] [--seed 0] [--cost-models analytic,ort]
                         [--cli-every 1] [--ort-every 10] [--keep DIR] [--budget 50]

Each model runs through the API with every cost model; every `--cli-every`-th
also through taso-opt's main; the ort cost model only on every `--ort-every`-th
model (its costs are measured on this CPU, cached in a file of the run's own).
The whole-model timing is off (`--no-timing`): it decides which graph is
kept, not whether it is right. Reports models tried and runs optimized,
refused cleanly (a one-line error), crashed (anything else) and wrong (a
result that differs); `--keep` saves the models that crashed or were wrong.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost-models", default="analytic,ort")
    p.add_argument("--cli-every", type=int, default=1)
    p.add_argument("--ort-every", type=int, default=10)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--keep", default=None, help="folder for models that crashed or were wrong")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import onnx

    from taso.fuzz import OUTCOMES, NumpyChooser, build_model, run_one

    cache = os.path.join(tempfile.mkdtemp(prefix="taso-fuzz-"), "costs.json")
    os.environ.setdefault("TASO_COST_CACHE", cache)
    counts = collections.Counter()
    details: dict[str, collections.Counter] = {o: collections.Counter() for o in OUTCOMES}
    start = time.time()
    for k in range(args.count):
        seed = args.seed + k
        model = build_model(NumpyChooser(seed))
        for cm in args.cost_models.split(","):
            if cm == "ort" and k % args.ort_every:
                continue
            vias = ["api"] + (["cli"] if k % args.cli_every == 0 else [])
            for via in vias:
                outcome, detail = run_one(model, via, cm, args.budget,
                                          cache=cache if cm == "ort" else None)
                counts[outcome] += 1
                counts[f"{via}/{cm}"] += 1
                if outcome != "optimized":
                    details[outcome][(detail.strip().splitlines() or [""])[-1][:160]] += 1
                if outcome in ("crashed", "wrong") and args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    onnx.save(model, os.path.join(args.keep, f"seed{seed}-{via}-{cm}.onnx"))
                    print(f"seed {seed} {via} {cm}: {outcome}: {detail}", file=sys.stderr)
        if (k + 1) % 100 == 0:
            print(f"{k + 1} models, {time.time() - start:.0f} s: "
                  + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES), file=sys.stderr)
    summary = {"models": args.count, "runs": sum(counts[o] for o in OUTCOMES),
               **{o: counts[o] for o in OUTCOMES},
               "runs_by": {k: v for k, v in counts.items() if "/" in k},
               "seconds": round(time.time() - start, 1),
               "details": {o: dict(details[o].most_common(10)) for o in OUTCOMES
                           if details[o]}}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"models tried {args.count}, runs {summary['runs']}: "
              + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES)
              + f" ({summary['seconds']} s)")
        for o, d in summary["details"].items():
            for text, n in d.items():
                print(f"  {o} x{n}: {text}")
    return 0 if counts["crashed"] == counts["wrong"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
