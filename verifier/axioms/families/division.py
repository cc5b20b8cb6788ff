"""Division by a scalar: div(x, s), s 0-d (attention's 1/sqrt(d)).

Division by zero is undefined. Every law here divides by the same scalars on
both sides, so both sides are undefined together (s = 0) and equal elsewhere:
no proof equates a defined value with an undefined one. x·s / s = x is not such
a law and is not stated (the generator drops rules that need it)."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    app,
    concat,
    dim,
    eq,
    ewadd,
    ewmul,
    family,
    matmul,
    ok,
    rank,
    s,
    smul,
    t,
    transpose,
    x,
    y,
)


def div(a, b):
    return app("div", a, b)


# (the laws draw s, t 0-d; the sizes below leave ranks free, so that a size law
# that forgets its divisor is 0-d is caught where it broadcasts)
axiom = family("division")
_s = eq(rank(s), 0)  # div broadcasts: these are laws of a scalar divisor
_st = (_s, eq(rank(t), 0))
axiom("div-ewadd", "(x + y) / s = x/s + y/s", div(ewadd(x, y), s), ewadd(div(x, s), div(y, s)),
      _s, ranks=SCALARS)
axiom("div-ewmul", "(x * y) / s = (x/s) * y", div(ewmul(x, y), s), ewmul(div(x, s), y),
      _s, ranks=SCALARS)
axiom("div-smul", "(x·t) / s = (x/s)·t", div(smul(x, t), s), smul(div(x, s), t),
      *_st, ranks=SCALARS)
axiom("div-div", "(x/s)/t = x/(s * t)", div(div(x, s), t), div(x, ewmul(s, t)),
      *_st, ranks=SCALARS)
axiom("smul-ewmul-0d", "x·s = x * s  where x * s is defined (0-d x)", smul(x, s), ewmul(x, s),
      ok(ewmul(x, s)), _s, ranks=SCALARS)
axiom("matmul-div-left", "(x/s) y = (x y)/s", matmul(div(x, s), y), div(matmul(x, y), s),
      _s, ranks=SCALARS)
axiom("matmul-div-right", "x (y/s) = (x y)/s", matmul(x, div(y, s)), div(matmul(x, y), s),
      _s, ranks=SCALARS)
axiom("transpose-div", "transpose_p(x/s) = transpose_p(x)/s", transpose(div(x, s), "?perm"),
      div(transpose(x, "?perm"), s), _s, ranks=SCALARS)
axiom("concat-div", "concat_a(x/s, y/s) = concat_a(x, y)/s", concat("?a", div(x, s), div(y, s)),
      div(concat("?a", x, y), s), _s, ranks=SCALARS)
_e = div(x, s)
_0d = (ok(_e), _s)
axiom("div-dim", "dim(x/s, i) = dim(x, i)  (s 0-d)", dim(_e, "?i"), dim(x, "?i"), *_0d,
      triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
axiom("div-rank", "rank(x/s) = rank(x)  (s 0-d)", rank(_e), rank(x), *_0d)
