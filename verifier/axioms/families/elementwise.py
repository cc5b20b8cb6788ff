"""Elementwise arithmetic (TASO: ewadd/ewmul associativity, commutativity, distributivity)."""

from __future__ import annotations

from ..dsl import (
    ewadd,
    ewmul,
    family,
    x,
    y,
    z,
)

axiom = family("elementwise")
axiom("ewadd-comm", "x + y = y + x", ewadd(x, y), ewadd(y, x))
axiom("ewadd-assoc", "(x + y) + z = x + (y + z)", ewadd(ewadd(x, y), z), ewadd(x, ewadd(y, z)))
axiom("ewmul-comm", "x * y = y * x", ewmul(x, y), ewmul(y, x))
axiom("ewmul-assoc", "(x * y) * z = x * (y * z)", ewmul(ewmul(x, y), z), ewmul(x, ewmul(y, z)))
axiom("ewmul-distrib", "(x + y) * z = x*z + y*z", ewmul(ewadd(x, y), z),
      ewadd(ewmul(x, z), ewmul(y, z)))
