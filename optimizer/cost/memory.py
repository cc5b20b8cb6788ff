"""Peak memory of a graph: the second objective of the weighted cost.

Activations are simulated in evaluation order: a node's outputs are allocated
when it runs and freed after their last consumer has run (graph outputs live to
the end). Constants are resident throughout; a subgraph computed from weights
alone counts as the weights it folds into after the search, not as what it
folds away. This is what a runtime with a liveness-based planner (onnxruntime's
default) needs, less kernel workspace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from taso.ir import Graph
from taso.ops import OPS

from . import CostModel, Shape


def tensor_bytes(shape: tuple[int, ...], dtype: str = "float32") -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def weight_bytes(graph: Graph) -> int:
    """Bytes of the constants the folded graph keeps: constant outputs that a
    computed node or a graph output reads."""
    live, const = graph.live(), graph.constant_nodes()
    kept = {ref for n in graph.topo_order() if n.id in live and n.id not in const
            for ref in n.inputs if ref[0] in const}
    kept |= {ref for ref in graph.outputs if ref[0] in const}
    return sum(tensor_bytes(graph.nodes[p].shapes[i], graph.nodes[p].dtypes[i]) for p, i in kept)


def peak_activation_bytes(graph: Graph) -> int:
    """The largest total size of activations alive at once (inputs included)."""
    live, const = graph.live(), graph.constant_nodes()
    order = [n for n in graph.topo_order() if n.id in live and n.id not in const]
    last_use: dict[tuple[int, int], int] = {}
    for step, n in enumerate(order):
        for ref in n.inputs:
            last_use[ref] = step
    for ref in graph.outputs:
        last_use[ref] = len(order)
    alive, peak = 0, 0
    for step, n in enumerate(order):
        out_bytes = [tensor_bytes(s, d) for s, d in zip(n.shapes, n.dtypes)]
        alive += sum(out_bytes)
        peak = max(peak, alive)  # inputs and all outputs coexist while the node runs
        alive -= sum(b for i, b in enumerate(out_bytes) if (n.id, i) not in last_use)
        for p, i in set(n.inputs):
            if last_use.get((p, i)) == step and p not in const:
                alive -= tensor_bytes(graph.nodes[p].shapes[i], graph.nodes[p].dtypes[i])
    return peak


def peak_memory_bytes(graph: Graph) -> int:
    """Resident constants plus the peak of live activations."""
    return weight_bytes(graph) + peak_activation_bytes(graph)


MIB = float(2**20)


class MemoryWeighted(CostModel):
    """A weighted sum of time and memory: milliseconds plus `memory_weight`
    milliseconds per MiB.

    `graph_cost` adds the weight times the graph's peak memory
    (`peak_memory_bytes`). Peak memory belongs to a whole graph, and the search
    ranks candidates by sums of node costs, so `op_cost` adds the weight times
    the MiB the node's outputs allocate: an additive stand-in that grows with the
    peak (a merged MatMul plus Split allocates its result twice) and steers the
    search the same way."""

    # The objective is not time alone: no timed verdict (and not the base's,
    # which `__getattr__` would hand out).
    time_models = compare_models = None

    def __init__(self, base: CostModel, memory_weight: float):
        self.base = base
        self.memory_weight = float(memory_weight)
        self.name = f"{base.name}+memory"
        self.device = base.device
        self.min_gain = base.min_gain
        self.measured_gain = base.measured_gain

    def op_cost(self, op: str, attrs: dict[str, Any], shapes: list[Shape], **kw: Any) -> float:
        return self.base.op_cost(op, attrs, shapes, **kw) + self.memory_weight * \
            output_bytes(op, attrs, shapes) / MIB

    def price_within(self, graph: Graph) -> None:
        self.base.price_within(graph)

    def begin_search(self, graph: Graph) -> None:
        self.base.begin_search(graph)

    def confirm(self, graph: Graph) -> bool:
        return self.base.confirm(graph)

    def end_search(self, graph: Graph | None) -> None:
        self.base.end_search(graph)

    def memory_cost(self, graph: Graph) -> float:
        return self.memory_weight * peak_memory_bytes(graph) / MIB

    def graph_cost(self, graph: Graph) -> float:
        return self.base.graph_cost(graph) + self.memory_cost(graph)

    def __getattr__(self, name: str) -> Any:
        # Everything else (cache, measured, save, predict_latency...) is the base's.
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)


def traffic_bytes(graph: Graph) -> int:
    """Bytes one run of `graph` touches at least once: the constants it reads
    and the activations it writes (its live computed nodes' outputs; reshapes
    are views)."""
    live, const = graph.live(), graph.constant_nodes()
    written = sum(output_bytes(n.op, n.a, [graph.nodes[p].shapes[i] for p, i in n.inputs])
                  for n in graph.topo_order()
                  if n.id in live and n.id not in const and n.op != "input")
    return written + weight_bytes(graph)


def output_bytes(op: str, attrs: dict[str, Any], shapes: list[Shape]) -> int:
    """Bytes one node's outputs allocate (float32); sources and views allocate none."""
    if op in ("input", "weight") or OPS[op].weight_only or OPS[op].view:
        return 0
    if op == "opaque":
        return sum(tensor_bytes(s, d) for s, d in zip(attrs["out_shapes"], attrs["out_dtypes"]))
    o = OPS[op]
    return sum(tensor_bytes(s) for s in o.out_shapes(o.resolve(dict(attrs), shapes), shapes))
