"""Broadcasting arithmetic."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    app,
    b,
    b2,
    concat,
    dim,
    eq,
    ewadd,
    ewmul,
    family,
    ok,
    rank,
    s,
    smul,
    x,
    y,
    z,
)

axiom = family("broadcast")
axiom("add-ewadd", "add(x, y) = x + y  (equal shapes)", app("add", x, y), ewadd(x, y),
      ok(ewadd(x, y)))
axiom("mul-ewmul", "mul(x, y) = x * y  (equal shapes)", app("mul", x, y), ewmul(x, y),
      ok(ewmul(x, y)))
axiom("mul-smul", "mul(x, s) = x·s  (s 0-d)", app("mul", x, s), smul(x, s), ok(smul(x, s)),
      ranks=SCALARS)
axiom("add-comm", "add(x, y) = add(y, x)", app("add", x, y), app("add", y, x))
axiom("mul-comm", "mul(x, y) = mul(y, x)", app("mul", x, y), app("mul", y, x))
axiom("add-assoc", "add(add(x, y), z) = add(x, add(y, z))", app("add", app("add", x, y), z),
      app("add", x, app("add", y, z)))
axiom("mul-assoc", "mul(mul(x, y), z) = mul(x, mul(y, z))", app("mul", app("mul", x, y), z),
      app("mul", x, app("mul", y, z)))
axiom("mul-add-distrib", "mul(add(x, y), z) = add(mul(x, z), mul(y, z))",
      app("mul", app("add", x, y), z), app("add", app("mul", x, z), app("mul", y, z)))

for _r in (2, 3):  # a dense layer's bias, broadcast over the last axis, follows the concat
    _l = app("add", concat(_r - 1, x, y), concat(0, b, b2))
    axiom(f"add-bias-concat-{_r}d", f"add(concat_{_r - 1}(x, y), concat_0(b, b2)) = "
          f"concat_{_r - 1}(add(x, b), add(y, b2))  (x, y {_r}-D; b, b2 as long as their last "
          "axes)",
          _l, concat(_r - 1, app("add", x, b), app("add", y, b2)), ok(_l), eq(rank(x), _r),
          eq(rank(b), 1), eq(dim(b, 0), dim(x, _r - 1)), eq(dim(b2, 0), dim(y, _r - 1)))
