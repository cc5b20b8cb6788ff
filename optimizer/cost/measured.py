"""What the measured cost models share: keys, the memo, the persistent cache,
constant inputs and the fixed per-run overhead.

A subclass says how to time one node (`time_node`) and one empty run
(`time_overhead`) on its device; this class decides what is worth timing. A
node whose inputs are all constants costs nothing (it is folded before the
model runs); otherwise its key is its operator's `cost_key` plus which inputs
are constants, looked up in memory, then in the cache, and timed only when both
miss. The cost is the timing less the overhead, never below zero.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from taso.ir import Graph
from taso.ops import get_op

from . import SOURCE_OPS, CostModel, Shape, constant_nodes
from .cache import CostCache

OVERHEAD_KEY = ("run-overhead",)


# Operator inputs that are a layer's parameters in every model we know of.
PARAMETER_INPUTS = ("w", "scale", "bias", "mean", "var")


def default_consts(op: str, shapes: Sequence[Shape]) -> tuple[bool, ...]:
    """Which inputs are constants when the caller does not say: a layer's
    parameters (a convolution's kernel, a normalization's scale, bias and
    statistics), a GEMM's operands after the first, and the right operand of a
    matrix product when it is a plain matrix (batched right operands are
    activations, as in attention)."""
    names = get_op(op).inputs
    if op == "gemm":
        return tuple(i > 0 for i in range(len(shapes)))
    if op == "matmul":
        return (False, len(shapes[1]) == 2)
    return tuple(i < len(names) and names[i] in PARAMETER_INPUTS for i in range(len(shapes)))


def open_cache(cache: CostCache | str | os.PathLike | bool | None) -> CostCache | None:
    """A CostCache from an instance, a path, None/True (the default path) or
    False (no persistence)."""
    if cache is False:
        return None
    if isinstance(cache, CostCache):
        return cache
    return CostCache(None if cache in (None, True) else cache)


class MeasuredCostModel(CostModel):
    """Base of the models that time nodes on a device.

    `measured` counts the timings this instance ran (keys missing from memory
    and cache) and `measure_seconds` the wall time they took."""

    def __init__(self, cache: CostCache | str | os.PathLike | bool | None = None):
        self.cache = open_cache(cache)
        self._memo: dict[Any, float] = {}
        self._overhead: float | None = None
        self.measured = 0
        self.measure_seconds = 0.0

    # ---- what a device backend provides ------------------------------------------
    def time_node(self, op: str, attrs: dict[str, Any], shapes: list[Shape],
                  consts: tuple[bool, ...], dtypes: Sequence[str] | None) -> float:
        """Milliseconds of one run of a one-node program (overhead included)."""
        raise NotImplementedError

    def time_overhead(self) -> float:
        """Milliseconds of one run of a program that computes (almost) nothing."""
        raise NotImplementedError

    # ---- the interface -------------------------------------------------------------
    def op_cost(self, op: str, attrs: dict[str, Any], shapes: Sequence[Shape],
                consts: Sequence[bool] | None = None,
                dtypes: Sequence[str] | None = None) -> float:
        if op in SOURCE_OPS or get_op(op).weight_only:
            return 0.0
        shapes = [tuple(int(d) for d in s) for s in shapes]
        consts = tuple(bool(c) for c in consts) if consts is not None \
            else default_consts(op, shapes)
        if consts and all(consts):
            return 0.0  # folded into a constant before the model runs
        key = (get_op(op).cost_key(dict(attrs), shapes), consts)
        if key not in self._memo:
            self._memo[key] = self._cached(
                key, lambda: max(self.time_node(op, dict(attrs), shapes, consts, dtypes)
                                 - self.overhead_ms, 0.0))
        return self._memo[key]

    def graph_cost(self, graph: Graph) -> float:
        """Sum of the live computed nodes' costs, each timed with its real
        constant inputs and dtypes; nodes computed from weights alone are folded,
        so they cost nothing."""
        live, const = graph.live(), constant_nodes(graph)
        total = 0.0
        for n in graph.topo_order():
            if n.id not in live or n.id in const or n.op == "input":
                continue
            srcs = [(graph.nodes[p], i) for p, i in n.inputs]
            total += self.op_cost(n.op, n.a, [m.shapes[i] for m, i in srcs],
                                  consts=[m.id in const for m, _ in srcs],
                                  dtypes=[m.dtypes[i] for m, i in srcs])
        return total

    def predict_latency(self, graph: Graph) -> float:
        """Predicted milliseconds of one whole-model run: the nodes' costs plus
        the fixed cost of one run."""
        return self.graph_cost(graph) + self.overhead_ms

    @property
    def overhead_ms(self) -> float:
        if self._overhead is None:
            self._overhead = self._cached(OVERHEAD_KEY, self.time_overhead)
        return self._overhead

    def save(self) -> None:
        if self.cache is not None:
            self.cache.save()

    def _cached(self, key: Any, measure) -> float:
        ms = self.cache.get(self.name, self.device, key) if self.cache is not None else None
        if ms is None:
            start = time.perf_counter()
            ms = float(measure())
            self.measured += 1
            self.measure_seconds += time.perf_counter() - start
            if self.cache is not None:
                self.cache.put(self.name, self.device, key, ms)
        return ms
