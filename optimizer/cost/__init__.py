"""Cost models: what one node of a graph costs, in milliseconds.

The search obtains every cost through `CostModel.op_cost`, one call per distinct
cost key (operator, attributes, input shapes), so a measured model plugs in
without the search knowing. Models register a factory in `COST_MODELS` under
their name; `get_cost_model` turns a name, an instance or a plain function into
a model.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from taso.ir import SOURCES

Shape = tuple[int, ...]

# Nodes that run nothing: graph inputs and weights are data, not work.
SOURCE_OPS = SOURCES


class CostModel:
    """Base class. Subclasses override `op_cost`; `graph_cost` sums it."""

    name: str = ""
    device: str = ""  # identifies the device, part of persistent cache keys
    # The search keeps a rewrite of a piece only when the piece's graph_cost
    # falls by more than this fraction. Exact models trust any gain; a measured
    # one cannot tell a small predicted gain from its own timing spread.
    min_gain: float = 0.0
    # With `compare_models` (or `time_models`), the optimized whole model is
    # kept only when it measures faster than the original by more than this
    # fraction.
    measured_gain: float = 0.0

    def price_within(self, graph: Any) -> None:
        """Say which whole model the graphs priced next belong to (pieces of it,
        rewrites of it). A model that times nodes on a device uses it to leave
        the caches as that model would; the others ignore it."""

    def begin_search(self, graph: Any) -> None:
        """A search of `graph` starts (a measured model times its keys here)."""

    def confirm(self, graph: Any) -> bool:
        """A round of the search chose `graph`: True where pricing it for certain
        changed its cost, so that the search is to run again. Exact models: never."""
        return False

    def end_search(self, graph: Any) -> None:
        """The search chose `graph` (None: it ended without a choice)."""

    def time_ahead(self, graphs: Any) -> None:
        """The graphs (an iterable) about to be priced whole: a measured model
        times what pricing them would time, in one batch."""

    def op_cost(self, op: str, attrs: dict[str, Any], shapes: list[Shape]) -> float:
        """Milliseconds for one node of registered operator `op` with these
        attributes and input shapes."""
        raise NotImplementedError

    def weight_byte_cost(self) -> float:
        """Milliseconds that one more byte of constants adds to a run. A run reads
        every weight once, so a rewrite that concatenates weights which other
        nodes still read (a recurrent weight merged at some time steps) makes
        every run stream the copy too, which no node's cost shows. Priced as
        the cheapest way a model reads a weight: a one-row product by it, per
        byte (1024 x 1024 floats); 0 for a model that cannot price that."""
        n = 1024
        try:
            ms = float(self.op_cost("matmul", {"activation": "none"}, [(1, n), (n, n)]))
        except (NotImplementedError, KeyError, TypeError, ValueError):
            return 0.0
        return max(ms, 0.0) / (4 * n * n)

    def graph_cost(self, graph: Any) -> float:
        """Sum of `op_cost` over the live nodes that compute at run time. Nodes
        computed from weights alone are folded into initializers before the
        model runs, so they cost nothing (sources cost what the model says)."""
        live = graph.live()
        const = graph.constant_nodes()
        total = 0.0
        for n in graph.topo_order():
            if n.id not in live or (n.id in const and n.op != "weight"):
                continue
            shapes = [graph.nodes[p].shapes[i] for p, i in n.inputs]
            total += self.op_cost(n.op, n.a, shapes)
        return total


class FunctionCost(CostModel):
    """A plain function (op, attrs, shapes) -> milliseconds as a cost model."""

    name = "custom"

    def __init__(self, fn: Callable[[str, dict, list[Shape]], float], device: str = ""):
        self.fn = fn
        self.device = device

    def op_cost(self, op, attrs, shapes):
        return float(self.fn(op, attrs, shapes))


class CostModelUnavailable(RuntimeError):
    """A cost model this machine cannot run (no GPU, a missing optional package)."""


COST_MODELS: dict[str, Callable[..., CostModel]] = {}

# Modules that register a cost model when imported, by name.
_PROVIDERS = {"analytic": "analytic", "ort": "ort", "cupy": "cupy_backend"}


def register_cost_model(name: str) -> Callable:
    """Decorator: register a CostModel factory (usually the class) under `name`."""

    def deco(factory):
        COST_MODELS[name] = factory
        return factory

    return deco


def get_cost_model(spec: str | CostModel | Callable, **options: Any) -> CostModel:
    """A cost model from a registered name ("analytic", "ort", "cupy"), an
    instance (returned as is) or a function (op, attrs, shapes) -> ms."""
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, str):
        if spec not in COST_MODELS and spec in _PROVIDERS:
            importlib.import_module(f"{__name__}.{_PROVIDERS[spec]}")
        if spec not in COST_MODELS:
            known = ", ".join(sorted(set(COST_MODELS) | set(_PROVIDERS)))
            raise ValueError(f"unknown cost model {spec!r}; known: {known}")
        return COST_MODELS[spec](**options)
    if callable(spec):
        return FunctionCost(spec, **options)
    raise TypeError(f"not a cost model: {spec!r}")


__all__ = ["COST_MODELS", "CostModel", "CostModelUnavailable", "FunctionCost",
           "get_cost_model", "register_cost_model"]
