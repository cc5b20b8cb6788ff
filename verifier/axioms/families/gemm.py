"""Gemm (ONNX's dense layer) with A not transposed."""

from __future__ import annotations

from ..dsl import (
    STACK_ARITIES,
    Var,
    b,
    concat,
    eq,
    family,
    gemm,
    ok,
    rank,
    x,
    y,
    z,
)

axiom = family("gemm")


for _c, _tag in (((), ""), ((b,), "-bias")):
    _l = gemm(concat(0, x, y), z, *_c)
    axiom(f"gemm{_tag}-concat-rows", f"gemm([x ; y], z{', b' * bool(_c)}) = "
          f"[gemm(x, z{', b' * bool(_c)}) ; gemm(y, z{', b' * bool(_c)})]  (A not transposed"
          f"{'; b a vector' * bool(_c)})", _l,
          concat(0, gemm(x, z, *_c), gemm(y, z, *_c)), ok(_l),
          *[eq(rank(b), 1)] * bool(_c), ranks={"b": 1})
    for _m in STACK_ARITIES:
        _xs = tuple(Var(f"x{_i}") for _i in range(_m))
        _l = gemm(concat(0, *_xs), z, *_c)
        axiom(f"gemm{_tag}-concat-rows-of-{_m}", f"gemm([x0 ; ... ; x{_m - 1}], z"
              f"{', b' * bool(_c)}) = [gemm(x0, ...) ; ... ; gemm(x{_m - 1}, ...)]", _l,
              concat(0, *(gemm(_v, z, *_c) for _v in _xs)), ok(_l),
              *[eq(rank(b), 1)] * bool(_c), sizes=(1, 2),
              ranks={**{_v.name: 2 for _v in _xs}, "z": 2, "b": 1})
