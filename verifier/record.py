"""What a proof record vouches for: the axioms it was proved from.

A record names the z3 version, the axioms its unsat core used and a digest of
their statements (with the encoding's version). Every axiom is tracked, so the
core is all the proof needs: the proof stands while those axioms stand, however
many others are added (adding an operator adds its axioms and leaves every
other proof current), and it is stale once one of them is changed or gone, or
the encoding changes; whoever trusts records (the optimizer) proves such a rule
again before using it. A record that is not a proof digests the whole set.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from typing import Any

from .axioms import by_name
from .terms import App, Arith, Cmp, Dim, IVar, Ok, Rank, Var

# Bumped when encode.py changes what a rule or an axiom means to Z3 (version 2:
# axis variables range over 0 .. rank-1).
ENCODING_VERSION = 2


def _canon(t: Any) -> Any:
    """A term in a plain, complete form (App's repr hides default attributes)."""
    if isinstance(t, App):
        return ("app", t.op, tuple(map(_canon, t.args)),
                tuple((k, _canon(v)) for k, v in t.attrs), t.out)
    if isinstance(t, Var):
        return ("var", t.name)
    if isinstance(t, IVar):
        return ("ivar", t.name)
    if isinstance(t, (Dim, Rank, Ok)):
        return (type(t).__name__, *map(_canon, vars(t).values()))
    if isinstance(t, (Arith, Cmp)):
        return (type(t).__name__, t.op, _canon(t.a), _canon(t.b))
    if isinstance(t, tuple):
        return tuple(map(_canon, t))
    return t


def axioms_digest(names: Iterable[str] | None = None) -> str:
    """A digest of the statements (sides, guards, relation, triggers) of the
    axioms named (every axiom when None) and of the encoding's version; it
    depends on what the axioms say, not on where they are written."""
    return _digest(None if names is None else tuple(sorted(set(names))))


@cache
def _digest(names: tuple[str, ...] | None) -> str:
    known = by_name()
    h = hashlib.blake2b(digest_size=12)
    h.update(f"encoding {ENCODING_VERSION}\n".encode())
    for name in sorted(known) if names is None else names:
        ax = known.get(name)
        if ax is None:  # an axiom no longer stated: no digest of today's equals this one
            h.update(f"missing {name}\n".encode())
            continue
        h.update(repr((ax.name, ax.rel, _canon(ax.lhs), _canon(ax.rhs), _canon(ax.when),
                       _canon(ax.trigger_groups()))).encode())
        h.update(b"\n")
    return h.hexdigest()


def record_digest(record: dict[str, Any]) -> str:
    """The digest a record made today would carry: of its proof's axioms if it
    is a proof, else of every axiom."""
    return axioms_digest(record.get("axioms", ()) if record.get("status") == "proved" else None)


def is_current(record: dict[str, Any]) -> bool:
    """Whether a "proved" record's axioms and encoding are today's."""
    return record.get("status") == "proved" and record.get("axioms_hash") == record_digest(record)


def is_settled(record: dict[str, Any]) -> bool:
    """Whether a record need not be made again: proved or refuted, under
    today's axioms and encoding."""
    return record.get("status") in ("proved", "refuted") and \
        record.get("axioms_hash") == record_digest(record)
