"""What `taso-opt --report` adds to taso-opt's time: each model optimized with
and without the report, the two interleaved (ABAB...) in one run so that a
drift of this machine's speed hits both alike; the ratio of the medians.

    python bench/report_overhead.py [--models squeezenet,resnet50,nasnet_a]
                                    [--cost-model analytic] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(model: str, cost_model: str, out: Path, report: Path | None) -> float:
    cmd = [sys.executable, "-m", "taso.optimizer.cli", "--example", model, "-o", str(out),
           "--cost-model", cost_model, "-q"] + (["--report", str(report)] if report else [])
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet,resnet50,nasnet_a")
    ap.add_argument("--cost-model", default="analytic")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("| model | cost model | without --report (s) | with (s) | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out, rep = Path(tmp) / "o.onnx", Path(tmp) / "r.html"
        for model in args.models.split(","):
            run(model, args.cost_model, out, None)  # warm: caches, page cache
            plain, with_report = [], []
            for _ in range(args.repeats):
                plain.append(run(model, args.cost_model, out, None))
                with_report.append(run(model, args.cost_model, out, rep))
            a, b = statistics.median(plain), statistics.median(with_report)
            print(f"| {model} | {args.cost_model} | {a:.2f} | {b:.2f} | {b / a:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
