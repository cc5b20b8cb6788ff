"""The adversarial false-rule corpus: build it, verify it, report it.

Deliberately false rules are made from the shipped, proved rules (TASO's set, the
hand-written fusion set and a spread of the generated set, so that every
operator they use is perturbed) by one small perturbation of the target side each:
an axis, a permutation, a stride, a padding, an activation, the order of a
non-commutative operator's operands, a split size, a broadcast (a bias
reshaped along another axis, a size constraint dropped), an operator swapped
for a neighbour, a variable swapped for another, two mapped outputs swapped.

    python bench/false_rules.py --write    # rebuild tests/data/false_rules.json
    python bench/false_rules.py            # verify the committed corpus, report

A perturbation can leave a rule true (an axis that both operands share, a
transpose of a square identity): the corpus keeps only mutants the verifier
refutes with a counterexample that replays on the numpy reference, or leaves
unknown, and `--write` prints every mutant it dropped as proved, with the
reason read by hand (a false one proved would be a soundness bug, not a drop).
Every corpus rule must come back refuted or unknown, never proved
(tests/test_false_rules.py); the report lists the unknowns with their reasons.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from taso.rules_db import SHIPPED, Rule, RuleSet, load
from taso.rules_db.pattern import RuleError, checked
from taso.verifier.refute import replay
from taso.verifier.run import verify_rules

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "false_rules.json"
SOURCES = ("taso.json", "fusion.json", "generated.json")
PER_KIND = 20  # mutants of one kind, spread over the sources
PER_OP = 6  # mutants of rules using each operator

# Operators swapped for a neighbour of the same signature.
SWAP = {"ewadd": "ewmul", "ewmul": "ewadd", "relu": "sigmoid", "sigmoid": "tanh",
        "tanh": "relu", "maxpool2d": "avgpool2d", "avgpool2d": "maxpool2d", "add": "mul",
        "mul": "add", "sub": "add", "bn_kernel": None}
ACTS = {"none": "relu", "relu": "tanh", "sigmoid": "none", "tanh": "sigmoid"}
NONCOMMUTATIVE = {"matmul", "conv2d", "concat", "sub", "conv2d_bias", "gemm"}


def _mutate_value(key: str, v):
    """The perturbed values of one attribute, with the kind of perturbation."""
    if key == "axis" and isinstance(v, int):
        yield "axis", 1 - v if v in (0, 1) else 0
    elif key == "perm" and isinstance(v, list):
        yield "perm", v[1:] + v[:1]
    elif key == "strides":
        yield "stride", [2, 2] if v in ([1, 1], "?s") else [1, 1]
    elif key == "pads":
        yield "pad", "valid" if v in ("same", "?p") else "same"
    elif key == "activation":
        yield "activation", ACTS.get(v, "relu")
    elif key == "sizes" and isinstance(v, list) and len(v) >= 2:
        yield "split-size", v[::-1]
    elif key == "shape" and isinstance(v, list) and len(v) == 4 and v[0] == 1:
        yield "broadcast", [1, 1, 1, v[1]]
    elif key == "groups" and isinstance(v, int):
        yield "group", v * 2
    elif key == "kernel" and isinstance(v, list) and all(isinstance(k, int) for k in v):
        yield "kernel", [k + 2 for k in v]


def mutants(r: dict) -> Iterator[tuple[str, str, dict]]:
    """(kind, description, mutant) for each perturbation of one rule's target."""
    def out(kind, what, new):
        new["id"] = f"{r['id']}~{kind}~{len(seen)}"
        new["provenance"] = {"mutant_of": r["id"], "kind": kind, "mutation": what}
        new["verification"] = {}
        seen.append(new["id"])
        return kind, what, new

    seen: list[str] = []
    variables = list(r["vars"])
    for j, n in enumerate(r["dst"]):
        for key, v in n["attrs"].items():
            for kind, w in _mutate_value(key, v):
                new = copy.deepcopy(r)
                new["dst"][j]["attrs"][key] = w
                yield out(kind, f"target node {j} {n['op']}: {key} {v} -> {w}", new)
        if n["op"] in NONCOMMUTATIVE and len(n["inputs"]) >= 2 and \
                n["inputs"][0] != n["inputs"][1]:
            new = copy.deepcopy(r)
            ins = new["dst"][j]["inputs"]
            ins[0], ins[1] = ins[1], ins[0]
            yield out("operand-order", f"target node {j} {n['op']}: operands swapped", new)
        if SWAP.get(n["op"]):
            new = copy.deepcopy(r)
            new["dst"][j]["op"] = SWAP[n["op"]]
            yield out("op", f"target node {j}: {n['op']} -> {SWAP[n['op']]}", new)
        for i, x in enumerate(n["inputs"]):
            if isinstance(x, str):
                others = [u for u in variables if u != x and r["vars"][u] == r["vars"][x]]
                if others:
                    new = copy.deepcopy(r)
                    new["dst"][j]["inputs"][i] = others[0]
                    yield out("variable", f"target node {j} {n['op']}: input {x} -> "
                              f"{others[0]}", new)
    for v, c in r["vars"].items():
        if c.get("same_dim"):
            new = copy.deepcopy(r)
            del new["vars"][v]["same_dim"]
            yield out("broadcast", f"size constraint of {v} dropped", new)
    if len(r["outputs"]) == 2 and r["outputs"][0][1] != r["outputs"][1][1]:
        new = copy.deepcopy(r)
        (a, b), (c, d) = new["outputs"]
        new["outputs"] = [[a, d], [c, b]]
        yield out("output", "the two mapped targets swapped", new)


def _well_formed(m: dict) -> bool:
    try:
        checked(Rule.from_json(m))
    except RuleError:
        return False
    return True


def candidates() -> list[dict]:
    """Mutants of the sources' proved rules: for every operator, up to
    PER_OP mutants of rules that use it (of as many kinds as there are), then up
    to PER_KIND of each kind, spread over the rules."""
    by_kind: dict[str, list[dict]] = {}
    for name in SOURCES:
        rules = [r for r in load(SHIPPED / name) if r.status == "proved"]
        step = max(1, len(rules) // 400)  # the generated set: a spread of 400
        for r in rules[::step] if name == "generated.json" else rules:
            for kind, _, m in mutants(r.to_json()):
                if _well_formed(m):  # e.g. an operator swapped for one without its attributes
                    by_kind.setdefault(kind, []).append(m)
    chosen: dict[str, dict] = {}
    ops = sorted({n["op"] for ms in by_kind.values() for m in ms for n in m["src"] + m["dst"]})
    for op in ops:
        uses = {k: [m for m in ms if any(n["op"] == op for n in m["src"] + m["dst"])]
                for k, ms in by_kind.items()}
        picked = 0
        for i in range(PER_OP):
            for k in sorted(uses):
                if picked < PER_OP and i < len(uses[k]):
                    m = uses[k][i * max(1, len(uses[k]) // PER_OP) % len(uses[k])]
                    if m["id"] not in chosen:
                        chosen[m["id"]] = m
                        picked += 1
    for ms in by_kind.values():
        step = max(1, len(ms) // PER_KIND)
        for m in ms[::step][:PER_KIND]:
            chosen.setdefault(m["id"], m)
    return list(chosen.values())


def verify(rules: list[Rule], timeout: float, workers: int) -> list[dict]:
    return verify_rules(rules, timeout=timeout, workers=workers)


def witness(rule: Rule, draws: int = 100) -> tuple[str, int]:
    """A longer search for an instance on which the two sides differ, over more
    sizes (0 among them) than the refuter draws: ("false", seed),
    ("agrees", instances compared) or ("vacuous", 0) when no shapes make both
    sides well-shaped."""
    import numpy as np
    from taso.verifier.refute import attribute_domains, compare
    from taso.verifier.shapes import solve
    from taso.verifier.terms import axis_conditions, rule_conditions, rule_terms

    _, _, src, dst = rule_terms(rule)
    conds = [*rule_conditions(rule), *axis_conditions(rule)]
    ranks = {v: c.get("rank") for v, c in rule.vars.items()}
    sizes = [0, 1, 2, 3, 4, 5, 6, 8, 16]
    seen = 0
    for seed in range(draws):
        sol = solve([*src, *dst], conds, ranks, attribute_domains(rule),
                    np.random.default_rng(seed), sizes, budget=6000)
        if sol is None:
            continue
        seen += 1
        try:
            found = compare(rule, *sol, seed)
        except (ValueError, KeyError):
            continue
        if found and "nan" not in found:
            return "false", seed
    return ("agrees", seen) if seen else ("vacuous", 0)


def write(timeout: float, workers: int) -> int:
    """Verify every candidate; keep those shown false (refuted, or a long
    search finds them false), drop the rest with the reason."""
    cands = [Rule.from_json(m) for m in candidates()]
    recs = verify(cands, timeout, workers)
    keep, dropped = [], []
    for r, rec in zip(cands, recs):
        if rec["status"] == "proved":
            dropped.append((r, f"proved from {', '.join(rec.get('axioms', []))}"))
            continue
        if rec["status"] == "refuted":
            keep.append(r)
            continue
        verdict, n = witness(r)
        if verdict == "false":
            keep.append(r)
        elif verdict == "agrees":
            dropped.append((r, f"unknown, and both sides agree on all {n} instances found"))
        else:
            dropped.append((r, "unknown, and no shapes make both sides well-shaped"))
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    RuleSet(keep, name="false-rules", provenance={
        "built_by": "bench/false_rules.py --write", "from": list(SOURCES)}).save(CORPUS)
    print(f"{len(cands)} mutants, {len(keep)} kept in {CORPUS}, {len(dropped)} dropped "
          "(true where defined, or never defined):")
    for r, why in dropped:
        print(f"  {r.id}: {r.provenance['mutation']}: {why}")
    return 0


def report(timeout: float, workers: int, as_json: bool) -> int:
    rs = load(CORPUS)
    start = time.perf_counter()
    recs = verify(rs.rules, timeout, workers)
    status = Counter(rec["status"] for rec in recs)
    kinds = Counter(r.provenance.get("kind") for r in rs)
    ops = Counter(n.op for r in rs for n in r.src + r.dst)
    proved = [r.id for r, rec in zip(rs, recs) if rec["status"] == "proved"]
    unknown = [(r.id, rec.get("reason", "")) for r, rec in zip(rs, recs)
               if rec["status"] == "unknown"]
    unconfirmed = [r.id for r, rec in zip(rs, recs) if rec["status"] == "refuted"
                   and replay(r, rec["counterexample"]) is None]
    out = {"rules": len(rs), **{k: status.get(k, 0) for k in ("proved", "refuted")},
           "seconds": round(time.perf_counter() - start, 1), "kinds": dict(kinds),
           "operators": dict(ops), "proved_ids": proved, "unknown": unknown,
           "counterexamples_not_replayed": unconfirmed}
    if as_json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['rules']} false rules: {out['refuted']} refuted, {len(unknown)} unknown, "
              f"{out['proved']} proved ({out['seconds']} s)")
        print("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
        print("operators: " + ", ".join(f"{k} {n}" for k, n in sorted(ops.items())))
        for rid, why in unknown:
            print(f"unknown {rid}: {why}")
        for rid in proved:
            print(f"PROVED (a soundness bug) {rid}")
        for rid in unconfirmed:
            print(f"counterexample does not replay: {rid}")
    return 1 if proved or unconfirmed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rebuild the corpus from the sources")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.write:
        return write(args.timeout, args.workers)
    return report(args.timeout, args.workers, args.json)


if __name__ == "__main__":
    sys.exit(main())
