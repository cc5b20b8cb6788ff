"""Refutation: evaluate both sides of a rule on random float inputs.

The shape solver picks variable shapes (and attribute-variable values) under
which every node of both sides is well-shaped; `taso.rules_db.instantiate`
builds the two sides as concrete graphs and `Graph.evaluate` runs the numpy
reference on the same inputs. A mapped output that differs in shape or beyond
float32 rounding is a counterexample. Agreement proves nothing: such a rule
stays unknown.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from taso.rules_db import instantiate

from taso.ops import ShapeError
from taso.ops.base import freeze

from .axioms import DOMAINS
from .shapes import solve
from .terms import App, IVar, mismatch, rule_conditions, rule_terms


def attribute_domains(rule) -> dict[str, list[Any]]:
    """Values to try for each attribute variable: those of the attribute it stands
    for (by the attribute's name), else those of its own name."""
    out: dict[str, list[Any]] = {}
    _, _, src_nodes, dst_nodes = rule_terms(rule)
    for t in [*src_nodes, *dst_nodes]:
        if isinstance(t, App):
            for k, v in t.attrs:
                if isinstance(v, IVar) and v.name not in out:
                    dom = DOMAINS.get(k, DOMAINS.get(v.name))
                    if dom is not None:
                        out[v.name] = dom
    return out


def refute(rule, seeds: int = 12, time_limit: float = 10.0) -> dict[str, Any] | None:
    """A counterexample to `rule` ({"shapes", "attrs", "seed", "output", "max_diff"}
    or a shape mismatch), or None if none was found."""
    start = time.perf_counter()
    _, _, src_nodes, dst_nodes = rule_terms(rule)
    ranks = {v: c.get("rank") for v, c in rule.vars.items()}
    domains = attribute_domains(rule)
    sizes = {1, 2, 3, 4} | {v for v in _ints_in(rule) if 0 < v <= 8}
    for seed in range(seeds):
        if time.perf_counter() - start > time_limit:
            break
        rng = np.random.default_rng(seed)
        try:
            sol = solve([*src_nodes, *dst_nodes], rule_conditions(rule), ranks, domains, rng,
                        sorted(sizes))
        except KeyError:  # an attribute variable with no known values
            return None
        if sol is None:
            continue
        shapes, ints = sol
        try:
            found = compare(rule, shapes, ints, seed)
        except (ShapeError, KeyError, ValueError):
            continue
        if found is not None:
            return {"shapes": {n: list(s) for n, s in shapes.items()},
                    "attrs": {n: _jsonable(x) for n, x in ints.items()}, "seed": seed,
                    **found}
    return None


def compare(rule, shapes: dict, ints: dict, seed: int) -> dict[str, Any] | None:
    """Evaluate both sides on the same seeded inputs (positive ones for odd seeds,
    e.g. for a variance under a square root); the first mapped output that
    differs ({"output", "max_diff"} or its two shapes), or None."""
    src, _ = instantiate(rule, "src", shapes, ints)
    dst, _ = instantiate(rule, "dst", shapes, ints)
    feeds = src.random_inputs(seed)
    feeds.update({k: v for k, v in dst.random_inputs(seed).items() if k not in feeds})
    if seed % 2:
        feeds = {k: np.abs(v) + v.dtype.type(0.1) for k, v in feeds.items()}
    for k, (u, v) in enumerate(zip(src.evaluate(feeds), dst.evaluate(feeds))):
        if u.shape != v.shape:
            return {"output": k, "src_shape": list(u.shape), "dst_shape": list(v.shape)}
        diff = mismatch(u, v)
        if diff is not None:
            return {"output": k, "max_diff": diff}
    return None


def replay(rule, cex: dict[str, Any]) -> dict[str, Any] | None:
    """Re-run a stored counterexample: the mismatch it shows, or None."""
    shapes = {n: tuple(s) for n, s in cex["shapes"].items()}
    ints = {n: freeze(v) for n, v in cex["attrs"].items()}
    return compare(rule, shapes, ints, cex["seed"])


def _ints_in(rule) -> set[int]:
    out: set[int] = set()

    def visit(v):
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            out.add(v)
        elif isinstance(v, (list, tuple)):
            for u in v:
                visit(u)
    for n in [*rule.src, *rule.dst]:
        for v in n.attrs.values():
            visit(v)
    return out


def _jsonable(v: Any) -> Any:
    return list(map(_jsonable, v)) if isinstance(v, tuple) else v
