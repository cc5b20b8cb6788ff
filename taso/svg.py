"""Small inline SVG drawings for the HTML reports (taso-opt and taso-verify):
a layered graph drawing, rule patterns, a bar chart and a line chart. No
graphviz and no scripts: a report must open offline, in any browser, from
one file.

The graph layout is the usual layered one, kept small (the report draws
matched regions and rule patterns, tens of nodes): a node's layer is its
longest path from a source, nodes within a layer are ordered by the mean
position of their producers, and edges are cubic curves with their tensor's
shape as the label.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape
from typing import Any

_ids = itertools.count()

FONT = "font-family='DejaVu Sans, Arial, sans-serif'"
CHAR_W = 6.6   # px per character at 11px, a wide estimate: boxes never clip
LINE_H = 14
LAYER_GAP = 46
NODE_GAP = 18

MAX_PATTERN_LABEL = 42

# role -> (fill, stroke): the focus of a region drawn before (matched) and
# after (built) a rewrite, neighbours, graph inputs and weights.
STYLES = {"matched": ("#fde2c4", "#d9822b"), "built": ("#d6f0d6", "#3a9a3a"),
          "context": ("#f2f2f2", "#9a9a9a"), "source": ("#ffffff", "#9a9a9a")}
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")


def _t(s: Any) -> str:
    return escape(str(s), quote=True)


def graph_svg(nodes: Sequence[dict[str, Any]], edges: Sequence[Sequence[Any]],
              title: str = "", max_label: int = 34) -> str:
    """An SVG of a small DAG. `nodes`: dicts with "key", "lines" (text, one per
    line, the first bold), "role" (a STYLES key), optional "tip" (hover text)
    and "output" (drawn with a thick border: a tensor the rest reads);
    `edges`: (from key, to key, label)."""
    if not nodes:
        return f"<svg xmlns='http://www.w3.org/2000/svg' width='120' height='24' role='img'>" \
               f"<text x='4' y='16' {FONT} font-size='11' fill='#777'>(nothing)</text></svg>"
    keys = [n["key"] for n in nodes]
    preds: dict[Any, list[Any]] = {k: [] for k in keys}
    for a, b, *_ in edges:
        if a in preds and b in preds:
            preds[b].append(a)
    layer: dict[Any, int] = {}

    def depth(k: Any, seen: frozenset = frozenset()) -> int:
        if k not in layer:
            ps = [p for p in preds[k] if p not in seen]  # a cycle cannot occur; be safe
            layer[k] = 1 + max((depth(p, seen | {k}) for p in ps), default=-1)
        return layer[k]

    for k in keys:
        depth(k)
    byk = {n["key"]: n for n in nodes}
    lines = {k: [str(x)[:max_label] for x in byk[k]["lines"] if x] or ["?"] for k in keys}
    width = {k: max(len(x) for x in lines[k]) * CHAR_W + 16 for k in keys}
    height = {k: len(lines[k]) * LINE_H + 10 for k in keys}
    layers: list[list[Any]] = [[] for _ in range(max(layer.values()) + 1)]
    for k in keys:
        layers[layer[k]].append(k)
    # Order within a layer by the producers' mean position (one sweep down).
    xpos: dict[Any, float] = {}
    for row in layers:
        row.sort(key=lambda k: (sum(xpos[p] for p in preds[k]) / len(preds[k]))
                 if preds[k] else -1)
        x = 0.0
        for k in row:
            xpos[k] = x + width[k] / 2
            x += width[k] + NODE_GAP
    row_w = [sum(width[k] for k in row) + NODE_GAP * (len(row) - 1) for row in layers]
    total_w = max(row_w) + 20
    for row, w in zip(layers, row_w):
        shift = (total_w - w) / 2
        for k in row:
            xpos[k] += shift
    ypos, y = {}, 10.0
    for row in layers:
        h = max(height[k] for k in row)
        for k in row:
            ypos[k] = y + (h - height[k]) / 2
        y += h + LAYER_GAP
    total_h = y - LAYER_GAP + 10
    mid = f"a{next(_ids)}"
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{total_w:.0f}' "
           f"height='{total_h:.0f}' viewBox='0 0 {total_w:.0f} {total_h:.0f}' role='img' "
           f"class='graph'>"]
    if title:
        out.append(f"<title>{_t(title)}</title>")
    out.append(f"<defs><marker id='{mid}' viewBox='0 0 10 10' refX='9' refY='5' "
               f"markerWidth='7' markerHeight='7' orient='auto-start-reverse'>"
               f"<path d='M0,0 L10,5 L0,10 z' fill='#666'/></marker></defs>")
    for a, b, *rest in edges:
        if a not in xpos or b not in xpos:
            continue
        x1, y1 = xpos[a], ypos[a] + height[a]
        x2, y2 = xpos[b], ypos[b]
        c = (y2 - y1) / 2
        out.append(f"<path d='M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + c:.1f} {x2:.1f},{y2 - c:.1f} "
                   f"{x2:.1f},{y2 - 1:.1f}' fill='none' stroke='#888' stroke-width='1.2' "
                   f"marker-end='url(#{mid})'/>")
        if rest and rest[0]:
            out.append(f"<text x='{(x1 + x2) / 2 + 4:.1f}' y='{(y1 + y2) / 2 + 3:.1f}' {FONT} "
                       f"font-size='9' fill='#555'>{_t(rest[0])}</text>")
    for k in keys:
        n = byk[k]
        fill, stroke = STYLES.get(n.get("role", "context"), STYLES["context"])
        x, y0, w, h = xpos[k] - width[k] / 2, ypos[k], width[k], height[k]
        dash = " stroke-dasharray='4 2'" if n.get("role") == "source" else ""
        sw = 2.6 if n.get("output") else 1.3
        out.append("<g>")
        if n.get("tip"):
            out.append(f"<title>{_t(n['tip'])}</title>")
        out.append(f"<rect x='{x:.1f}' y='{y0:.1f}' width='{w:.1f}' height='{h:.1f}' rx='5' "
                   f"fill='{fill}' stroke='{stroke}' stroke-width='{sw}'{dash}/>")
        for i, s in enumerate(lines[k]):
            weight = " font-weight='bold'" if i == 0 else ""
            out.append(f"<text x='{xpos[k]:.1f}' y='{y0 + 5 + LINE_H * (i + 1) - 3:.1f}' "
                       f"text-anchor='middle' {FONT} font-size='{11 if i == 0 else 9.5}'"
                       f"{weight}>{_t(s)}</text>")
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def bar_chart(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]],
              unit: str = "ms", title: str = "") -> str:
    """Horizontal grouped bars: one group per label, one bar per series (name,
    values; None: no bar), with its value written beside it."""
    if not labels:
        return ""
    label_w = max(len(s) for s in labels) * CHAR_W + 12
    bar_h, gap = 11, 9
    group_h = bar_h * len(series) + gap
    plot_w = 420
    top = 24
    total_h = top + group_h * len(labels) + 10
    vmax = max((v for _, vs in series for v in vs if v is not None), default=0.0) or 1.0
    total_w = label_w + plot_w + 90
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{total_w:.0f}' "
           f"height='{total_h:.0f}' viewBox='0 0 {total_w:.0f} {total_h:.0f}' role='img' "
           f"class='chart'>"]
    if title:
        out.append(f"<title>{_t(title)}</title>")
    lx = label_w
    for s, (name, _) in enumerate(series):
        out.append(f"<rect x='{lx:.0f}' y='6' width='10' height='10' fill='{PALETTE[s]}'/>"
                   f"<text x='{lx + 14:.0f}' y='15' {FONT} font-size='11'>{_t(name)}</text>")
        lx += len(name) * CHAR_W + 34
    for i, label in enumerate(labels):
        y = top + i * group_h
        out.append(f"<text x='{label_w - 6:.0f}' y='{y + group_h / 2:.1f}' text-anchor='end' "
                   f"{FONT} font-size='11'>{_t(label)}</text>")
        for s, (name, values) in enumerate(series):
            v = values[i]
            if v is None:
                continue
            w = max(0.5, plot_w * v / vmax)
            by = y + s * bar_h
            out.append(f"<rect x='{label_w:.0f}' y='{by:.1f}' width='{w:.1f}' "
                       f"height='{bar_h - 1}' fill='{PALETTE[s]}'><title>{_t(label)}, "
                       f"{_t(name)}: {v:.4g} {unit}</title></rect>"
                       f"<text x='{label_w + w + 4:.1f}' y='{by + bar_h - 2:.1f}' {FONT} "
                       f"font-size='9'>{v:.3g}</text>")
    out.append("</svg>")
    return "".join(out)


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
               x_label: str = "", y_label: str = "", title: str = "",
               log_x: bool = False) -> str:
    """Lines of (x, y) points, one per series, on shared axes, x from 0 (on a
    log(1 + x) scale with `log_x`: one long search would squash the rest)."""
    pts = [p for _, ps in series for p in ps]
    if not pts:
        return ""
    w, h, left, bottom, top, right = 560, 230, 52, 34, 12, 150
    xmax = max(x for x, _ in pts) or 1.0
    ymin = min(y for _, y in pts)
    ymax = max(y for _, y in pts)
    if ymax - ymin < 1e-12:
        ymin, ymax = ymin - 1, ymax + 1
    ymin -= (ymax - ymin) * 0.05

    def sx(x: float) -> float:
        frac = math.log1p(x) / math.log1p(xmax) if log_x else x / xmax
        return left + (w - left - right) * frac

    def sy(y: float) -> float:
        return top + (h - top - bottom) * (1 - (y - ymin) / (ymax - ymin))

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
           f"viewBox='0 0 {w} {h}' role='img' class='chart'>"]
    if title:
        out.append(f"<title>{_t(title)}</title>")
    out.append(f"<line x1='{left}' y1='{h - bottom}' x2='{w - right}' y2='{h - bottom}' "
               f"stroke='#444'/><line x1='{left}' y1='{top}' x2='{left}' y2='{h - bottom}' "
               f"stroke='#444'/>")
    for frac in (0, 0.5, 1):
        yv = ymin + (ymax - ymin) * frac
        out.append(f"<text x='{left - 4}' y='{sy(yv) + 3:.1f}' text-anchor='end' {FONT} "
                   f"font-size='9'>{yv:.3g}</text>")
    ticks = [0.0, *(10.0 ** k for k in range(int(math.log10(xmax)) + 1))] if log_x and \
        xmax >= 1 else [0.0, xmax / 2, xmax]
    for xv in ticks:
        out.append(f"<text x='{sx(xv):.1f}' y='{h - bottom + 12}' text-anchor='middle' {FONT} "
                   f"font-size='9'>{xv:.0f}</text>")
    out.append(f"<text x='{(left + w - right) / 2:.0f}' y='{h - 6}' text-anchor='middle' {FONT} "
               f"font-size='10'>{_t(x_label)}</text>")
    out.append(f"<text x='12' y='{(top + h - bottom) / 2:.0f}' text-anchor='middle' {FONT} "
               f"font-size='10' transform='rotate(-90 12 {(top + h - bottom) / 2:.0f})'>"
               f"{_t(y_label)}</text>")
    for s, (name, ps) in enumerate(series):
        color = PALETTE[s % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
        out.append(f"<polyline points='{path}' fill='none' stroke='{color}' stroke-width='1.6'>"
                   f"<title>{_t(name)}</title></polyline>")
        if s < 12:
            ly = top + 10 + 13 * s
            out.append(f"<line x1='{w - right + 10}' y1='{ly - 3}' x2='{w - right + 24}' "
                       f"y2='{ly - 3}' stroke='{color}' stroke-width='2'/><text "
                       f"x='{w - right + 28}' y='{ly}' {FONT} font-size='10'>{_t(name)}</text>")
    if len(series) > 12:
        out.append(f"<text x='{w - right + 10}' y='{top + 10 + 13 * 12}' {FONT} font-size='10'>"
                   f"... {len(series) - 12} more</text>")
    out.append("</svg>")
    return "".join(out)


# ---- rule patterns -------------------------------------------------------------
def pattern_svgs(rule: Any) -> tuple[str, str]:
    """A rule's (rules_db.Rule) source and target sides drawn as small graphs
    over its variables; mapped outputs with thick borders."""
    def side(pnodes: list, mapped: set) -> str:
        nodes, edges, used = [], [], []
        for i, pn in enumerate(pnodes):
            for r in pn.inputs:
                if isinstance(r, str):
                    if r not in used:
                        used.append(r)
                    edges.append((("v", r), ("n", i), ""))
                else:
                    edges.append((("n", r[0]), ("n", i), f"output {r[1]}" if r[1] else ""))
        for v in used:
            c = rule.vars.get(v, {})
            extra = ", ".join(f"{k} {c[k]}" for k in ("rank",) if k in c)
            if c.get("weight"):
                extra = (extra + ", weight").lstrip(", ")
            nodes.append({"key": ("v", v), "lines": [v, extra], "role": "source",
                          "output": v in mapped})
        for i, pn in enumerate(pnodes):
            attrs = ", ".join(f"{k}={pattern_value(v)}" for k, v in pn.attrs.items())
            nodes.append({"key": ("n", i), "lines": [pn.op, attrs], "role": "context",
                          "output": ("n", i) in mapped, "tip": f"{pn.op}({attrs})"})
        return graph_svg(nodes, edges, max_label=MAX_PATTERN_LABEL)

    def refs(which: int) -> set:
        return {r if isinstance(r, str) else ("n", r[0])
                for r in (o[which] for o in rule.outputs)}

    return side(rule.src, refs(0)), side(rule.dst, refs(1))


def pattern_value(v: Any) -> str:
    """A pattern attribute as math: a dim reference as x.shape[k], tuples bare."""
    if isinstance(v, dict) and "dim" in v:
        (ref, axis) = v["dim"]
        return f"{ref if isinstance(ref, str) else 't' + str(ref[0])}.shape[{axis}]"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(pattern_value(u) for u in v) + ")"
    return str(v)

