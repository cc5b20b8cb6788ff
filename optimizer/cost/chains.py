"""What the measured cost models time: links of a chain and the kinds of their
inputs (activations, constants, constants kept at their value), and the chains
of a graph a fusing device runs as one program (a contraction with the
elementwise nodes after it that it alone feeds; `Op.contraction`,
`Op.epilogue`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from taso.ir import Graph
from taso.ops import OPS, get_op

Shape = tuple[int, ...]

# A link of a chain timed as one program: (op, attrs, inputs), each input a
# (kind, shape, dtype) with kind "x" (an activation fed from outside), "w" (a
# constant), "=v" (a one-element constant of value v: onnxruntime fuses a GELU
# decomposed into erf, adds and products only when its constants are sqrt(2),
# 1 and 0.5), "prev" (the previous link's output) or "@j" (link j's output, for
# an earlier one: that GELU reads its input twice).
Link = tuple[str, dict[str, Any], tuple[tuple[str, Shape, str], ...]]
Unit = tuple[Any, tuple]  # what graph_cost sums: a cost key, and what to time (_time_unit)


def const_kind(node: Any, reader: str) -> str:
    """The kind of a constant input of an operator `reader`: its value ("=v")
    when it is a one-element weight of elementwise arithmetic, else "w"."""
    data = node.data if node.op == "weight" and get_op(reader).arithmetic else None
    return f"={float(data.reshape(-1)[0])!r}" if data is not None and data.size == 1 else "w"


def const_value(kind: str) -> float | None:
    """The value of a one-element constant input ("=v"), else None."""
    return float(kind[1:]) if kind.startswith("=") else None


# Constant inputs of opaque nodes are timed with their own values (kind
# "v:<digest>"): indices, shapes, axes, scales, pads or a condition, which a
# random value would make invalid (a Gather index out of range, a Resize scale
# of 0) or change the work of (TopK's k, Tile's repeats).
_VALUES: dict[str, Any] = {}
# Float constants up to this many elements keep their value too; larger ones
# are weights, random values time alike.
VALUE_LIMIT = 4096


def value_kind(data: Any) -> str:
    """The kind of a constant input timed with its own value `data`."""
    data = np.array(data)  # a copy, 0-d kept (ascontiguousarray makes it 1-d)
    m = hashlib.blake2b(repr((data.dtype.str, data.shape)).encode(), digest_size=8)
    m.update(data.tobytes() if data.dtype != object else repr(data.tolist()).encode())
    digest = m.hexdigest()
    _VALUES.setdefault(digest, data)
    return "v:" + digest


def kind_value(kind: str) -> Any:
    """The value of a constant input of kind "v:<digest>", else None."""
    return _VALUES.get(kind[2:]) if kind.startswith("v:") else None


def is_const_kind(kind: str) -> bool:
    return kind == "w" or kind[:1] == "=" or kind[:2] == "v:"


def opaque_kinds(graph: Graph, n: Any, const: set[int]) -> tuple[str, ...]:
    """The kinds of an opaque node's inputs: its own value for a constant that
    is data, or small, or not a float; "w" for a large float weight; "x" for an
    activation."""
    kinds = []
    for p, _ in n.inputs:
        src = graph.nodes[p]
        if p not in const:
            kinds.append("x")
        elif src.op == "weight" and src.data is not None and (
                not src.dtypes[0].startswith("float") or src.data.size <= VALUE_LIMIT):
            kinds.append(value_kind(src.data))
        else:
            kinds.append("w")
    return tuple(kinds)


def _kind(c: Any) -> str:
    """An input's kind from a constant flag (True: "w", False: "x") or a kind."""
    return c if isinstance(c, str) else ("w" if c else "x")


def link_source(kind: str, k: int) -> int | None:
    """The index of the link whose output an input of kind `kind` of link `k`
    is, or None for one fed from outside the chain."""
    if kind == "prev":
        return k - 1
    return int(kind[1:]) if kind.startswith("@") else None

# The heads of fusable chains are contractions (`Op.contraction`), and what may
# follow them says so (`Op.epilogue`). A layer normalization belongs to the
# chain before it: onnxruntime folds the residual add into one
# SkipLayerNormalization, which on this CPU ran 5x slower than the add and the
# normalization apart (0.24 against 0.05 ms at 64x768), so BERT's chains are
# timed with it.
def _anchor(op: str) -> bool:
    return op in OPS and OPS[op].contraction


def _epilogue(op: str) -> bool:
    return op in OPS and OPS[op].epilogue


MAX_CHAIN = 8  # a product, its bias and a GELU decomposed into five nodes


# Operands of a commutative operator are priced in one order (the chain's own
# value, then activations, then constants; then by shape): two timings of one
# program differ by the session's noise (up to 20% for BERT's 3072x768 chain),
# which would otherwise make an operand swap look like a gain or a loss.
KIND_ORDER = {"p": 0, "@": 1, "x": 2, "w": 3, "=": 3, "v": 3}  # by a kind's first character


def canonical_inputs(op: str, ins: Sequence[tuple[str, Shape, str]]) -> tuple:
    """A link's inputs, in their pricing order where `op` is commutative."""
    if get_op(op).commutative and len(ins) == 2:
        return tuple(sorted(ins, key=lambda i: (KIND_ORDER[i[0][0]], i[0], i[1], i[2])))
    return tuple(ins)


def fusable_chains(graph: Graph, live: set[int], const: set[int]) -> list[list[int]]:
    """Node ids of each contraction followed by elementwise nodes it alone feeds
    (two or more nodes in all, in topological order): grown from the contraction
    by its consumers, one at a time, and cut to the largest such group whose
    only output read outside it is its last node's. That is a straight chain,
    or one with a diamond inside, as a GELU decomposed into erf, adds and
    products reads its input twice; onnxruntime fuses both.
    A node that could join two chains (the add of two products) joins the one
    of its first operand that could end a chain there (a contraction or an
    elementwise node after one, read by this node alone): a choice by
    structure, so that a rewrite elsewhere (which reorders the nodes) does not
    move it (onnxruntime, too, fuses an add into the producer of its first
    operand it can). Where that still leaves a node to two chains (one reaches
    it through a node read twice inside it), the first one keeps it."""
    order = {n.id: k for k, n in enumerate(graph.topo_order())}
    users: dict[int, set[int]] = {}
    rooted: set[int] = set()  # contractions, and elementwise nodes after one
    for n in graph.topo_order():
        if n.id in live and n.id not in const:
            for p, _ in n.inputs:
                users.setdefault(p, set()).add(n.id)
            if _anchor(n.op) or _epilogue(n.op) and any(p in rooted for p, _ in n.inputs):
                rooted.add(n.id)
    outputs = {p for p, _ in graph.outputs}
    chains, claimed = [], set()
    for n in graph.topo_order():
        if not _anchor(n.op) or n.id not in live or n.id in const:
            continue
        group, best = [n.id], None
        inside, readers = {n.id}, set(users.get(n.id, ()))  # readers: outside the group
        while len(group) < MAX_CHAIN and readers:
            nxt = min(readers, key=order.__getitem__)
            node = graph.nodes[nxt]
            if nxt in claimed or not _epilogue(node.op) or len(node.shapes) != 1 \
                    or next(p for p, _ in node.inputs if p in inside or
                            p in rooted and users[p] == {nxt}) not in inside:
                break
            group.append(nxt)
            inside.add(nxt)
            readers.discard(nxt)
            readers.update(u for u in users.get(nxt, ()) if u not in inside)
            # one exit: what is read from outside, or is a graph output, is nxt
            if all(p == nxt or p not in inside for r in readers
                   for p, _ in graph.nodes[r].inputs) and outputs.isdisjoint(group[:-1]):
                best = list(group)
        if best:
            chains.append(best)
            claimed.update(best)
    return chains
