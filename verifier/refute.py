"""Refutation: evaluate both sides of a rule on random float inputs.

The shape solver picks variable shapes and attribute-variable values under
which every node of both sides is well-shaped and the rule's hypotheses hold
(its constraints, axes in range: what the proof assumes); `instantiate`
(taso.rules_db.pattern) builds the two sides as concrete graphs and
`Graph.evaluate` runs the numpy reference on the same inputs, drawn inside each
operator's domain (a variance positive). A mapped output that differs in shape
or beyond float32 rounding is a counterexample. A draw where either side is
NaN says nothing and the next one is tried. Agreement proves nothing: such a
rule stays unknown.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from taso.rules_db import instantiate
from taso.rules_db.pattern import checked

from taso.ops import OPS, ShapeError
from taso.ops.base import freeze
from taso.tolerance import REFUTE_RTOL, scaled_mismatch

from .axioms import DOMAINS
from .shapes import solve
from .terms import App, IVar, axis_conditions, rule_conditions, rule_terms

_ELEMENT = [1, 2, 3]  # an attribute variable inside a list: a size, a stride
_BY_DEFAULT = {bool: [0, 1], int: [0, 1, 2, 3], float: [1.0, 0.5, 2.0]}


def attribute_domains(rule) -> dict[str, list[Any]]:
    """Values to try for each attribute variable: those of the attribute it
    stands for (by the attribute's name), else those of its own name, else
    values of the attribute's type. Variables inside a list (split sizes) take
    their own name's values, else small positive sizes."""
    out: dict[str, list[Any]] = {}
    _, _, src_nodes, dst_nodes = rule_terms(rule)

    def visit(v: Any, key: str, default: Any, nested: bool) -> None:
        if isinstance(v, IVar) and v.name not in out:
            dom = DOMAINS.get(v.name) if nested else DOMAINS.get(key, DOMAINS.get(v.name))
            if dom is None:
                dom = _ELEMENT if nested else _BY_DEFAULT.get(type(default), [0, 1, 2])
            out[v.name] = dom
        elif isinstance(v, tuple):
            for u in v:
                visit(u, key, default, True)

    for t in [*src_nodes, *dst_nodes]:
        if isinstance(t, App):
            for k, v in t.attrs:
                visit(v, k, OPS[t.op].attrs.get(k), False)
    return out


def positive_vars(rule) -> set[str]:
    """Variables read where an operator is defined only for positive values."""
    out: set[str] = set()
    for n in [*rule.src, *rule.dst]:
        op = OPS[n.op]
        names = op.inputs if not op.variadic else ()
        for name, r in zip(names, n.inputs):
            if name in op.positive and isinstance(r, str):
                out.add(r)
    return out


def refute(rule, seeds: int = 200, time_limit: float = 10.0,
           sizes: tuple[int, ...] = (1, 2, 3, 4)) -> dict[str, Any] | None:
    """A counterexample to `rule` ({"shapes", "attrs", "seed", "output", "max_diff"}
    or a shape mismatch), or None if none was found in `seeds` draws (or
    `time_limit` seconds) of shapes with axes of `sizes` and of the sizes the
    rule names."""
    start = time.perf_counter()
    rule = checked(rule)
    _, _, src_nodes, dst_nodes = rule_terms(rule)
    ranks = {v: c.get("rank") for v, c in rule.vars.items()}
    domains = attribute_domains(rule)
    conds = [*rule_conditions(rule), *axis_conditions(rule)]
    # Sizes the rule names (a group count of 16 needs 16 channels) join the
    # small ones; draws in turn also take larger sizes (a product whose inner
    # size is a sum of parts), empty axes (where two sides differ only in
    # shape), and both, with a longer search (an empty axis beside a group
    # count of 16).
    named = set(sizes) | {v for v in _ints_in(rule) if 0 < v <= 64}
    large = named | {5, 6, 8, 12, 16}
    size_sets = [(sorted(named), 4000), (sorted(named), 4000), (sorted(large), 4000),
                 (sorted(named | {0}), 16000), (sorted(large | {0}), 8000)]
    for seed in range(seeds):
        if time.perf_counter() - start > time_limit:
            break
        rng = np.random.default_rng(seed)
        sizes_now, budget = size_sets[seed % len(size_sets)]
        sol = solve([*src_nodes, *dst_nodes], conds, ranks, domains, rng, sizes_now,
                    budget=budget)
        if sol is None:
            continue
        shapes, ints = sol
        try:
            found = compare(rule, shapes, ints, seed)
        except (ShapeError, KeyError, ValueError):
            continue
        if found and "nan" not in found:
            return {"shapes": {n: list(s) for n, s in shapes.items()},
                    "attrs": {n: _jsonable(x) for n, x in ints.items()}, "seed": seed,
                    **found}
    return None


def compare(rule, shapes: dict, ints: dict, seed: int) -> dict[str, Any] | None:
    """Evaluate both sides on the same seeded inputs (positive ones for odd seeds
    and wherever an operator needs them); the first mapped output that differs
    ({"output", "max_diff"} or its two shapes), {"nan": output} where a side
    is NaN (no evidence either way), or None."""
    rule = checked(rule)
    src, _ = instantiate(rule, "src", shapes, ints)
    dst, _ = instantiate(rule, "dst", shapes, ints)
    feeds = src.random_inputs(seed)
    feeds.update({k: v for k, v in dst.random_inputs(seed).items() if k not in feeds})
    positive = positive_vars(rule)
    feeds = {k: (np.abs(v) + v.dtype.type(0.1) if seed % 2 or k in positive else v)
             for k, v in feeds.items()}
    for k, (u, v) in enumerate(zip(src.evaluate(feeds), dst.evaluate(feeds))):
        if u.shape != v.shape:
            return {"output": k, "src_shape": list(u.shape), "dst_shape": list(v.shape)}
        if np.isnan(u).any() or np.isnan(v).any():
            return {"nan": k}
        diff = scaled_mismatch(u, v, REFUTE_RTOL)
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
