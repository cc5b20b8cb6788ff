"""Where the `ort` cost model's prediction misses: predicted milliseconds by kind
of operator against the kernel time onnxruntime's profiler records for the same
kinds inside the whole model.

    python bench/prediction_gap.py [--models nasnet_a,nasrnn] [--cost-cache PATH]

For each model it prices the graph (`priced_units`: a fused chain counts under
its head), profiles the exported model in one session (ORT_ENABLE_ALL, the
benchmark's threads) and groups both sides by kind: convolution, matrix product,
pooling, normalization, data movement, elementwise, and the layout changes
onnxruntime inserts (which the cost model reads from onnxruntime's optimized
graph of the whole model, `layout_ms`). A fused chain counts under its head on
the predicted side and under each kernel's kind on the profiled one (BERT's
residual add and layer normalization: "matmul" against "norm"), so compare
totals as well as rows. Every predicted figure is scaled to the device's speed
now, as `predict_latency` is (`speed_now`; about 1 for costs just measured).
"outside kernels" is a profiled run's time outside any kernel: the executor's
work per node, and the profiler's own, which also inflates small kernels (a
profiled NasRNN run took twice its plain latency). The whole-model latency is
timed without the profiler, as the benchmark does. Output: a markdown table per model and a JSON
record under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from taso.optimizer.cost.factory import make_cost_model

import taso
from taso.runtime import (
    VERSION,
    Runner,
    benchmark_options,
    clock_for,
    default_threads,
    median_ms,
    profile_events,
    session,
)

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("conv", "matmul", "pool", "norm", "movement", "elementwise", "layout")

# onnxruntime's kernel names (after its fusions) by kind; the rest is elementwise.
ORT_KINDS = {
    "conv": {"Conv", "FusedConv", "ConvTranspose"},
    "matmul": {"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "MatMulInteger"},
    "pool": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"},
    "norm": {"Softmax", "LayerNormalization", "SkipLayerNormalization", "BatchNormalization",
             "ReduceMean", "SimplifiedLayerNormalization"},
    "movement": {"Concat", "Split", "Slice", "Pad", "Transpose", "Reshape", "Identity",
                 "Flatten", "Squeeze", "Unsqueeze", "Gather", "Expand", "Tile"},
    "layout": {"ReorderInput", "ReorderOutput"},
}
def kind_of(name: str, table: dict[str, set[str]]) -> str:
    return next((k for k, names in table.items() if name in names), "elementwise")


def taso_kind(op: str) -> str:
    """A taso operator's kind, as the operator says (`Op.kind`)."""
    kind = taso.OPS[op].kind
    return kind if kind in KINDS else "elementwise"


def predicted_by_kind(cost_model, graph) -> Counter:
    out: Counter = Counter()
    for ids, ms in cost_model.priced_units(graph):
        head = graph.nodes[ids[0]]
        out[kind_of(head.a["onnx_type"], ORT_KINDS) if head.op == "opaque"
            else taso_kind(head.op)] += ms
    out["layout"] += getattr(cost_model, "layout_ms", lambda g: 0.0)(graph)
    return out


def profiled_by_kind(model_bytes: bytes, feeds: dict[str, Any], threads: int,
                     runs: int) -> tuple[Counter, float]:
    """Kernel milliseconds a run by kind, and a profiled run's milliseconds,
    averaged over `runs` profiled runs after one warm-up run."""
    events = profile_events(model_bytes, feeds, threads, runs)
    run_events = sorted((e for e in events if e.get("name") == "model_run"),
                        key=lambda e: e["ts"])[-runs:]
    start = run_events[0]["ts"]
    kernels: Counter = Counter()
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") \
                and e["ts"] >= start:
            kernels[kind_of(e.get("args", {}).get("op_name", ""), ORT_KINDS)] += e["dur"]
    per_run = Counter({k: v / runs / 1e3 for k, v in kernels.items()})
    return per_run, sum(e["dur"] for e in run_events) / runs / 1e3


def gap_model(name: str, builder, cost_model, threads: int, runs: int,
              small: bool = False) -> dict[str, Any]:
    graph = builder(small=True) if small else builder()
    data = taso.export_onnx(graph).SerializeToString()
    feeds = graph.random_inputs(seed=0)
    kernels, profiled = profiled_by_kind(data, feeds, threads, runs)
    sess = session(data, benchmark_options(threads))
    latency = median_ms(Runner(sess, feeds), warmup=3, repeats=runs, min_seconds=1.0,
                        clock=clock_for(threads))
    # every figure at the device's speed now, as the whole-model prediction
    predicted_ms = cost_model.predict_latency(graph)
    speed = getattr(cost_model, "last_speed", 1.0)
    predicted = predicted_by_kind(cost_model, graph)
    return {"model": name, "latency_ms": latency, "predicted_ms": predicted_ms, "speed": speed,
            "overhead_ms": cost_model.overhead_ms * speed,
            "predicted": {k: predicted.get(k, 0.0) * speed for k in KINDS},
            "kernels": {k: kernels.get(k, 0.0) for k in KINDS},
            "profiled_run_ms": profiled,
            "outside_kernels_ms": profiled - sum(kernels.values())}


def markdown(row: dict[str, Any]) -> str:
    lines = [f"### {row['model']}: measured {row['latency_ms']:.2f} ms, predicted "
             f"{row['predicted_ms']:.2f} ms ({row['predicted_ms'] / row['latency_ms'] - 1:+.0%}"
             + (f"; costs scaled ×{row['speed']:.2f} to the device's speed now" if "speed" in row
                else "") + f"); a profiled run {row['profiled_run_ms']:.2f} ms",
             "", "| kind | predicted ms | in-model kernels ms | kernels − predicted |",
             "|---|---|---|---|"]
    for k in KINDS:
        p, m = row["predicted"][k], row["kernels"][k]
        if p or m:
            lines.append(f"| {k} | {p:.3f} | {m:.3f} | {m - p:+.3f} |")
    lines.append(f"| run overhead / outside kernels | {row['overhead_ms']:.3f} | "
                 f"{row['outside_kernels_ms']:.3f} | "
                 f"{row['outside_kernels_ms'] - row['overhead_ms']:+.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from taso.models import ALL

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--cost-cache", default=None, help="cost cache file (default: user cache)")
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--runs", type=int, default=20, help="profiled runs a model")
    p.add_argument("--small", action="store_true", help="the builders' small variants")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    wanted = [m for m in args.models.split(",") if m] or list(ALL)
    cost_model = make_cost_model("ort", cache_path=args.cost_cache, threads=args.threads)
    rows = []
    for name in wanted:
        print(f"[gap] {name} ...", file=sys.stderr, flush=True)
        rows.append(gap_model(name, ALL[name], cost_model, args.threads, args.runs,
                              args.small))
        print(markdown(rows[-1]), flush=True)
    cost_model.save()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prediction_gap.json").write_text(json.dumps(rows, indent=1))
    (args.out / "prediction_gap.md").write_text(
        f"onnxruntime {VERSION}, {args.threads} thread(s), cost model "
        f"{cost_model.device}\n\n" + "\n".join(markdown(r) for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
