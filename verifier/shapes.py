"""A small shape solver: find variable shapes (and attribute-variable values)
under which given terms are well-shaped and given conditions hold.

It never restates an operator's shape rule: it proposes candidates and lets the
operators' own shape rules (through `TermEvaluator`) reject them, backtracking over
variables in order of first use. Candidates for a variable are shapes already
in play (so operands of elementwise ops tend to agree), those shapes with one
axis changed (so kernels fit inputs and concat parts differ on the concat axis),
then random shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from taso.ops import OPS

from .terms import IVar, Ok, TermEvaluator, Var, apps, int_vars, tensor_vars, walk

Shape = tuple[int, ...]


class Budget(Exception):
    """The search ran out of candidate checks."""


def solve(ok_terms: Sequence[Any], conds: Sequence[Any] = (),
          ranks: dict[str, int | None] | None = None,
          domains: dict[str, Sequence[Any]] | None = None,
          rng: np.random.Generator | None = None, sizes: Iterable[int] = (1, 2, 3),
          budget: int = 4000, free_ranks: Sequence[int] = (1, 2, 3, 4),
          ) -> tuple[dict[str, Shape], dict[str, Any]] | None:
    """Shapes for the tensor variables and values for the attribute variables of
    `ok_terms` and `conds` such that every term is well-shaped and every
    condition holds; None if none is found within `budget` candidate checks.
    A variable of no given rank takes one of `free_ranks` (or of a shape in
    play)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    ranks = {**rank_hints(ok_terms), **{v: r for v, r in (ranks or {}).items() if r is not None}}
    domains = domains or {}
    everything = [*ok_terms, *conds]
    tvars = tensor_vars(everything)
    ivars = int_vars(everything)
    for v in ivars:
        if v not in domains:
            raise KeyError(f"no value domain for attribute variable ?{v}")
    checks = [(c, _vars_of(c)) for c in [*map(Ok, apps(ok_terms)), *conds]]
    sizes = sorted(set(sizes))
    state = {"left": budget}
    order = [("i", v) for v in ivars] + [("t", v) for v in tvars]
    shapes: dict[str, Shape] = {}
    ints: dict[str, Any] = {}

    seen: dict[Shape, None] = {}  # shapes of sub-terms computed so far: candidates too

    # Each check is decided at the level of its last variable in `order`: the
    # earlier levels' checks hold for the values assigned above it.
    level = {key: k for k, key in enumerate(order)}
    due: list[list[Any]] = [[] for _ in order]
    for c, vs in checks:
        if vs:
            due[max(level[v] for v in vs)].append(c)

    def consistent(k: int) -> bool:
        ev = TermEvaluator(shapes, ints)
        for c in due[k]:
            if not ev.holds(c):
                return False
            if isinstance(c, Ok):
                seen.setdefault(ev.shape(c.t))
        return True

    def candidates(kind: str, v: str) -> list[Any]:
        if kind == "i":
            vals = list(domains[v])
            return [vals[i] for i in rng.permutation(len(vals))]
        # the latest assigned first: the operands of one operator often agree
        return _shape_candidates(ranks.get(v), [*reversed(shapes.values()), *seen], sizes,
                                 rng, free_ranks)

    def search(k: int) -> bool:
        if k == len(order):
            return True
        kind, v = order[k]
        for c in candidates(kind, v):
            state["left"] -= 1
            if state["left"] < 0:
                raise Budget
            (ints if kind == "i" else shapes)[v] = c
            if consistent(k) and search(k + 1):
                return True
            del (ints if kind == "i" else shapes)[v]
        return False

    if any(not vs for _, vs in checks):  # a check of no variable: decided once
        ev = TermEvaluator(shapes, ints)
        if not all(ev.holds(c) for c, vs in checks if not vs):
            return None
    try:
        return (dict(shapes), dict(ints)) if search(0) else None
    except Budget:
        return None


def rank_hints(terms: Sequence[Any]) -> dict[str, int]:
    """Ranks of the variables read where an operator takes one rank only
    (`Op.input_ranks`: a conv's input, a batch norm's parameters)."""
    out: dict[str, int] = {}
    for t in apps(terms):
        op = OPS[t.op]
        if op.input_ranks and not op.variadic:
            for name, a in zip(op.inputs, t.args):
                if isinstance(a, Var) and name in op.input_ranks:
                    out.setdefault(a.name, op.input_ranks[name])
    return out


def _vars_of(t: Any) -> set[str]:
    return {("t" if isinstance(u, Var) else "i", u.name) for u in walk(t)
            if isinstance(u, (Var, IVar))}


def _shape_candidates(rank: int | None, shapes: list[Shape], sizes: list[int],
                      rng: np.random.Generator, free_ranks: Sequence[int] = (1, 2, 3, 4),
                      n_random: int = 24) -> list[Shape]:
    """Candidate shapes for a variable: shapes in play (`shapes`, the latest
    assigned first), those with one axis changed, random ones; in an order
    drawn from `rng`."""
    known = list(dict.fromkeys(shapes))
    ranks = [rank] if rank is not None else \
        list(dict.fromkeys([*(len(s) for s in known),
                            *rng.permutation(list(free_ranks)).tolist()]))
    same = [s for s in known if len(s) in ranks]
    mutated = [s[:ax] + (d,) + s[ax + 1:] for s in same for ax in range(len(s)) for d in sizes]
    if 1 in ranks:  # per-channel vectors: one axis of a shape in play
        mutated += [(d,) for s in known for d in s]
    fresh = [() for r in ranks if r == 0] + [
        tuple(int(d) for d in rng.choice(sizes, size=r))
        for r in (ranks[int(rng.integers(len(ranks)))] for _ in range(n_random))]
    # Mostly reuse shapes in play, but not always: a check must also meet operands
    # that differ where the operators allow it.
    groups = [same, mutated, fresh]
    roll = rng.random()
    if roll > 0.8:
        groups = [fresh, mutated, same]
    elif roll > 0.5:
        groups = [mutated, same, fresh]
    out: dict[Shape, None] = {}
    for g in groups:
        # the shape in play named first (the latest assigned) keeps its place:
        # a bias after a scale, a kernel's twin
        order = [0, *(1 + rng.permutation(len(g) - 1))] if g is same and g else \
            rng.permutation(len(g))
        for i in order:
            out.setdefault(g[i])
    return list(out)
