"""End-to-end speed: every model builder, four versions of each, timed in onnxruntime.

    python bench/e2e.py [--models resnet50,bert_base] [--cost-model ort] [--threads 1]

For each model of `taso.models.ALL` this exports the original graph, runs
onnx-simplifier and onnxoptimizer on that export and taso's search on the graph,
checks every version computes the original's outputs, and times all four in
one onnxruntime configuration (ORT_ENABLE_ALL, sequential, the stated threads)
interleaved round by round, so that load on the machine hits every column
alike; each latency is the median over rounds. It reports the speedup of each
version over the original, the search time and the cost-measurement time apart,
and the cost model's predicted latency against the measured one. Output: a
markdown table, a JSON record and a bar chart under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from taso.optimizer.cost.factory import make_cost_model
from taso.optimizer.cost.ort import cpu_name

import taso
from taso.runtime import (
    VERSION,
    Runner,
    balanced_order,
    benchmark_options,
    default_threads,
    session,
    time_interleaved,
)
from taso.tolerance import MODEL_RTOL, relative_error

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = ("original", "onnxsim", "onnxoptimizer", "taso")
# The original timed again with sessions of its own: its ratio to "original" is
# this run's noise, what any column's ratio reads when nothing changed.
AGAIN = "original again"

# Tensat's published speedups over the original graph (its Table 2, relative
# gain), the bar this project sets itself.
TENSAT_GAIN = {"bert_base": 0.09, "resnext50": 0.09, "nasnet_a": 0.07, "nasrnn": 0.69,
               "inception_v3": 0.10, "squeezenet": 0.25}


def model_builders() -> dict[str, Any]:
    from taso.models import ALL

    if isinstance(ALL, dict):
        return dict(ALL)
    return {fn.__name__: fn for fn in ALL}


def simplified(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxsim

    out, _ = onnxsim.simplify(model, check_n=0)
    return out


def onnxoptimized(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxoptimizer

    return onnxoptimizer.optimize(model)


def run_taso(graph, cost_model, args):
    """The search's report (its `graph` the optimized graph), the seconds spent
    searching, and the seconds spent measuring: cost keys, and timing the
    whole result against the original (apart from the search)."""
    from taso.optimizer.search import run_search

    measured_before = getattr(cost_model, "measure_seconds", 0.0)
    start = time.perf_counter()
    report = run_search(graph, alpha=args.alpha, budget=args.budget, rules=args.rules,
                        cost_model=cost_model, unverified=args.unverified)
    total = time.perf_counter() - start
    measuring = getattr(cost_model, "measure_seconds", 0.0) - measured_before
    validating = (report.extra.get("timed") or {}).get("seconds", 0.0)
    return report, total - measuring - validating, (measuring, validating)


def check_same_outputs(ref: list[np.ndarray], got: list[np.ndarray], label: str) -> float:
    """Largest difference relative to the output's scale; fails loudly past
    the model tolerance (taso.tolerance)."""
    worst = max((relative_error(r, g) for r, g in zip(ref, got)), default=0.0)
    if worst > MODEL_RTOL:
        raise AssertionError(f"{label}: outputs differ from the original's (rel {worst:.2e})")
    return worst


def measured_latency(cost_model, graph, onnx_ms: float) -> float:
    """The whole model's measured latency on the cost model's own device: the
    onnxruntime figure for CPU models, a run through the GPU lowerings for cupy."""
    base = getattr(cost_model, "base", cost_model)
    return base.time_graph(graph) if base.name == "cupy" else onnx_ms


def bench_model(name: str, builder, cost_model, args) -> dict[str, Any]:
    keys_before = getattr(cost_model, "measured", 0)
    graph = builder(small=True) if args.small else builder()
    models = {"original": taso.export_onnx(graph)}
    models["onnxsim"] = simplified(models["original"])
    models["onnxoptimizer"] = onnxoptimized(models["original"])
    report, search_s, (measure_s, validate_s) = run_taso(graph, cost_model, args)
    best = report.graph
    models["taso"] = taso.export_onnx(best)

    models[AGAIN] = models["original"]
    feeds = {k: v for k, v in graph.random_inputs(seed=0).items()}
    runners, outputs = {}, {}
    # Several sessions a column: sessions of one model differ by where their
    # buffers land, by a few percent on this VM, and later ones tended to run
    # faster; so the creation order reverses from one session to the next.
    for s in range(args.sessions):
        for col in balanced_order((*COLUMNS, AGAIN), s):
            sess = session(models[col], benchmark_options(args.threads))
            names = [i.name for i in sess.get_inputs()]
            outputs.setdefault(col, sess.run(None, {n: feeds[n] for n in names}))
            runners[(col, s)] = Runner(sess, {n: feeds[n] for n in names})
    errors = {col: check_same_outputs(outputs["original"], outputs[col], f"{name}/{col}")
              for col in COLUMNS[1:]}
    per_session = time_interleaved(runners, args.rounds, args.round_ms, args.threads)
    latency = {col: float(np.mean([per_session[(col, s)] for s in range(args.sessions)]))
               for col in (*COLUMNS, AGAIN)}

    row: dict[str, Any] = {
        "model": name, "ops_before": graph.num_ops(), "ops_after": best.num_ops(),
        "latency_ms": latency,
        "speedup": {c: latency["original"] / latency[c] for c in (*COLUMNS, AGAIN)},
        "max_rel_error": errors, "search_s": search_s, "measure_s": measure_s,
        "validate_s": validate_s, "validated": report.extra.get("timed"),
        "rules_applied": report.rules_applied,
    }
    predict = getattr(cost_model, "predict_latency", None)
    if predict is not None:
        # both scaled by the device's speed now, as measured on the original
        original = predict(graph)
        speed = getattr(cost_model, "last_speed", 1.0)
        row["predicted_ms"] = {"original": original, "taso": predict(best, speed=speed)}
        row["device_speed"] = speed
        device_ms = {"original": measured_latency(cost_model, graph, latency["original"]),
                     "taso": measured_latency(cost_model, best, latency["taso"])}
        row["prediction_error"] = {c: row["predicted_ms"][c] / device_ms[c] - 1
                                   for c in ("original", "taso")}
    row["keys_measured"] = getattr(cost_model, "measured", 0) - keys_before
    # where the search's prices came from: new keys, re-timed, cached, guessed...
    row["costs"] = report.to_json().get("costs_measured")
    if hasattr(cost_model, "save"):
        cost_model.save()
    return row


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "",
             "| model | ops before → after | original ms | onnxsim | onnxoptimizer | taso "
             "| noise (A/A) | Tensat's gain | search s | measure s | validate s "
             "| predicted (orig / taso) ms | prediction error (orig / taso) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat, sp = r["latency_ms"], r["speedup"]
        cell = {c: f"{lat[c]:.2f} ms ×{sp[c]:.2f}" for c in COLUMNS[1:]}
        tensat = f"+{TENSAT_GAIN[r['model']]:.0%}" if r["model"] in TENSAT_GAIN else "—"
        pred = r.get("predicted_ms")
        err = r.get("prediction_error")
        lines.append(
            f"| {r['model']} | {r['ops_before']} → {r['ops_after']} | {lat['original']:.2f} "
            f"| {cell['onnxsim']} | {cell['onnxoptimizer']} | {cell['taso']} "
            f"| {noise(r)} | {tensat} "
            f"| {r['search_s']:.1f} | {r['measure_s']:.1f} | {r.get('validate_s', 0.0):.1f} "
            + (f"| {pred['original']:.2f} / {pred['taso']:.2f}{speed(r)} "
               f"| {err['original']:+.0%} / {err['taso']:+.0%} |" if pred else "| — | — |"))
    lines += ["", "Rules applied:", ""]
    for r in rows:
        fired = sorted(r.get("rules_applied", {}).items(), key=lambda kv: -kv[1])
        lines.append(f"- {r['model']}: " + (", ".join(f"{k} ×{v}" for k, v in fired) or "none")
                     + refusal(r))
    return "\n".join(lines) + "\n"


def refusal(row: dict[str, Any]) -> str:
    """What the whole-model check refused, if it refused the search's rewrites."""
    v = row.get("validated")
    # Records from before the verdicts say only "kept"; unchanged ones refused nothing.
    verdict = v and v.get("verdict", "not faster" if not v["kept"] else "faster")
    if verdict not in ("not faster", "undecided"):
        return ""
    n = sum(v.get("rules", {}).values())
    interval = (f", ×{1 / v['high']:.2f}–×{1 / v['low']:.2f}" if v.get("low") and v.get("high")
                else "")
    outcome = ("not faster by the required margin" if verdict == "not faster"
               else f"undecided after {v['seconds']:.0f} s")
    return (f" (refused: the search's {f'{n} rewrites' if n else 'rewrite'} measured "
            f"{v['original_ms']:.2f} → {v['optimized_ms']:.2f} ms as a whole model{interval}, "
            f"{outcome})")


def speed(row: dict[str, Any]) -> str:
    """The factor a row's predictions were scaled by (the device's time now over
    its time when the costs were measured), where they were."""
    f = row.get("device_speed")
    return f" (×{f:.2f})" if f is not None else ""


def noise(row: dict[str, Any]) -> str:
    """The A/A ratio of a row, or a dash for a record from before it was measured."""
    again = row["speedup"].get(AGAIN)
    return f"×{again:.2f}" if again is not None else "—"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"] for r in rows]
    x = np.arange(len(names))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names) + 2), 4))
    for i, col in enumerate(COLUMNS[1:]):
        ax.bar(x + (i - 1) * width, [r["speedup"][col] for r in rows], width, label=col)
    tensat = [1 + TENSAT_GAIN.get(n, np.nan) for n in names]
    ax.scatter(x + width, tensat, marker="_", s=400, color="black", zorder=3,
               label="Tensat (published)")
    again = [r["speedup"].get(AGAIN, np.nan) for r in rows]
    ax.scatter(x, again, marker="x", s=40, color="dimgray", zorder=3,
               label="original again (noise)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(x, names, rotation=20)
    ax.set_ylabel("speedup over the original (onnxruntime)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--cost-model", default="ort")
    p.add_argument("--cost-cache", default=None, help="cost cache file (default: user cache)")
    p.add_argument("--memory-weight", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--rules", action="append", default=None, metavar="FILE",
                   help="rule set(s) to search with (default: the shipped ones)")
    p.add_argument("--unverified", action="store_true",
                   help="also use rules the verifier has not proved")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--sessions", type=int, default=2,
                   help="onnxruntime sessions a column, their medians averaged")
    p.add_argument("--round-ms", type=float, default=50.0,
                   help="runs of each column per round fill about this long (at least one)")
    p.add_argument("--small", action="store_true", help="the builders' small variants")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    builders = model_builders()
    wanted = [m for m in args.models.split(",") if m] or list(builders)
    cost_model = make_cost_model(args.cost_model, cache_path=args.cost_cache,
                                 memory_weight=args.memory_weight, threads=args.threads)
    header = (f"onnxruntime {VERSION}, ORT_ENABLE_ALL in every "
              f"column, {args.threads} intra-op thread(s), {cpu_name()}; cost model "
              f"{cost_model.name} ({cost_model.device}); alpha {args.alpha}, budget "
              f"{args.budget}" + (", unverified rules too" if args.unverified else "")
              + f"; {args.sessions} session(s) a column, each the median over "
              f"{args.rounds} interleaved rounds of ≥{args.round_ms:g} ms, timed by "
              + ("the thread's CPU time" if args.threads == 1 else "the wall clock")
              + ("; predictions against whole-model runs on the GPU" if args.cost_model == "cupy"
                 else "")
              + "; predictions scaled to the device's speed now (bracketed: its time now over "
                "its time when the costs were measured: the weighted median over the eight "
                "cost keys that weigh most in the original, timed again).")
    rows = []
    for name in wanted:
        print(f"[e2e] {name} ...", file=sys.stderr, flush=True)
        rows.append(bench_model(name, builders[name], cost_model, args))
        r = rows[-1]
        print(f"[e2e] {name}: original {r['latency_ms']['original']:.2f} ms, taso "
              f"×{r['speedup']['taso']:.3f}, search {r['search_s']:.1f} s, measure "
              f"{r['measure_s']:.1f} s", file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "e2e.md").write_text(markdown(rows, header))
    (args.out / "e2e.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    plot(rows, args.out / "e2e.png", f"onnxruntime {args.threads}-thread CPU latency, "
         f"{cpu_name()}; cost model {cost_model.name}")
    print(markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
