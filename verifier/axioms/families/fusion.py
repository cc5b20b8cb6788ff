"""Fused activations: conv/matmul with an activation is the activation after them."""

from __future__ import annotations

from ..dsl import (
    ACTS,
    act,
    conv,
    family,
    matmul,
    w,
    x,
    y,
)

axiom = family("fusion")
for _a in ACTS:
    axiom(f"conv-{_a}-fusion", f"conv(x, w; act={_a}) = {_a}(conv(x, w))",
          conv(x, w, act=_a), act(_a, conv(x, w)))
    axiom(f"matmul-{_a}-fusion", f"matmul(x, y; act={_a}) = {_a}(matmul(x, y))",
          matmul(x, y, act=_a), act(_a, matmul(x, y)))
