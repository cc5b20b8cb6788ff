"""Transpose."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    concat,
    ewadd,
    ewmul,
    family,
    matmul,
    ok,
    s,
    smul,
    transpose,
    x,
    y,
)

axiom = family("transpose")
axiom("transpose-involution", "transpose(transpose(x)) = x  (2-D, where defined)",
      transpose(transpose(x)), x, ok(transpose(transpose(x))))
axiom("transpose-ewadd", "transpose_p(x + y) = transpose_p(x) + transpose_p(y)",
      transpose(ewadd(x, y), "?perm"), ewadd(transpose(x, "?perm"), transpose(y, "?perm")))
axiom("transpose-ewmul", "transpose_p(x * y) = transpose_p(x) * transpose_p(y)",
      transpose(ewmul(x, y), "?perm"), ewmul(transpose(x, "?perm"), transpose(y, "?perm")))
axiom("transpose-smul", "transpose_p(x·s) = transpose_p(x)·s",
      transpose(smul(x, s), "?perm"), smul(transpose(x, "?perm"), s), ranks=SCALARS)
axiom("transpose-matmul", "transpose(matmul(x, y)) = matmul(transpose(y), transpose(x))",
      transpose(matmul(x, y, "?act")), matmul(transpose(y), transpose(x), "?act"))
axiom("transpose-concat0", "transpose(concat_0(x, y)) = concat_1(transpose(x), transpose(y))",
      transpose(concat(0, x, y)), concat(1, transpose(x), transpose(y)))
axiom("transpose-concat1", "transpose(concat_1(x, y)) = concat_0(transpose(x), transpose(y))",
      transpose(concat(1, x, y)), concat(0, transpose(x), transpose(y)))
