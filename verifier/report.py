"""Axiom report: which axioms no proof used, and which the other axioms imply.

Usage comes from the unsat cores recorded with each proved rule. An axiom is
implied when the remaining axioms refute its negation within a short timeout
(as TASO's verifier reported redundant axioms); an implied axiom is still kept
if proofs need it to be fast.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from collections.abc import Callable, Iterable

from .axioms import AXIOMS


def _implied(name: str, timeout: float) -> tuple[str, bool]:
    from .axioms import by_name
    from .prove import implied
    return name, implied(by_name()[name], timeout)


def _star_implied(args: tuple[str, float]) -> tuple[str, bool]:
    return _implied(*args)


def axiom_report(rules: Iterable, workers: int = 2, timeout: float = 2.0,
                 check: Iterable[str] | None = None,
                 on_done: Callable[[int, int], None] | None = None) -> dict:
    """{"uses": {axiom: number of proofs}, "unused": [...], "implied": [...]}; the
    implication check covers the axioms named in `check` (default: all).
    `on_done(done, total)` is called as each implication check finishes."""
    uses = Counter()
    for r in rules:
        if r.verification.get("status") == "proved":
            uses.update(r.verification.get("axioms", []))
    names = [a.name for a in AXIOMS]
    ctx = mp.get_context("spawn")
    with ctx.Pool(max(1, workers)) as pool:
        todo = list(check) if check is not None else names
        found = set()
        for k, (n, yes) in enumerate(pool.imap_unordered(_star_implied,
                                                          [(n, timeout) for n in todo]), 1):
            if yes:
                found.add(n)
            if on_done:
                on_done(k, len(todo))
        implied = [n for n in todo if n in found]
    return {"uses": {n: uses[n] for n in names}, "unused": [n for n in names if not uses[n]],
            "implied": implied}


def format_axiom_report(rep: dict) -> str:
    used = sorted(((k, v) for k, v in rep["uses"].items() if v), key=lambda kv: -kv[1])
    lines = ["", f"axioms used by proofs: {len(used)} of {len(rep['uses'])}"]
    lines += [f"  {k:<28}{v:>5}" for k, v in used]
    lines.append(f"unused ({len(rep['unused'])}): " + ", ".join(rep["unused"]))
    lines.append(f"implied by the others ({len(rep['implied'])}): " + ", ".join(rep["implied"]))
    return "\n".join(lines)
