"""Scalar multiplication (s, t are 0-d)."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    ewadd,
    ewmul,
    family,
    s,
    smul,
    t,
    x,
    y,
)

axiom = family("scalar")
axiom("smul-ewadd", "(x + y)·s = x·s + y·s", smul(ewadd(x, y), s),
      ewadd(smul(x, s), smul(y, s)), ranks=SCALARS)
axiom("smul-ewmul", "(x * y)·s = (x·s) * y", smul(ewmul(x, y), s), ewmul(smul(x, s), y),
      ranks=SCALARS)
axiom("smul-smul", "(x·s)·t = x·(s * t)", smul(smul(x, s), t), smul(x, ewmul(s, t)),
      ranks=SCALARS)
axiom("smul-scalar-ewadd", "x·(s + t) = x·s + x·t", smul(x, ewadd(s, t)),
      ewadd(smul(x, s), smul(x, t)), ranks=SCALARS)
