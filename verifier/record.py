"""What a proof record vouches for: the axioms it was proved from.

A record names the z3 version, the axioms its unsat core used and a digest of
the whole axiom set (with the encoding's version): a record made from other
axioms, or another encoding, is stale, and whoever trusts records (the
optimizer) proves such a rule again before using it.
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

from .axioms import AXIOMS
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


@cache
def axioms_digest() -> str:
    """A digest of every axiom's statement (sides, guards, relation, triggers)
    and of the encoding's version."""
    h = hashlib.blake2b(digest_size=12)
    h.update(f"encoding {ENCODING_VERSION}\n".encode())
    for ax in sorted(AXIOMS, key=lambda a: a.name):
        h.update(repr((ax.name, ax.rel, _canon(ax.lhs), _canon(ax.rhs), _canon(ax.when),
                       _canon(ax.trigger_groups()))).encode())
        h.update(b"\n")
    return h.hexdigest()


def is_current(record: dict[str, Any]) -> bool:
    """Whether a "proved" record was made from today's axioms and encoding."""
    return record.get("status") == "proved" and record.get("axioms_hash") == axioms_digest()
