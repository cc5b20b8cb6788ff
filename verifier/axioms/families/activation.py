"""Pointwise operators: relu's idempotence, and the pointwise laws (`dsl.POINTWISE`:
commuting with concat and transpose) stated for every pointwise operator."""

from __future__ import annotations

from ..dsl import (
    POINTWISE,
    act,
    concat,
    family,
    maxpool,
    relu,
    transpose,
    x,
    y,
)

axiom = family("activation")
axiom("relu-idem", "relu(relu(x)) = relu(x)", relu(relu(x)), relu(x))
for _a in POINTWISE:
    axiom(f"{_a}-concat", f"{_a}(concat_a(x, y)) = concat_a({_a}(x), {_a}(y))",
          act(_a, concat("?a", x, y)), concat("?a", act(_a, x), act(_a, y)))
    axiom(f"{_a}-transpose", f"{_a}(transpose_p(x)) = transpose_p({_a}(x))",
          act(_a, transpose(x, "?perm")), transpose(act(_a, x), "?perm"))
axiom("relu-maxpool", "maxpool(relu(x)) = relu(maxpool(x))  (relu is monotone)",
      maxpool(relu(x)), relu(maxpool(x)))
