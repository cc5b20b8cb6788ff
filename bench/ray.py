"""taso-gen on a local process pool (1 and 2 workers) against a 2-CPU Ray cluster
on the same machine, and whether they write the same rules.

    python bench/ray.py [--max-ops 3] [--repeat 1] [--out bench/results/ray.json]

Each run is the real command (`taso-gen --json ...`) in a fresh process, timed
whole ("wall": start-up, a private Ray cluster's start and stop included) and
as the generator reports it ("generate": enumeration plus pruning, once the
workers are there). Runs are interleaved (local 1, local 2, Ray 2, then again)
so that a drift of the machine's speed hits all alike; the best of the repeats
is kept. The CPU seconds of all the run's processes are summed too: on a machine
that others share, wall times follow their load (recorded with each run), CPU
seconds much less. Figures are reported, never asserted. Needs the cluster
extra (Ray) and Linux (/proc).
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


def _session_cpu(sid: int, seen: dict[int, float]) -> None:
    """Record the CPU seconds (user + system) of each process of session `sid`:
    the command, its pool (forkserver children included) or its Ray instance."""
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            seen[int(d)] = max(seen.get(int(d), 0.0), (int(fields[11]) + int(fields[12])) / tick)


def run(name: str, max_ops: int, folder: Path) -> dict:
    out = folder / f"{name}.json"
    cmd = [GEN, "--max-ops", str(max_ops), "--output", str(out), "--json", *RUNS[name]]
    load = os.getloadavg()[0]
    cpu: dict[int, float] = {}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=folder, start_new_session=True)
    while p.poll() is None:  # sampled twice a second: a process that ends between
        _session_cpu(p.pid, cpu)  # two samples loses at most half a second
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    stdout, stderr = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{stderr[-2000:]}")
    rep = json.loads(stdout)
    return {"wall": round(wall, 2),
            "generate": round(rep["enumerate_seconds"] + rep["prune_seconds"], 2),
            "enumerate": round(rep["enumerate_seconds"], 2),
            "prune": round(rep["prune_seconds"], 2), "rules": rep["rules"],
            "round_seconds": [round(r["seconds"], 2) for r in rep["rounds"]],
            # CPU seconds of every process of the run (Linux /proc), and of the command
            "cpu": round(sum(cpu.values()), 1), "driver_cpu": round(cpu.get(p.pid, 0.0), 1),
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
        # the shipped set is this command's output at 3 operators (plus records)
        shipped = Path(__file__).resolve().parent.parent / "rules_db" / "generated.json"
        as_shipped = rules_of(folder / "ray_2.json") == rules_of(shipped) \
            if args.max_ops == 3 and shipped.exists() else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    best = {k: {m: min(r[m] for r in v) for m in ("wall", "generate", "cpu")}
            for k, v in runs.items()}
    res = {
        "what": f"taso-gen --max-ops {args.max_ops}, default operator set, seed 0",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}, Ray {ray_version}",
        "best": best,
        "ratio_ray2_to_local2": {m: round(best["ray_2"][m] / best["local_2"][m], 3)
                                 for m in ("wall", "generate", "cpu")},
        "speedup_local2_over_local1": {m: round(best["local_1"][m] / best["local_2"][m], 3)
                                       for m in ("wall", "generate")},
        "same_rules": same,
        "same_rules_as_rules_db_generated_json": as_shipped,
        "runs": runs,
    }
    print(json.dumps({k: res[k] for k in ("best", "ratio_ray2_to_local2",
                                          "speedup_local2_over_local1", "same_rules",
                                          "same_rules_as_rules_db_generated_json")},
                     indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
