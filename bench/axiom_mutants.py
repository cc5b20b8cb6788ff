"""Can the axiom checks fail? Mutate every axiom and count the false mutants they catch.

Each axiom is mutated in small ways: the operands of one operator swapped, one
axis changed (an axis attribute, or the axis of a size in a guard), one guard
dropped, one activation or other literal attribute changed, one variable of the
right side renamed to another. A mutant is then

- caught: the numeric check the test suite runs (`check_axiom` over the seeds
  tests/test_axioms.py uses) finds a counterexample;
- true: Z3 proves it from the unmutated axioms (a dropped guard that another
  guard implies, swapped operands of a commutative operator);
- missed: neither, but a much longer numeric check (`--deep` seeds) finds a
  counterexample: false, and the suite's checks did not see it;
- undecided: neither proved nor refuted; listed for reading by hand.

The score is caught / (caught + missed + undecided): undecided mutants count
against the checks until someone shows them true.

    python bench/axiom_mutants.py [--seeds N] [--deep 48] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from taso.verifier.axioms import ACTIVATIONS, AXIOMS, Axiom, check_axiom, check_seeds
from taso.verifier.terms import App, Cmp, Dim, IVar, Var

from taso.ops import OPS


def _nodes(t: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every sub-term of a term with its path (indices into args/attrs)."""
    yield path, t
    if isinstance(t, App):
        for i, a in enumerate(t.args):
            yield from _nodes(a, (*path, ("arg", i)))
    elif isinstance(t, Dim):
        yield from _nodes(t.t, (*path, ("t",)))


def _replace_at(t: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    step, rest = path[0], path[1:]
    if step[0] == "arg":
        args = list(t.args)
        args[step[1]] = _replace_at(args[step[1]], rest, new)
        return replace(t, args=tuple(args))
    return replace(t, t=_replace_at(t.t, rest, new))


def _other_value(op: str, key: str, v: Any) -> Any:
    """A different value of an attribute, or None."""
    if key in OPS[op].axes:
        if isinstance(v, int):
            return v + 1
        if isinstance(v, IVar):
            return 0
    if key == "activation" and isinstance(v, str):
        return ACTIVATIONS[(ACTIVATIONS.index(v) + 1) % len(ACTIVATIONS)]
    if key == "perm" and isinstance(v, tuple) and len(v) > 1 and all(isinstance(p, int)
                                                                      for p in v):
        return v[1:] + v[:1]
    if key in ("strides", "dilations") and isinstance(v, tuple) and v == (1, 1):
        return (2, 2)
    if key == "pads" and v == "same":
        return "valid"
    if key == "groups" and isinstance(v, int):
        return v + 1
    return None


def mutants(ax: Axiom) -> Iterator[tuple[str, Axiom]]:
    """(kind, mutant) pairs of one axiom."""
    n = [0]

    def named(kind: str, **changes: Any) -> tuple[str, Axiom]:
        n[0] += 1
        return kind, replace(ax, name=f"{ax.name}~{kind}{n[0]}", **changes)

    sides = {"lhs": ax.lhs} if ax.rel != "==" or not isinstance(ax.rhs, (App, Var)) else \
        {"lhs": ax.lhs, "rhs": ax.rhs}
    for side, term in sides.items():
        for path, t in _nodes(term):
            if not isinstance(t, App):
                continue
            if len(t.args) >= 2 and t.args[0] != t.args[1]:
                args = (t.args[1], t.args[0], *t.args[2:])
                yield named("swap", **{side: _replace_at(term, path, replace(t, args=args))})
            for i, (k, v) in enumerate(t.attrs):
                w = _other_value(t.op, k, v)
                if w is not None:
                    attrs = (*t.attrs[:i], (k, w), *t.attrs[i + 1:])
                    kind = "axis" if k in OPS[t.op].axes else "attribute"
                    yield named(kind, **{side: _replace_at(term, path, replace(t, attrs=attrs))})
    if isinstance(ax.rhs, (App, Var)) and ax.rel == "==":
        variables = ax.tensor_vars()
        for path, t in _nodes(ax.rhs):
            if isinstance(t, Var):
                for other in variables:
                    if other != t.name:
                        yield named("variable", rhs=_replace_at(ax.rhs, path, Var(other)))
                        break
    for i, c in enumerate(ax.when):
        yield named("guard", when=ax.when[:i] + ax.when[i + 1:])
        if isinstance(c, Cmp):
            for end in ("a", "b"):
                d = getattr(c, end)
                if isinstance(d, Dim) and isinstance(d.axis, int):
                    moved = replace(c, **{end: replace(d, axis=d.axis + 1)})
                    yield named("axis", when=(*ax.when[:i], moved, *ax.when[i + 1:]))


def _caught(ax: Axiom, seeds: range) -> int | None:
    """The first seed whose check finds a counterexample, or None."""
    for seed in seeds:
        try:
            if check_axiom(ax, seed).status == "violated":
                return seed
        except Exception:  # a mutant the reference cannot even evaluate: not caught
            return None
    return None


def _judge(args: tuple[str, Axiom, int, int, float]) -> dict[str, Any]:
    kind, m, seeds, deep, timeout = args  # seeds: the suite's for the unmutated axiom
    out = {"name": m.name, "kind": kind, "statement": repr((m.lhs, m.rhs, m.when))}
    seed = _caught(m, range(seeds))
    if seed is not None:
        return {**out, "verdict": "caught", "seed": seed}
    from taso.verifier.prove import implied
    try:
        true = implied(m, timeout)
    except (ValueError, KeyError) as e:  # a trigger the mutant no longer covers
        true, out["note"] = False, f"Z3 cannot state it: {e!r}"
    if true:
        return {**out, "verdict": "true"}
    seed = _caught(m, range(seeds, seeds + deep))
    return {**out, "verdict": "missed" if seed is not None else "undecided", "seed": seed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=None,
                    help="seeds of the suite's check (default: check_seeds, as the tests)")
    ap.add_argument("--deep", type=int, default=48,
                    help="seeds of the longer check, past the suite's")
    ap.add_argument("--timeout", type=float, default=5.0, help="Z3 seconds per mutant")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="axioms whose name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    axioms = [a for a in AXIOMS if not args.only or args.only in a.name]
    jobs = [(k, m, args.seeds or check_seeds(a), args.deep, args.timeout)
            for a in axioms for k, m in mutants(a)]
    start = time.perf_counter()
    results = []
    with ProcessPoolExecutor(args.workers) as ex:
        for r in ex.map(_judge, jobs, chunksize=4):
            results.append(r)
            if not args.json and r["verdict"] in ("missed", "undecided"):
                print(f"  ({len(results)}/{len(jobs)}) {r['verdict']}: {r['name']}",
                      file=sys.stderr, flush=True)
            elif len(results) % 100 == 0:
                print(f"  {len(results)}/{len(jobs)} mutants judged", file=sys.stderr,
                      flush=True)
    verdicts = Counter(r["verdict"] for r in results)
    false = verdicts["caught"] + verdicts["missed"] + verdicts["undecided"]
    score = verdicts["caught"] / false if false else 1.0
    summary = {"axioms": len(axioms), "mutants": len(results), **dict(verdicts),
               "caught_share": round(score, 4), "seconds": round(time.perf_counter() - start, 1),
               "by_kind": {k: dict(Counter(r["verdict"] for r in results if r["kind"] == k))
                           for k in sorted({r["kind"] for r in results})},
               "survivors": [r for r in results if r["verdict"] in ("missed", "undecided")]}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{summary['mutants']} mutants of {summary['axioms']} axioms: caught "
              f"{verdicts['caught']}, true {verdicts['true']}, missed {verdicts['missed']}, "
              f"undecided {verdicts['undecided']}; caught {100 * score:.1f}% of the false "
              f"({summary['seconds']} s)")
        for k, v in summary["by_kind"].items():
            print(f"  {k:<10} " + ", ".join(f"{a} {b}" for a, b in sorted(v.items())))
        for r in summary["survivors"]:
            print(f"{r['verdict']}: {r['name']}  {r['statement']}"
                  + (f"  (deep seed {r['seed']})" if r.get("seed") is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
