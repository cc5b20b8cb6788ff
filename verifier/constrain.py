"""Size constraints for generated rules that hold only where sizes agree.

The generator fingerprints candidates on one input family whose tensors share
sizes (every t-variable is 2x2x3x3, on its second shape 3x3x5x5), so a rule it
emits may hold only where some of those sizes agree, and is refuted as written:
merging two convolutions into one with two groups needs kernels with as many
output channels each, which TASO's rule says with a `same_dim` constraint and
the generated rule did not. `constrain_refuted` finds such constraints,
counterexample-guided: it tries the size equalities that the rule's last
counterexample breaks and that the family keeps on both its shapes, one more
each round, until Z3 proves the constrained rule, which then takes the refuted
one's place; then it drops every equality the proof does without. The record
keeps what was added and the refutation of the rule as generated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taso.generator.family import NAMED_SETS, Var, default_family
from taso.rules_db import Rule

# (variable, axis, other variable, other axis): as Rule.same_dims gives them.
Equality = tuple[str, int, str, int]

MAX_CONSTRAINTS = 4  # more would mean the rule is really about one set of sizes
BREADTH = 8  # equalities tried side by side each round (an unknown costs a timeout)


def family_vars() -> dict[str, Var]:
    """Every generator family's tensors by name (the names are the same
    tensor wherever two families share one: the scalar s0)."""
    out = {v.name: v for v in default_family()}
    for _, make in NAMED_SETS.values():
        out.update({v.name: v for v in make()})
    return out


def candidate_equalities(rule: Rule, fam: dict[str, Var] | None = None) -> list[Equality]:
    """Size equalities between the rule's variables that its family keeps on
    both of its shapes (so the fingerprints, which saw both, took them for
    granted), the same axis of two variables first. None without a family."""
    fam = fam or family_vars()
    of = (rule.provenance or {}).get("family") or {}
    shapes = {v: fam[f] for v, f in of.items() if f in fam and fam[f].alt is not None}
    axes = [(v, i) for v in rule.variables() if v in shapes
            for i in range(len(shapes[v].shape))]
    out = []
    for k, (v, i) in enumerate(axes):
        for w, j in axes[k + 1:]:
            a, b = shapes[v], shapes[w]
            if a.shape[i] == b.shape[j] and a.alt[i] == b.alt[j]:
                out.append((v, i, w, j))
    return sorted(out, key=lambda e: (e[1] != e[3], e[0] == e[2]))


def broken_by(equalities: Sequence[Equality], cex: dict[str, Any]) -> list[Equality]:
    """The equalities a counterexample's shapes break, in the order given."""
    s = cex.get("shapes") or {}
    return [e for e in equalities if e[0] in s and e[2] in s
            and s[e[0]][e[1]] != s[e[2]][e[3]]]


def with_equalities(rule: Rule, added: Sequence[Equality]) -> Rule:
    """`rule` with `added` as same_dim constraints (on the first variable of each)."""
    vars_ = {v: dict(c) for v, c in rule.vars.items()}
    for v, i, w, j in added:
        c = vars_.setdefault(v, {})
        c["same_dim"] = [*c.get("same_dim", ()), [i, w, j]]
    return Rule(rule.id, rule.src, rule.dst, rule.outputs, vars_, rule.provenance, {},
                list(rule.tags))


def constrain_refuted(rules: Sequence[Rule], verify: Callable[[list[Rule]], list[dict]],
                      max_constraints: int = MAX_CONSTRAINTS) -> dict[int, Rule]:
    """For each refuted rule of `rules` with a generator family, the constrained
    rule that `verify` (a batch of rules -> their records) proved, by index.
    Each round tries, for every rule still open, the first BREADTH equalities
    its last counterexample breaks on top of those added: the first proved wins, else
    the first refuted one goes on with its counterexample. Then each equality
    the proof does without is dropped, first added first."""
    fam = family_vars()
    originals = {k: r for k, r in enumerate(rules) if r.verification.get("status") == "refuted"
                 and r.verification.get("counterexample")}

    def records(tries: list[tuple[int, list[Equality]]]) -> list[dict]:
        return verify([with_equalities(originals[k], eqs) for k, eqs in tries]) if tries else []

    cands = {k: candidate_equalities(r, fam) for k, r in originals.items()}
    open_ = {k: ([], r.verification["counterexample"]) for k, r in originals.items()}
    found: dict[int, list[Equality]] = {}
    for _ in range(max_constraints):
        # the first equalities the counterexample breaks, each on top of those added
        tries = [(k, [*added, e]) for k, (added, cex) in open_.items()
                 for e in [e for e in broken_by(cands[k], cex) if e not in added][:BREADTH]]
        open_ = {}
        for (k, eqs), rec in zip(tries, records(tries)):  # in candidate order
            if k in found:
                continue
            if rec["status"] == "proved":
                found[k] = eqs
                open_.pop(k, None)
            elif rec["status"] == "refuted" and k not in open_:
                open_[k] = (eqs, rec["counterexample"])
    # Minimise: try each rule without its next equality, first added first.
    needed: dict[int, list[Equality]] = {k: [] for k in found}
    rest = dict(found)
    while rest:
        # with no equality left to try, a rule is as generated: refuted
        tries = [(k, needed[k] + eqs[1:]) for k, eqs in rest.items() if needed[k] or eqs[1:]]
        without = {k for (k, _), rec in zip(tries, records(tries)) if rec["status"] == "proved"}
        for k, eqs in rest.items():
            if k not in without:
                needed[k].append(eqs[0])
        rest = {k: eqs[1:] for k, eqs in rest.items() if eqs[1:]}
    out = {}
    tries = list(needed.items())
    for (k, eqs), rec in zip(tries, records(tries)):
        if rec["status"] == "proved":  # the record of the rule as it is kept
            r = with_equalities(originals[k], eqs)
            r.verification = {**rec, "constrained": [list(e) for e in eqs],
                              "as_generated": dict(originals[k].verification)}
            out[k] = r
    return out
