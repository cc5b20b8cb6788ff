"""The numeric check of an axiom: evaluated with the numpy reference on shapes
the shape solver finds and random values. A violation is a counterexample, and
a false axiom would make every proof worthless; tests/test_axioms.py runs it for
every axiom."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taso.tolerance import scaled_mismatch as mismatch

from ..shapes import solve
from ..terms import App, Ok, Var, apps
from ..terms import TermEvaluator as Evaluator
from .dsl import DOMAINS, Axiom, check_domains


@dataclass
class Outcome:
    status: str  # "held" (compared on well-shaped values), "vacuous" or "violated"
    detail: dict = field(default_factory=dict)


def _guards(ax: Axiom) -> tuple[list[Any], list[Any]]:
    oks = [c.t for c in ax.when if isinstance(c, Ok)]
    cmps = [c for c in ax.when if not isinstance(c, Ok)]
    return oks, cmps


def check_seeds(ax: Axiom) -> int:
    """How many seeds an axiom's check draws (the test suite's, scored by
    bench/axiom_mutants.py): 12, and 8 more for each tensor variable past four,
    since a counterexample must then line up more sizes at once (a split of a
    six-way concat is first caught near seed 28)."""
    return max(12, 8 * (len(ax.tensor_vars()) - 2))


def check_axiom(ax: Axiom, seed: int, budget: int = 2000) -> Outcome:
    """Evaluate `ax` on the numpy reference: find shapes where its guards hold and
    one side is well-shaped, draw values, and compare both sides in the ⊥ model
    (also with one variable set to ⊥). A violation is a counterexample."""
    rng = np.random.default_rng(seed)
    oks, cmps = _guards(ax)
    tensor_eq = ax.rel == "==" and isinstance(ax.lhs, (Var, App))
    # Draws: for an equation of tensors, one where each side is well-shaped; for
    # a size or definedness axiom, one where its applications are well-shaped
    # (not for "ok": that is its conclusion) and one where only its guards
    # hold, so that a forgotten guard lets an ill-shaped application through.
    sides: list[Any] = [ax.lhs, ax.rhs] if tensor_eq else \
        ["guards"] if ax.rel == "ok" else [None, "guards"]
    # Seeds cycle through four kinds of draw: one within the values operators
    # accept (DOMAINS) and the ranks the family uses, and three adding the
    # values an axiom must survive though no rule binds them (EDGES: negative
    # and out-of-range axes, counts of zero or below), one of which also
    # leaves ranks to the solver, where an axiom whose guard forgets a rank
    # its family always has is caught. Odd seeds draw values four times larger.
    kind = seed % 4
    domains = DOMAINS if kind == 0 else check_domains()
    ranks = {} if kind == 2 else ax.ranks
    free = (0, 1, 2, 3, 4, 5) if kind == 2 else (1, 2, 3, 4)
    scale = np.float32(4.0 if seed % 2 else 1.0)
    status = "vacuous"
    for side in sides:
        terms = [*oks, *([side] if isinstance(side, App) else [])]
        if side is None:
            terms += apps([ax.lhs, ax.rhs])
        sol = solve(terms, cmps, ranks=ranks, domains=domains, rng=rng, sizes=ax.sizes,
                    budget=budget, free_ranks=free)
        if sol is None:
            continue
        shapes, ints = sol
        for v in ax.tensor_vars():
            r = ranks.get(v, int(rng.choice(free)))
            shapes.setdefault(v, tuple(int(d) for d in rng.choice(ax.sizes, r)))
        for v in ax.int_vars():
            ints.setdefault(v, domains[v][int(rng.integers(len(domains[v])))])
        values = {v: (rng.standard_normal(sh) * scale).astype(np.float32)
                  for v, sh in shapes.items()}
        for v in ax.positive:
            values[v] = np.abs(values[v]) + np.float32(0.1)
        bad = _compare(ax, shapes, ints, values, tensor_eq)
        if bad:
            return Outcome("violated", bad)
        status = "held"
        # the same assignment with one variable ⊥ (unguarded axioms must survive it)
        if not ax.tensor_vars():
            continue
        v = ax.tensor_vars()[int(rng.integers(len(ax.tensor_vars())))]
        bad = _compare(ax, {**shapes, v: None}, ints, {**values, v: None}, tensor_eq)
        if bad:
            return Outcome("violated", {**bad, "bottom": v})
    return Outcome(status)


def _compare(ax: Axiom, shapes, ints, values, tensor_eq: bool) -> dict:
    ev = Evaluator(shapes, ints, values)
    if not all(ev.holds(c) for c in ax.when):
        return {}
    info = {"shapes": shapes, "ints": ints}
    if ax.rel == "ok":
        return {} if ev.shape(ax.lhs) is not None else {**info, "lhs": None}
    if not tensor_eq:
        a, b = ev.int(ax.lhs), ev.int(ax.rhs)
        good = a >= b if ax.rel == ">=" else a == b
        return {} if good else {**info, "lhs": a, "rhs": b}
    la, ra = ev.value(ax.lhs), ev.value(ax.rhs)
    if la is None and ra is None:
        return {}
    if la is None or ra is None or la.shape != ra.shape:
        return {**info, "lhs_shape": None if la is None else la.shape,
                "rhs_shape": None if ra is None else ra.shape}
    diff = mismatch(la, ra, rtol=1e-4)
    return {} if diff is None else {**info, "max_diff": diff}
