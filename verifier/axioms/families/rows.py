"""Rows: flattening a 3-D tensor's leading axes into one commutes with the operators
that act on each row alike."""

from __future__ import annotations

from ..dsl import (
    Arith,
    Var,
    app,
    dim,
    eq,
    ewadd,
    family,
    flat,
    matmul,
    ok,
    rank,
    w,
    x,
    y,
)

axiom = family("rows")
# reshape to the original sizes undoes it. They let a dense layer run over a matrix.


_3d = (eq(rank(x), 3),)
axiom("flatten-rows-dim0", "dim(flatten_2(x), 0) = dim(x, 0) · dim(x, 1)  (3-D)",
      dim(flat(x), 0), Arith("*", dim(x, 0), dim(x, 1)), ok(flat(x)), *_3d,
      triggers=((flat(x),),))
axiom("flatten-rows-dim1", "dim(flatten_2(x), 1) = dim(x, 2)  (3-D)", dim(flat(x), 1),
      dim(x, 2), ok(flat(x)), *_3d, triggers=((flat(x),),))
axiom("flatten-rank", "rank(flatten_a(x)) = 2", rank(app("flatten", x, axis="?a")), 2,
      ok(app("flatten", x, axis="?a")))
_l = matmul(flat(x), w, "?act")
axiom("matmul-flatten-rows", "flatten_2(x) w = flatten_2(x w)  (x 3-D, w 2-D)", _l,
      flat(matmul(x, w, "?act")), ok(_l), *_3d, eq(rank(w), 2))
_v = Var("b")
_l = app("add", flat(x), _v)
axiom("add-flatten-rows", "add(flatten_2(x), b) = flatten_2(add(x, b))  (x 3-D, b 1-D)", _l,
      flat(app("add", x, _v)), ok(_l), *_3d, eq(rank(_v), 1))
_l = ewadd(flat(x), flat(y))
axiom("ewadd-flatten-rows", "flatten_2(x) + flatten_2(y) = flatten_2(x + y)  (x, y 3-D of "
      "equal sizes)", _l, flat(ewadd(x, y)), ok(_l), *_3d, eq(rank(y), 3),
      eq(dim(x, 0), dim(y, 0)), eq(dim(x, 1), dim(y, 1)))
_l = app("reshape", flat(x), shape=(dim(x, 0), dim(x, 1), dim(x, 2)))
axiom("reshape-flatten-rows", "reshape(flatten_2(x), sizes of x) = x  (3-D)", _l, x, ok(_l),
      *_3d)
