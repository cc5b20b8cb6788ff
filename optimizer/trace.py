"""What the search did, recorded for the HTML report (report_html.py).

The runner fills a `Trace` when a report is asked for: per distinct piece its
search (progress, stop, costs) and the rewrites on the path to its best graph,
each retraced in the core (`Core.rewrite_at`) to find the nodes it matched and
the nodes it built; the joined pass's rewrites alike; and every result a pass
refused, with the numbers behind the refusal. Regions are plain data (drawn
later), cut out of the graph as the matched nodes and their neighbours, so a
large model's report draws only what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taso.ir import Graph

from .engine import INPUT, OPAQUE, WEIGHT, _node_key, op_kind

# At most this many rewrites are retraced per pass (the joined pass of a long
# sequence model applies thousands alike); the rest are counted.
MAX_STEPS = 60
# Consumers of one tensor drawn around a region, at most (a graph input read by
# every time step would otherwise fill the drawing).
MAX_FANOUT = 4
JOINED = "joined graph"  # where the joined pass's rewrites happen


@dataclass
class Step:
    rule: str
    where: str                  # "piece 3" or "joined graph"
    before: dict[str, Any]      # region (`region`): the matched nodes and neighbours
    after: dict[str, Any]       # the target's nodes and neighbours in the result
    cost_before: float          # the piece's (or graph's) cost before and after it
    cost_after: float
    copies: int = 1             # identical pieces the same rewrite was applied in


@dataclass
class PieceTrace:
    index: int                  # first piece of its kind (0-based)
    copies: int                 # pieces identical to it
    ops: int
    initial: float              # the core's cost of the piece, and of its best
    best: float
    expanded: int
    generated: int
    stop: str
    seconds: float
    progress: list[tuple[int, float]] = field(default_factory=list)  # (expanded, best)
    kept: bool = False
    rules: dict[str, int] = field(default_factory=dict)


@dataclass
class Trace:
    round: int = 0
    pieces: list[PieceTrace] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    untraced: int = 0           # rewrites applied beyond MAX_STEPS per pass
    # Each refusal: {"reason", "where", "rules": {id: n}, and its numbers}; the
    # whole model's (runner.NOT_FASTER) names its verdict among them.
    refusals: list[dict[str, Any]] = field(default_factory=list)
    joined: dict[str, Any] = field(default_factory=dict)

    def start_round(self, round_: int) -> None:
        """A new round (on timed costs) searches again: keep its record only."""
        self.round = round_
        self.pieces, self.steps, self.untraced, self.joined = [], [], 0, {}
        self.refusals = [r for r in self.refusals if r.get("round") is None]

    def refuse(self, reason: str, where: str, rules: dict[str, int], round_: int | None = None,
               **numbers: Any) -> None:
        self.refusals.append({"reason": reason, "where": where, "rules": dict(rules),
                              "round": round_, **numbers})

    def retrace(self, engine: Any, start: Any, keys: list[int], original: Graph, where: str,
                copies: int = 1) -> None:
        """The rewrites `keys` (a search's path_keys) replayed from core graph
        `start` (which is `original`), each recorded as a Step."""
        cg = start
        for key in keys:
            found = engine.core.rewrite_at(cg, key)
            if found is None:  # cannot happen: the search built it the same way
                return
            ri, matched, targets, child = found
            if self.wants(where, engine.rules[ri].id):
                self.add_step(engine, ri, cg, matched, child, targets, original, where, copies)
            else:
                self.untraced += 1
            cg = child

    def add_step(self, engine: Any, ri: int, parent: Any, matched: list[int], child: Any,
                 targets: list[int], original: Graph, where: str, copies: int = 1) -> None:
        self.steps.append(Step(
            engine.rules[ri].id, where,
            region(engine, parent, matched, original),
            region(engine, child, [t for t in targets if t >= 0], original),
            parent.cost, child.cost, copies))

    def wants(self, where: str, rule: str) -> bool:
        """Whether to draw a rewrite by `rule` at `where`: while its pass has
        fewer than MAX_STEPS drawn, and always the first of each rule (a rule
        that fires once, late in a large model, is still shown)."""
        joined = where == JOINED
        drawn = sum((s.where == JOINED) == joined for s in self.steps)
        return drawn < MAX_STEPS or all(s.rule != rule for s in self.steps)


def core_ids(engine: Any, cg: Any, original: Graph) -> list[int | None]:
    """Per node of core graph `cg`, the node of `original` it is (the same
    operator, attributes and inputs), or None for a node a rewrite made."""
    index = {_node_key((n.op, n.attrs), list(n.inputs)): n.id for n in original.nodes.values()
             if op_kind(n.op) not in (INPUT, WEIGHT, OPAQUE)}
    ids: list[int | None] = []
    for _t, a, salt, ins in cg.nodes:
        if salt:
            ids.append(salt - 1)
            continue
        old = [(ids[p], i) for p, i in ins]
        ids.append(None if any(w is None for w, _ in old)
                   else index.get(_node_key(engine.attrs[a], old)))
    return ids


def region(engine: Any, cg: Any, focus: list[int], original: Graph) -> dict[str, Any]:
    """The nodes `focus` of core graph `cg` with their producers and consumers,
    as plain data: {"nodes": [{"key", "op", "name", "attrs", "role", "shapes"}],
    "edges": [[from key, to key, "shape"]], "outputs": [keys read as outputs]}.
    role: "focus", "context" (a neighbour) or "source" (an input or weight)."""
    nodes = cg.nodes
    shapes = cg.shapes
    focus_set = set(focus)
    consumers: dict[int, list[int]] = {}
    for v, (_t, _a, _s, ins) in enumerate(nodes):
        for p, _ in ins:
            if p in focus_set and v not in focus_set:
                consumers.setdefault(p, [])
                if v not in consumers[p]:
                    consumers[p].append(v)
    keep = set(focus_set)
    for v in focus:
        keep.update(p for p, _ in nodes[v][3])
        keep.update(consumers.get(v, [])[:MAX_FANOUT])
    ids = core_ids(engine, cg, original)
    out_nodes, edges = [], []
    for v in sorted(keep):
        _t, a, salt, ins = nodes[v]
        op, attrs = engine.attrs[a]
        kind = op_kind(op)
        known = ids[v] is not None and ids[v] in original.nodes
        name = original.nodes[ids[v]].name if known else None
        role = "focus" if v in focus_set else (
            "source" if kind in (INPUT, WEIGHT) else "context")
        out_nodes.append({"key": v, "op": op, "name": name, "role": role,
                          "attrs": _attrs_text(attrs),
                          "shapes": [list(engine.shapes[s]) for s in shapes[v]]})
        for p, i in ins:
            if p in keep and (v in focus_set or p in focus_set):
                # A one-output producer shows its shape in its box; else which output.
                edges.append([p, v, f"output {i}" if len(shapes[p]) > 1 else ""])
    outputs = sorted({p for p, _ in cg.outputs if p in focus_set})
    return {"nodes": out_nodes, "edges": edges, "outputs": outputs}


def rename(trace: Trace, model: Graph) -> None:
    """A piece's copy of a source ("__src<id>") named after the model's node, a
    tensor from an earlier piece ("__cut<k>") said as such."""
    for step in trace.steps:
        for reg in (step.before, step.after):
            for n in reg["nodes"]:
                name = n["name"] or ""
                if name.startswith("__src"):
                    src = model.nodes.get(int(name[5:]))
                    n["name"] = src.name if src is not None else None
                elif name.startswith("__cut"):
                    n["name"] = "from the piece before"


def _attrs_text(attrs: tuple) -> str:
    """Attributes as short text (the drawing's tooltip and its second line)."""
    parts = []
    for k, v in attrs:
        if k == "onnx_type" or v in (None, (), "none"):
            continue
        s = str(v)
        parts.append(f"{k}={s if len(s) <= 40 else s[:37] + '...'}")
    return ", ".join(parts)
