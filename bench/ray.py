"""taso-gen on a local process pool (1 and 2 workers) against a 2-CPU Ray cluster
on the same machine, and whether they write the same rules.

    python bench/ray.py [--max-ops 3] [--repeat 1] [--out bench/results/ray.json]

Each run is the real command (`taso-gen --json ...`) in a fresh process, timed
whole ("wall": start-up, a private Ray cluster's start and stop included) and
as the generator reports it ("generate": enumeration plus pruning, once the
workers are there). Runs are interleaved (local 1, local 2, Ray 2, then again)
so that a drift of the machine's speed hits all alike; the best of the repeats
is kept. Figures are reported, never asserted. Needs the cluster extra (Ray).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GEN = shutil.which("taso-gen", path=str(Path(sys.executable).parent)) or "taso-gen"
RUNS = {"local_1": ["--workers", "1"], "local_2": ["--workers", "2"],
        "ray_2": ["--workers", "2", "--executor", "ray"]}


def run(name: str, max_ops: int, folder: Path) -> dict:
    out = folder / f"{name}.json"
    cmd = [GEN, "--max-ops", str(max_ops), "--output", str(out), "--json", *RUNS[name]]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    rep = json.loads(p.stdout)
    return {"wall": round(wall, 2),
            "generate": round(rep["enumerate_seconds"] + rep["prune_seconds"], 2),
            "enumerate": round(rep["enumerate_seconds"], 2),
            "prune": round(rep["prune_seconds"], 2), "rules": rep["rules"],
            "round_seconds": [round(r["seconds"], 2) for r in rep["rounds"]],
            # other work on the machine: 1-minute load average before and after
            "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)]}


def rules_of(path: Path) -> list:
    return [{k: v for k, v in r.items() if k != "verification"}
            for r in json.loads(path.read_text())["rules"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default="bench/results/ray.json")
    args = ap.parse_args()
    # (`import ray` here would import this file: it is named ray.py)
    ray_version = importlib.metadata.version("ray")  # fails here without the extra
    folder = Path(tempfile.mkdtemp(prefix="taso-bench-ray-"))
    runs: dict[str, list[dict]] = {k: [] for k in RUNS}
    try:
        for i in range(args.repeat):
            for name in RUNS:
                r = run(name, args.max_ops, folder)
                runs[name].append(r)
                print(f"[{i + 1}/{args.repeat}] {name:8} wall {r['wall']:7.1f}s  generate "
                      f"{r['generate']:7.1f}s  rules {r['rules']}", flush=True)
        same = rules_of(folder / "local_2.json") == rules_of(folder / "ray_2.json") == \
            rules_of(folder / "local_1.json")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    best = {k: {m: min(r[m] for r in v) for m in ("wall", "generate")} for k, v in runs.items()}
    res = {
        "what": f"taso-gen --max-ops {args.max_ops}, default operator set, seed 0",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}, Ray {ray_version}",
        "best": best,
        "ratio_ray2_to_local2": {m: round(best["ray_2"][m] / best["local_2"][m], 3)
                                 for m in ("wall", "generate")},
        "speedup_local2_over_local1": {m: round(best["local_1"][m] / best["local_2"][m], 3)
                                       for m in ("wall", "generate")},
        "same_rules": same,
        "runs": runs,
    }
    print(json.dumps({k: res[k] for k in ("best", "ratio_ray2_to_local2",
                                          "speedup_local2_over_local1", "same_rules")},
                     indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
