"""Matrix products (TASO: associativity, distributivity, concat interchange, scalars,
the identity matrix)."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    STACK_ARITIES,
    Var,
    app,
    concat,
    dim,
    eq,
    ewadd,
    family,
    matmul,
    ok,
    rank,
    s,
    smul,
    u,
    x,
    y,
    z,
)

axiom = family("matmul")
axiom("matmul-assoc", "(x y) z = x (y z)", matmul(matmul(x, y), z), matmul(x, matmul(y, z)))
axiom("matmul-ewadd-right", "x (y + z) = x y + x z", matmul(x, ewadd(y, z)),
      ewadd(matmul(x, y), matmul(x, z)), ok(matmul(x, ewadd(y, z))))
axiom("matmul-ewadd-left", "(x + y) z = x z + y z", matmul(ewadd(x, y), z),
      ewadd(matmul(x, z), matmul(y, z)), ok(matmul(ewadd(x, y), z)))
axiom("matmul-smul-left", "(x·s) y = (x y)·s", matmul(smul(x, s), y), smul(matmul(x, y), s),
      ranks=SCALARS)
axiom("matmul-smul-right", "x (y·s) = (x y)·s", matmul(x, smul(y, s)), smul(matmul(x, y), s),
      ranks=SCALARS)
_l = matmul(x, concat(1, y, z), "?act")
axiom("matmul-concat-cols", "x [y | z] = [x y | x z]  (2-D)", _l,
      concat(1, matmul(x, y, "?act"), matmul(x, z, "?act")), ok(_l), eq(rank(x), 2),
      eq(rank(y), 2))
for _r in (3, 4):
    _l = matmul(x, concat(1, y, z), "?act")
    axiom(f"matmul-concat-cols-{_r}d", f"x [y | z] = concat_{_r - 1}(x y, x z)  "
          f"(x {_r}-D, y, z matrices)", _l,
          concat(_r - 1, matmul(x, y, "?act"), matmul(x, z, "?act")), ok(_l), eq(rank(x), _r),
          eq(rank(y), 2))
_l = matmul(concat(0, x, y), z, "?act")
axiom("matmul-concat-rows", "[x ; y] z = [x z ; y z]  (2-D)", _l,
      concat(0, matmul(x, z, "?act"), matmul(y, z, "?act")), ok(_l), eq(rank(x), 2),
      eq(rank(z), 2))
for _m in STACK_ARITIES:
    _xs = tuple(Var(f"x{_i}") for _i in range(_m))
    _l = matmul(concat(0, *_xs), z, "?act")
    axiom(f"matmul-concat-rows-of-{_m}", f"[x0 ; ... ; x{_m - 1}] z = [x0 z ; ... ; x{_m - 1} z]"
          "  (2-D)", _l, concat(0, *(matmul(_v, z, "?act") for _v in _xs)), ok(_l),
          *(eq(rank(_v), 2) for _v in _xs), eq(rank(z), 2), sizes=(1, 2),
          ranks={**{_v.name: 2 for _v in _xs}, "z": 2})
_l = matmul(concat(1, x, y), concat(0, z, u))
axiom("matmul-concat-inner", "[x | y] [z ; u] = x z + y u  (2-D, x cols = z rows)", _l,
      ewadd(matmul(x, z), matmul(y, u)), ok(_l), eq(dim(x, 1), dim(z, 0)), eq(rank(x), 2),
      eq(rank(z), 2))
_l = matmul(x, app("const_imm", shape="?n"))
axiom("matmul-imm-right", "x I = x", _l, x, ok(_l))
_l = matmul(app("const_imm", shape="?n"), x)
axiom("matmul-imm-left", "I x = x", _l, x, ok(_l))
