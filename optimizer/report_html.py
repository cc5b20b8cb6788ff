"""`taso-opt --report report.html`: one self-contained HTML page on a search.

What a user who got back a model 4% faster, or the model unchanged, needs to
see: the numbers (costs, measured latency and its noise, the check's error,
times, why the search stopped); each rewrite applied, where in the graph it
fired (the matched region before and after, with shapes), what it was
predicted to gain and what vouches for the rule; what was refused and why,
with the numbers; where the time goes, by operator; and how the search went,
per piece. No scripts and nothing fetched: the page opens offline.
"""

from __future__ import annotations

import html
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from taso.rules_db import Rule

from taso.ir import Graph
from taso.svg import bar_chart, graph_svg, line_chart, pattern_svgs

from .cost import CostModel
from .runner import NOT_FASTER, timed_text, times_models
from .trace import Trace, rename

STYLE = """
body{font-family:'DejaVu Sans',Arial,sans-serif;font-size:14px;margin:24px;color:#222;
max-width:1180px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:3px;margin-top:28px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right;
font-variant-numeric:tabular-nums}
.pair{display:flex;gap:18px;flex-wrap:wrap;align-items:flex-start}
.pair>div{border:1px solid #e3e3e3;border-radius:6px;padding:6px;overflow-x:auto;
max-width:100%}
.cap{font-size:12px;color:#555;margin-bottom:4px}.note{color:#555;font-size:13px}
.warn{background:#fff4e5;border:1px solid #f0b36a;padding:6px 10px;border-radius:5px}
.good{color:#2a7a2a}.bad{color:#b03a2e}section.rewrite{border-left:3px solid #d9822b;
padding-left:12px;margin:18px 0}details>summary{cursor:pointer;font-weight:bold}
code{background:#f4f4f4;padding:0 3px;border-radius:3px}
"""

# Stop reasons and refusal reasons, as a user reads them.
STOPPED = {"saturated": "saturated: every graph the rules reach was expanded",
           "exhausted": "exhausted: every graph within alpha of the best was expanded",
           "budget": "at the budget (--budget)", "time_limit": "at the time limit (--time-limit)"}
WHY = {"below --min-gain": "The predicted gain was at most --min-gain (the cost model cannot "
                           "tell a smaller gain from its own spread): the result was not kept.",
       "not cheaper priced as a whole": "The search core ranks graphs by the sum of their "
                                        "node costs; priced as the device runs them (fused "
                                        "chains as one program, constants read), the result "
                                        "was no cheaper: not kept.",
       NOT_FASTER: "Timed against the original, the optimized whole model was not shown "
                   "faster by more than the cost model's measured_gain: not faster (its "
                   "time over the original's, or the confidence interval of that ratio, "
                   "lay above the bar) or undecided (the interval still straddled the bar "
                   "when the time ran out). The original was kept.",
       "check failed": "The result failed the check against the original in onnxruntime: the "
                       "rules below were left out and the model searched again."}
# Sections, in order, by id: the browser test checks each is there.
SECTIONS = ("summary", "rewrites", "refused", "operators", "progress")


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def ms(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f} ms"


def write_report(path: str | os.PathLike, report: Any, trace: Trace, graph: Graph,
                 model: CostModel, rules: list[Rule], name: str = "") -> None:
    """Write the report of `report` (a SearchReport of `graph`) to `path`."""
    Path(path).write_text(render(report, trace, graph, model, rules, name), encoding="utf-8")


def render(report: Any, trace: Trace, graph: Graph, model: CostModel, rules: list[Rule],
           name: str = "") -> str:
    t0 = time.perf_counter()
    rename(trace, graph)
    by_id = {r.id: r for r in rules}
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>taso report: {e(name or 'model')}</title><style>{STYLE}</style>"
             f"</head><body><h1>taso-opt report: {e(name or 'model')}</h1>",
             summary(report, trace, model),
             rewrites(report, trace, by_id),
             refused(trace),
             operators(report, graph, model),
             progress(trace)]
    parts.append(f"<p class='note'>Written by taso in {time.perf_counter() - t0:.2f} s.</p>"
                 "</body></html>")
    return "\n".join(parts)


# ---- the header ------------------------------------------------------------------
def summary(report: Any, trace: Trace, model: CostModel) -> str:
    d = report.to_json()
    gain = d["cost_before"] / d["cost_after"] if d["cost_after"] > 0 else float("inf")
    device = getattr(model, "device", "") or "–"
    rows = [("cost model", f"{e(d['cost_model'])} (device: {e(device)})"),
            ("cost before → after", f"{ms(d['cost_before'])} → {ms(d['cost_after'])} "
                                    f"(×{gain:.2f})"),
            ("operators", f"{d['ops_before']} → {d['ops_after']}")]
    timed = d.get("timed")
    if timed:
        rows.append(("measured latency", measured(timed)))
    else:
        rows.append(("measured latency", "not timed (the cost model does not time whole "
                                         "models, or --no-timing)"))
    rows.append(("check's max error", "–" if d["max_error"] is None else
                 f"{d['max_error']:.3g} (onnxruntime, original vs optimized)"))
    rows.append(("search time", f"{d['search_seconds']:.2f} s (core {d['core_seconds']:.2f} s, "
                                f"folding {d['fold_seconds']:.2f} s); whole optimization "
                                f"{d['seconds']:.2f} s"))
    m = d.get("costs_measured")
    if m:
        rows.append(("measurement time", f"{m['seconds']:.2f} s ({m['new']} new timings)"))
    rows.append(("stop reason", e(STOPPED.get(d["stop_reason"], d["stop_reason"]))))
    rows.append(("graphs explored", f"{d['explored']} expanded, {d['generated']} distinct, "
                                    f"{d['pieces']} pieces ({d['distinct_pieces']} distinct)"))
    applied = d["rules_applied"]
    rows.append(("rewrites applied", f"{sum(applied.values())} ({len(applied)} rules; "
                                     f"{d['num_rules']} loaded)"))
    notes = "".join(f"<p class='warn'>{e(n)}</p>" for n in report.extra.get("notes", ()))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<section id='summary'><h2>Summary</h2><table>{body}</table>{notes}</section>"


def measured(timed: dict[str, Any]) -> str:
    """The whole-model verdict, coloured by what was kept."""
    text = e(timed_text(timed, "→", "×"))
    if timed["verdict"] == "unchanged":
        return text
    note = (f" <span class='note'>(speedup, and its {timed['confidence']:.0%} confidence "
            f"interval over {timed['rounds']} interleaved rounds)</span>"
            if timed.get("low") else "")
    return f"<span class='{'good' if timed['kept'] else 'bad'}'>{text}</span>{note}"


# ---- rewrites ----------------------------------------------------------------------
def rewrites(report: Any, trace: Trace, by_id: dict[str, Rule]) -> str:
    reverted = [r for r in trace.refusals if r["reason"] == NOT_FASTER]
    title = "Rewrites the search chose, reverted" if reverted else "Rewrites applied"
    out = [f"<section id='rewrites'><h2>{title}</h2>"]
    if reverted:
        r = reverted[0]
        out.append(f"<p class='warn'>The rewrites below were chosen by the search, but the "
                   f"rewritten model measured {r['optimized_ms']:.3f} ms against the "
                   f"original's {r['original_ms']:.3f} ms, {e(r['verdict'])}: the original "
                   f"was kept (see <a href='#refused'>refused</a>).</p>")
    if not trace.steps:
        out.append("<p>No rewrite was applied.</p></section>")
        return "".join(out)
    copies = {f"piece {p.index + 1}": p.copies for p in trace.pieces}
    total = sum(copies.get(s.where, 1) for s in trace.steps)
    out.append(f"<p class='note'>{len(trace.steps)} rewrites drawn ({total} counting identical "
               f"pieces){'; ' + str(trace.untraced) + ' more not drawn' if trace.untraced else ''}"
               f". Matched nodes are orange, the nodes the rewrite built green, neighbours "
               f"grey, inputs and weights dashed; each node shows its output shape; thick "
               f"borders are tensors the rest of the graph reads. Hover a node for its "
               f"attributes.</p>")
    drawn: dict[str, int] = {}
    for k, s in enumerate(trace.steps, 1):
        n = copies.get(s.where, 1)
        where = s.where + (f" and {n - 1} identical piece{'s' * (n > 2)}" if n > 1 else "")
        delta = s.cost_after - s.cost_before
        rule = by_id.get(s.rule)
        out.append(f"<section class='rewrite' id='rw{k}'><h3>{k}. <code>{e(s.rule)}</code> in "
                   f"{e(where)}</h3><div class='note'>predicted cost {s.cost_before:.4f} → "
                   f"{s.cost_after:.4f} ms ({delta:+.4f} ms{' each' if n > 1 else ''})"
                   f"</div>{vouch(rule)}")
        if s.rule in drawn:
            out.append(f"<div class='cap'>the rule's pattern: see <a href='#rw{drawn[s.rule]}'>"
                       f"rewrite {drawn[s.rule]}</a></div>")
        elif rule is not None:
            drawn[s.rule] = k
            src, dst = pattern_svgs(rule)
            out.append(f"<div class='pair'><div><div class='cap'>rule source</div>{src}</div>"
                       f"<div><div class='cap'>rule target</div>{dst}</div></div>")
        out.append(f"<div class='pair'><div><div class='cap'>the model before</div>"
                   f"{region_svg(s.before, 'matched')}</div><div><div class='cap'>the model "
                   f"after</div>{region_svg(s.after, 'built')}</div></div></section>")
    out.append("</section>")
    return "".join(out)


def vouch(rule: Rule | None) -> str:
    """What vouches for a rule: its proof record, or its provenance."""
    if rule is None:
        return ""
    v, p = rule.verification, rule.provenance
    bits = []
    if v.get("status"):
        axioms = ", ".join(v.get("axioms", [])) or "none"
        bits.append(f"{e(v['status'])} by z3 {e(v.get('z3', '?'))} in "
                    f"{v.get('seconds', 0) or 0:.2f} s from axioms: {e(axioms)}")
    else:
        bits.append("not verified (--unverified)")
    if p:
        prov = ", ".join(f"{k}={v}" for k, v in p.items() if not isinstance(v, dict))
        bits.append(f"provenance: {e(prov)}")
    return f"<div class='note'>{'; '.join(bits)}</div>"


def region_svg(reg: dict[str, Any], focus_role: str) -> str:
    outs = set(reg.get("outputs", ()))
    nodes = []
    for n in reg["nodes"]:
        shape = " ".join("x".join(map(str, s)) for s in n["shapes"])
        if n["role"] == "source":
            lines = [n["op"], n["name"] or "", shape]
        else:
            lines = [n["op"], n["name"] or "", f"→ {shape}"]
        nodes.append({"key": n["key"], "lines": lines, "output": n["key"] in outs,
                      "role": focus_role if n["role"] == "focus" else n["role"],
                      "tip": f"{n['op']}({n['attrs']})" if n["attrs"] else n["op"]})
    return graph_svg(nodes, reg["edges"])


# ---- refusals ----------------------------------------------------------------------
def refused(trace: Trace) -> str:
    out = ["<section id='refused'><h2>Rewrites considered and refused</h2>"]
    if not trace.refusals:
        out.append("<p>Nothing the search found was refused.</p></section>")
        return "".join(out)
    groups: dict[str, list[dict]] = {}
    for r in trace.refusals:
        groups.setdefault(r["reason"], []).append(r)
    for reason, items in groups.items():
        out.append(f"<h3>{e(reason)} ({len(items)})</h3><p class='note'>{e(WHY.get(reason, ''))}"
                   f"</p><table><tr><th>where</th><th>rules</th><th>the numbers</th></tr>")
        for r in items:
            rules = ", ".join(f"{k}×{n}" if n > 1 else k for k, n in sorted(r["rules"].items()))
            out.append(f"<tr><td>{e(r['where'])}</td><td>{e(rules) or '–'}</td>"
                       f"<td>{numbers(r)}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def numbers(r: dict[str, Any]) -> str:
    return e(numbers_text(r))


def numbers_text(r: dict[str, Any]) -> str:
    if "verdict" in r:
        rounds = f", {r['rounds']} rounds" if r.get("rounds") else ""
        return (f"{timed_text(r, '→', '×')} (needed faster by more than "
                f"{r['margin'] * 100:.1f}%{rounds})")
    if "before" in r:
        gain = (1 - r["after"] / r["before"]) * 100 if r["before"] else 0.0
        return (f"cost {r['before']:.4f} → {r['after']:.4f} ms (gain {gain:.2f}%, needed "
                f"> {r['min_gain'] * 100:.1f}%)")
    return str(r.get("error", ""))


# ---- operators -----------------------------------------------------------------------
def op_costs(graph: Graph, model: CostModel) -> Counter[str]:
    """Milliseconds per operator of `graph`, as the search priced its nodes (the
    same calls as the engine's, so a measured model answers from its memo)."""
    live = graph.live()
    const = graph.constant_nodes()
    out: Counter[str] = Counter()
    for n in graph.topo_order():
        if n.id not in live or n.id in const or n.op in ("input", "weight"):
            continue
        shapes = [graph.nodes[p].shapes[i] for p, i in n.inputs]
        try:
            c = float(model.op_cost(n.op, n.a, shapes))
        except (NotImplementedError, ValueError, KeyError, TypeError):
            continue
        label = n.op if n.op != "opaque" else f"opaque {n.a.get('onnx_type', '')}".strip()
        out[label] += c
    return out


def operators(report: Any, graph: Graph, model: CostModel) -> str:
    before, after = op_costs(graph, model), op_costs(report.graph, model)
    labels = sorted(set(before) | set(after), key=lambda k: -max(before[k], after[k]))
    out = ["<section id='operators'><h2>Where the time goes, by operator</h2>"]
    timed = report.extra.get("timed")
    kind = "measured per node on this device" if times_models(model) \
        else "predicted by the cost model"
    out.append(f"<p class='note'>Node costs ({e(kind)}), summed per operator, before and after "
               f"the rewrites.</p>")
    out.append(bar_chart(labels, [("before", [before[k] if k in before else None
                                              for k in labels]),
                                  ("after", [after[k] if k in after else None
                                             for k in labels])],
                         title="cost per operator"))
    rows = [("sum of node costs", sum(before.values()), sum(after.values()))]
    if timed and timed["original_ms"] is not None:
        rows.append(("measured whole model", timed["original_ms"], timed["optimized_ms"]))
    out.append("<table><tr><th></th><th>before</th><th>after</th></tr>" + "".join(
        f"<tr><th>{k}</th><td class='n'>{ms(b, 3)}</td><td class='n'>{ms(a, 3)}</td></tr>"
        for k, b, a in rows) + "</table>")
    if not timed or timed["original_ms"] is None:
        out.append("<p class='note'>The whole model was not timed: no measured latency to set "
                   "against the predicted sum.</p>")
    out.append("</section>")
    return "".join(out)


# ---- search progress -----------------------------------------------------------------
def progress(trace: Trace) -> str:
    out = ["<section id='progress'><h2>Search progress</h2>"]
    if not trace.pieces:
        out.append("<p>No piece was searched.</p></section>")
        return "".join(out)
    pieces = sorted(trace.pieces, key=lambda p: p.best / p.initial if p.initial else 1)
    series = [(f"piece {p.index + 1}" + (f" ×{p.copies}" if p.copies > 1 else ""),
               [(x, 100 * y / p.initial if p.initial else 100) for x, y in p.progress])
              for p in pieces]
    out.append("<p class='note'>Best cost found, as a percentage of the piece's starting "
               "cost, against the graphs the search expanded (log scale; one line per "
               "distinct piece; the legend lists those that gained most).</p>")
    out.append(line_chart(series, "graphs expanded", "best cost, % of start",
                          "best cost over graphs explored", log_x=True))
    out.append("<table><tr><th>piece</th><th>copies</th><th>operators</th><th>cost start → "
               "best</th><th>expanded</th><th>distinct</th><th>stop</th><th>seconds</th>"
               "<th>kept</th><th>rules on the path</th></tr>")
    for p in sorted(trace.pieces, key=lambda p: p.index):
        rules = ", ".join(f"{k}×{n}" if n > 1 else k for k, n in sorted(p.rules.items()))
        out.append(f"<tr><td class='n'>{p.index + 1}</td><td class='n'>{p.copies}</td>"
                   f"<td class='n'>{p.ops}</td><td class='n'>{p.initial:.4f} → {p.best:.4f}"
                   f"</td><td class='n'>{p.expanded}</td><td class='n'>{p.generated}</td>"
                   f"<td>{e(p.stop)}</td><td class='n'>{p.seconds:.2f}</td>"
                   f"<td>{'yes' if p.kept else 'no'}</td><td>{e(rules) or '–'}</td></tr>")
    out.append("</table>")
    j = trace.joined
    if j:
        out.append(f"<p>Joined graph pass: cost {j['before']:.4f} → {j['after']:.4f} ms, "
                   f"{sum(j['rules'].values())} rewrites, stopped: {e(j['stop'])}, "
                   f"{'kept' if j['kept'] else 'not kept' if j['rules'] else 'nothing to do'}."
                   f"</p>")
    out.append("</section>")
    return "".join(out)
