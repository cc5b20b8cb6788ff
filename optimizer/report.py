"""The summary a user reads after a search: a small table, or one JSON object."""

from __future__ import annotations

import json
from typing import Any

from .runner import timed_text
from .search import SearchReport

# What each stop reason (runner.STOPS) means to a user reading the summary.
STOPPED = {"saturated": "saturated (every graph the rules reach was expanded)",
           "exhausted": "exhausted (every graph within alpha of the best was expanded)",
           "budget": "at the budget (--budget)", "time_limit": "at the time limit (--time-limit)"}


def summary_dict(report: SearchReport, **extra: Any) -> dict[str, Any]:
    d = report.to_json()
    d.update(extra)
    return d


def summary_text(report: SearchReport, **extra: Any) -> str:
    d = summary_dict(report, **extra)
    gain = d["cost_before"] / d["cost_after"] if d["cost_after"] > 0 else float("inf")
    rows = [
        ("cost model", d["cost_model"]),
        ("cost before", f"{d['cost_before']:.4f} ms"),
        ("cost after", f"{d['cost_after']:.4f} ms  ({gain:.2f}x)"),
        ("operators", f"{d['ops_before']} -> {d['ops_after']}"),
        ("graphs explored", f"{d['explored']} expanded, {d['generated']} distinct"
                            + (f" ({d['passes']} searches: guessed costs timed)"
                               if d.get("passes", 1) > 1 else "")),
        ("search stopped", STOPPED.get(d.get("stop_reason", ""), d.get("stop_reason", ""))),
        ("pieces", f"{d['pieces']} ({d['distinct_pieces']} distinct)"),
        ("search seconds", f"{d['search_seconds']:.3f} (core {d['core_seconds']:.3f}, "
                           f"folding {d['fold_seconds']:.3f})"),
        ("rules", f"{d['num_rules']} loaded"),
    ]
    m = d.get("costs_measured")
    if m:
        more = ", ".join(f"{m[k]} {k}" for k in ("remeasured", "beside", "cached", "rescaled",
                                                 "guessed", "fallback") if m.get(k))
        rows.append(("costs measured", f"{m['new']} new" + (f" ({more})" if more else "")
                     + f" in {m['seconds']:.1f} s"
                     + (f" (cache {m['cache']})" if m["cache"] else "")))
    v = d.get("timed")
    if v:
        rows.append(("measured", timed_text(v)))
    if d.get("max_error") is not None:
        rows.append(("max error", f"{d['max_error']:.3g} (onnxruntime, original vs optimized)"))
    for k, v in extra.items():
        if k not in dict(rows):
            rows.append((k, str(v)))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    applied = d["rules_applied"]
    lines.append(f"{'rules applied':<{width}}  {sum(applied.values())}")
    for rid, n in sorted(applied.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {n:>5}  {rid}")
    return "\n".join(lines)


def summary_json(report: SearchReport, **extra: Any) -> str:
    return json.dumps(summary_dict(report, **extra), sort_keys=True)
