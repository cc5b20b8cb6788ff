"""Proof of one rule: axioms ∧ ok(both sides) ∧ ¬(src = dst) is unsat.

Each check runs in a fresh Z3 solver with a timeout, model-based quantifier
instantiation off (E-matching on the axioms' triggers only), and only the axioms
a rule can reach: those whose triggers mention operators the rule or the axioms
already taken in introduce. Axioms are tracked, so the unsat core names the
axioms the proof used.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import z3

from .axioms import AXIOMS, Axiom
from .encode import Encoding
from .terms import apps

_STATE: dict[str, Any] = {}
# E-matching instantiations one check may make. The largest proof of the
# shipped sets makes about 330; a false rule can make millions, and a solver
# grown that large takes longer to free (about 50 s at 250k) than to run.
# Stopping early only ever gives "unknown", never a proof.
QI_CAP = 50_000


def encoding() -> Encoding:
    """This process's encoding and compiled axioms (built once)."""
    if "enc" not in _STATE:
        z3.set_param("smt.mbqi", False)
        z3.set_param("smt.qi.max_instances", QI_CAP)
        enc = Encoding()
        _STATE["enc"] = enc
        _STATE["formulas"] = {ax.name: enc.axiom(ax) for ax in AXIOMS}
    return _STATE["enc"]


def formula(ax: Axiom) -> z3.BoolRef:
    encoding()
    if ax.name not in _STATE["formulas"]:
        _STATE["formulas"][ax.name] = _STATE["enc"].axiom(ax)
    return _STATE["formulas"][ax.name]


def trigger_ops(ax: Axiom) -> list[set[str]]:
    """For each trigger of an axiom, the operators it needs present."""
    return [{a.op for a in apps(g)} for g in ax.trigger_groups()]


# The last few axiom lists' trigger and operator sets, beside a snapshot of
# each list (its axioms kept alive, so their ids stay theirs; a list that grew,
# as AXIOMS does when a family registers, no longer matches). Reading these per
# rule from the axioms' terms took four fifths of a proof's time.
_TABLES: list[tuple[tuple[Axiom, ...], list[list[frozenset[str]]], list[set[str]]]] = []


def _table(axioms: Sequence[Axiom]) -> tuple[list[list[frozenset[str]]], list[set[str]]]:
    for kept, needs, gives in _TABLES:
        if len(kept) == len(axioms) and all(a is b for a, b in zip(kept, axioms)):
            return needs, gives
    needs = [[frozenset(n) for n in trigger_ops(ax)] for ax in axioms]
    gives = [ax.ops() for ax in axioms]
    _TABLES[:] = [(tuple(axioms), needs, gives), *_TABLES[:7]]
    return needs, gives


def relevant(ops: Iterable[str], axioms: Sequence[Axiom] = AXIOMS) -> list[Axiom]:
    """The axioms reachable from a problem over `ops`, in the order found: each
    pass over the list takes those whose triggers the operators so far meet."""
    needs, gives = _table(axioms)
    have, chosen, left = set(ops), [], range(len(axioms))
    while left:
        rest = []
        for i in left:
            if any(need <= have for need in needs[i]):
                chosen.append(axioms[i])
                have |= gives[i]
            else:
                rest.append(i)
        if len(rest) == len(left):
            break
        left = rest
    return chosen


def prove(rule, timeout: float = 10.0, axioms: Sequence[Axiom] = AXIOMS) -> dict[str, Any]:
    """Try to prove `rule`; returns {"proved": bool, "result": "unsat"|"sat"|"unknown",
    "axioms": [names used], "seconds": float}, and "vacuous": True when the proof
    did not need the goal (no shapes make both sides well-shaped)."""
    start = time.perf_counter()
    enc = encoding()
    hyps, goal, ops = enc.rule(rule)
    s = z3.Solver()
    s.set("timeout", max(1, int(timeout * 1000)))
    s.add(*hyps)
    s.assert_and_track(goal, z3.Bool("goal"))
    for ax in relevant(ops, axioms):
        s.assert_and_track(formula(ax), z3.Bool(f"ax:{ax.name}"))
    r = s.check()
    core = [str(c) for c in s.unsat_core()] if r == z3.unsat else []
    out = {"proved": r == z3.unsat, "result": str(r),
           "axioms": sorted(c[3:] for c in core if c.startswith("ax:")),
           "seconds": round(time.perf_counter() - start, 3),
           "reason": s.reason_unknown() if r == z3.unknown else ""}
    if r == z3.unsat and "goal" not in core:
        # both sides can never be well-shaped at once: true, but the rule never fires
        out["vacuous"] = True
    return out


def implied(ax: Axiom, timeout: float = 2.0, axioms: Sequence[Axiom] = AXIOMS) -> bool:
    """Whether the other axioms prove `ax` (its negation is unsat with them)."""
    others = [a for a in axioms if a.name != ax.name]
    s = z3.Solver()
    s.set("timeout", max(1, int(timeout * 1000)))
    s.add(z3.Not(formula(ax)))
    for a in relevant(ax.ops(), others):
        s.add(formula(a))
    return s.check() == z3.unsat
