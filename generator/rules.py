"""From enumerated graphs to rules: the pattern form of a graph pair, and the
float confirmation every candidate passes before it is emitted."""

from __future__ import annotations

from typing import Any

import numpy as np
from taso.rules_db import PNode, Rule

from taso.ops import OPS
from taso.tolerance import CONFIRM_RTOL, scaled_mismatch

from .family import Var
from .store import GraphT, Member


def _ancestors(graph: GraphT, n_in: int, producer: list[int]) -> list[set[int]]:
    anc: list[set[int]] = []
    for j, (_, _, ins) in enumerate(graph):
        s = {j}
        for t in ins:
            if producer[t] >= 0:
                s |= anc[producer[t]]
        anc.append(s)
    return anc


def _producers(graph: GraphT, n_in: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Producer node of each tensor id, and (node, output) of each op tensor."""
    producer = [-1] * n_in
    where: list[tuple[int, int]] = [(-1, -1)] * n_in
    for j, (op, attrs, _) in enumerate(graph):
        n_out = OPS[op].num_outputs(dict(attrs))
        for o in range(n_out):
            producer.append(j)
            where.append((j, o))
    return producer, where


def side_nodes(graph: GraphT, family: tuple[Var, ...], names: dict[int, str],
               shapes: list[tuple]) -> tuple[list[PNode], list[Any]]:
    """The pattern nodes of one graph, and the reference of each of its tensors.
    `shapes` gives each tensor id's shape (family first, then node outputs)."""
    n_in = len(family)
    producer, where = _producers(graph, n_in)
    anc = _ancestors(graph, n_in, producer)

    def ref(t: int) -> Any:
        return names.get(t) if t < n_in else where[t]

    nodes = []
    for op, attrs, ins in graph:
        a = OPS[op].gen_pattern_attrs(dict(attrs), [shapes[t] for t in ins],
                                      [ref(t) for t in ins])
        if OPS[op].undoes:  # split: its sizes are those of the concat it undoes
            a["sizes"] = _split_sizes(graph, anc[producer[ins[0]]], a, shapes, ref,
                                      OPS[op].undoes)
        nodes.append(PNode(op, [ref(t) for t in ins], a))
    return nodes, [ref(t) for t in range(len(producer))]


def _split_sizes(graph: GraphT, ancestors: set[int], a: dict, shapes, ref,
                 undoes: str) -> tuple:
    """Name the sizes of the concat (the nearest one) whose parts the split undoes."""
    for c in sorted(ancestors, reverse=True):
        op, cattrs, cins = graph[c]
        if op != undoes:
            continue
        cax = dict(cattrs)["axis"]
        if tuple(shapes[p][cax] for p in cins) == tuple(a["sizes"]):
            return tuple({"dim": (ref(p), cax)} for p in cins)
    raise ValueError("split with no concat to undo")


_SHAPES: dict[tuple, list[tuple]] = {}


def tensor_shapes(graph: GraphT, family: tuple[Var, ...]) -> list[tuple]:
    shapes = [v.shape for v in family]
    for op, attrs, ins in graph:
        key = (op, attrs, tuple(shapes[t] for t in ins))
        if key not in _SHAPES:
            _SHAPES[key] = OPS[op].out_shapes(dict(attrs), list(key[2]))
        shapes += _SHAPES[key]
    return shapes


def to_rule(rid: str, src: Member, dst: Member, family: tuple[Var, ...],
            provenance: dict[str, Any]) -> Rule:
    """The rule `src => dst` (outputs paired by equal fingerprints)."""
    n_in = len(family)
    names: dict[int, str] = {}
    for m in (src, dst):
        for _, _, ins in m.graph:
            for t in ins:
                if t < n_in and t not in names:
                    names[t] = f"x{len(names) + 1}"
        for t in m.sinks:
            if t < n_in and t not in names:
                names[t] = f"x{len(names) + 1}"
    sides = []
    for m in (src, dst):
        shapes = tensor_shapes(m.graph, family)
        sides.append(side_nodes(m.graph, family, names, shapes))
    (s_nodes, s_ref), (d_nodes, d_ref) = sides
    by_val = {v: t for t, v in zip(dst.sinks, dst.sink_vals)}
    outputs = [(s_ref[t], d_ref[by_val[v]]) for t, v in zip(src.sinks, src.sink_vals)]
    rank = {name: len(family[t].shape) for t, name in names.items()}
    vars_ = {name: {"rank": rank[name]} for name in names.values()}
    prov = dict(provenance, family={name: family[t].name for t, name in names.items()})
    return Rule(rid, s_nodes, d_nodes, outputs, vars_, prov, {})


# ---- float confirmation -------------------------------------------------------------
def float_inputs(family: tuple[Var, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, 7])
    return [np.asarray(rng.standard_normal(v.shape), dtype=np.float32) for v in family]


def run_float(graph: GraphT, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Every tensor of a generator graph (a tuple of (op, attrs, inputs) over
    tensor indices, the family first), by the numpy reference in float64."""
    vals = list(xs)
    for op, attrs, ins in graph:
        vals += _float64(OPS[op].run_ref(dict(attrs), [vals[t] for t in ins]))
    return vals


def _float64(outs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(o, dtype=np.float64) for o in outs]


def confirmed(src: Member, dst: Member, xs: list[np.ndarray]) -> bool:
    """Do the paired outputs agree on float inputs? Relative tolerance for float32
    rounding through a few operators. Where a side divides, they must also
    agree with every input a divisor is computed from at zero, both sides
    undefined (not finite) at the same places: the fingerprint's division is
    by a random non-zero residue, so it cannot tell x·s / s from x."""
    by_val = {v: t for t, v in zip(dst.sinks, dst.sink_vals)}
    pairs = [(t, by_val[v]) for t, v in zip(src.sinks, src.sink_vals)]
    a, b = run_float(src.graph, xs), run_float(dst.graph, xs)
    if not all(_close(a[t], b[u]) for t, u in pairs):
        return False
    zero = divisor_sources(src.graph, len(xs)) | divisor_sources(dst.graph, len(xs))
    if not zero:
        return True
    xs0 = [np.zeros_like(x) if i in zero else x for i, x in enumerate(xs)]
    with np.errstate(all="ignore"):
        a, b = run_float(src.graph, xs0), run_float(dst.graph, xs0)
    return all(_same_where_defined(a[t], b[u]) for t, u in pairs)


def divisor_sources(graph: GraphT, n_in: int) -> set[int]:
    """The family tensors (by index) that some divisor of `graph` is computed from."""
    sources: list[set[int]] = [{i} for i in range(n_in)]
    out: set[int] = set()
    for op, attrs, ins in graph:
        d = OPS[op].divisor
        if d is not None:
            out |= sources[ins[d]]
        srcs = set().union(*(sources[t] for t in ins))
        sources += [srcs] * OPS[op].num_outputs(dict(attrs))
    return out


def _same_where_defined(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal where both are finite, and not finite at the same places."""
    fx, fy = np.isfinite(x), np.isfinite(y)
    return x.shape == y.shape and bool(np.array_equal(fx, fy)) and _close(
        np.where(fx, x, 0.0), np.where(fy, y, 0.0))


def holds_elsewhere(rule: Rule, family: tuple[Var, ...], seed: int) -> bool | None:
    """Instantiate the (symbolic) rule on the family's alternative shapes and
    compare both sides in float. None when it cannot be checked there (a variable
    has no alternative shape, or a side does not type-check at those sizes)."""
    from taso.rules_db import instantiate

    from taso.ir import run_node
    from taso.ops import ShapeError

    by_name = {v.name: v for v in family}
    shapes = {}
    for name, fam_name in rule.provenance.get("family", {}).items():
        alt = by_name[fam_name].alt
        if alt is None:
            return None
        shapes[name] = alt
    try:
        src, _ = instantiate(rule, "src", shapes)
        dst, _ = instantiate(rule, "dst", shapes)
    except ShapeError:
        return None
    rng = np.random.default_rng([seed, 11])
    feeds = {v: rng.standard_normal(s).astype(np.float32) for v, s in shapes.items()}

    def apply(n, xs):
        return _float64(run_node(n, xs))

    a, b = src.run(feeds, apply), dst.run(feeds, apply)
    return all(_close(x, y) for x, y in zip(a, b))


def _close(x: np.ndarray, y: np.ndarray) -> bool:
    return scaled_mismatch(x, y, CONFIRM_RTOL, nan_agrees=False) is None
