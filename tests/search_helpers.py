"""Small helpers the search tests share (test_core, test_search, test_runner,
test_fusion_rules)."""

from __future__ import annotations

import numpy as np
from taso.optimizer.cost import get_cost_model
from taso.optimizer.engine import Engine

import taso


def ops(g: taso.Graph) -> dict[str, int]:
    """Live operator counts, inputs and weights left out."""
    counts: dict[str, int] = {}
    live = g.live()
    for n in g.nodes.values():
        if n.id in live and n.op not in ("input", "weight"):
            counts[n.op] = counts.get(n.op, 0) + 1
    return counts


def assert_same(a: taso.Graph, b: taso.Graph, tol: float = 1e-4) -> None:
    feeds = a.random_inputs(1)
    for x, y in zip(a.evaluate(feeds), b.evaluate(feeds)):
        assert x.shape == y.shape
        np.testing.assert_allclose(y, x, rtol=tol, atol=tol)


def engine(rules) -> Engine:
    return Engine(rules, get_cost_model("analytic"))


def chain(shapes) -> taso.Graph:
    """a @ b @ c with inputs of `shapes`."""
    g = taso.new_graph()
    a, b, c = (g.new_input(s, name=n) for s, n in zip(shapes, "abc"))
    g.mark_output(g.matmul(g.matmul(a, b), c))
    return g
