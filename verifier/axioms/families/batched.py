"""Batches of sequences (3-D tensors): k^T of attention (transpose of the last
two axes), products with a batch axis, concat along the batch and feature
axes, and a tensor read as the matrix of its rows (reshape to (rows, last),
the same as flatten_2) with the operators that act on each row alike."""

from __future__ import annotations

from ..dsl import (
    POINTWISE,
    SCALARS,
    Var,
    act,
    app,
    b,
    concat,
    dim,
    eq,
    ewmul,
    family,
    flat,
    matmul,
    ok,
    rank,
    s,
    smul,
    transpose,
    w,
    x,
    y,
    z,
)

T = (0, 2, 1)  # the last two axes of a 3-D tensor swapped


def t3(a):
    return transpose(a, T)


axiom = family("batched")
_3 = (eq(rank(x), 3),)
axiom("transpose3-involution", "t(t(x)) = x  (t: the last two axes of a 3-D tensor)",
      t3(t3(x)), x, ok(t3(t3(x))))
_e = t3(x)
for _i, _j in ((0, 0), (1, 2), (2, 1)):
    axiom(f"transpose3-dim{_i}", f"dim(t(x), {_i}) = dim(x, {_j})", dim(_e, _i), dim(x, _j),
          ok(_e), triggers=((_e,),))
_l = t3(matmul(x, y, "?act"))
for _rx, _ry, _rhs in ((3, 3, matmul(t3(y), t3(x), "?act")),
                       (3, 2, matmul(transpose(y), t3(x), "?act")),
                       (2, 3, matmul(t3(y), transpose(x), "?act"))):
    axiom(f"transpose3-matmul-{_rx}{_ry}", f"t(x y) = t(y) t(x)  (x {_rx}-D, y {_ry}-D)", _l,
          _rhs, ok(_l), eq(rank(x), _rx), eq(rank(y), _ry))
for _a, _ta in ((0, 0), (1, 2), (2, 1)):
    _l = t3(concat(_a, x, y))
    axiom(f"transpose3-concat{_a}", f"t(concat_{_a}(x, y)) = concat_{_ta}(t(x), t(y))  (3-D)",
          _l, concat(_ta, t3(x), t3(y)), ok(_l), *_3)
_l = matmul(concat(0, x, y), z, "?act")
axiom("matmul-concat-batch", "concat_0(x, y) z = concat_0(x z, y z)  (z 2-D: rows of a "
      "matrix, or a batch of any rank)", _l,
      concat(0, matmul(x, z, "?act"), matmul(y, z, "?act")), ok(_l), eq(rank(z), 2))
_l = matmul(x, concat(2, y, z), "?act")
axiom("matmul-concat-cols-batched", "x concat_2(y, z) = concat_2(x y, x z)  (y, z 3-D)", _l,
      concat(2, matmul(x, y, "?act"), matmul(x, z, "?act")), ok(_l), *_3, eq(rank(y), 3),
      eq(rank(z), 3))
_l = matmul(concat(2, x, y), concat(0, z, w))
axiom("matmul-concat-inner-3d", "concat_2(x, y) concat_0(z, w) = x z + y w  (x, y 3-D; z, w "
      "2-D, x as wide as z is tall)", _l, app("ewadd", matmul(x, z), matmul(y, w)), ok(_l),
      *_3, eq(rank(z), 2), eq(dim(x, 2), dim(z, 0)))

# the matrix of rows
_l = app("reshape", x, shape=("?rows", dim(x, 2)))
axiom("reshape-rows", "reshape(x, (n, last size of x)) = flatten_2(x)  (3-D, where defined)", _l,
      flat(x), ok(_l), *_3)
_y3 = (eq(rank(y), 3), eq(dim(x, 0), dim(y, 0)), eq(dim(x, 1), dim(y, 1)))
_l = ewmul(flat(x), flat(y))
axiom("ewmul-flatten-rows", "flatten_2(x) * flatten_2(y) = flatten_2(x * y)  (3-D, equal "
      "sizes)", _l, flat(ewmul(x, y)), ok(_l), *_3, *_y3)
axiom("smul-flatten-rows", "flatten_2(x)·s = flatten_2(x·s)  (3-D)", smul(flat(x), s),
      flat(smul(x, s)), ok(smul(flat(x), s)), *_3, ranks=SCALARS)
axiom("div-flatten-rows", "flatten_2(x)/s = flatten_2(x/s)  (3-D, s 0-d)",
      app("div", flat(x), s), flat(app("div", x, s)), ok(app("div", flat(x), s)), *_3,
      eq(rank(s), 0), ranks=SCALARS)
for _name, _f2, _f3 in (
        ("softmax", lambda a: app("softmax", a, axis=1), lambda a: app("softmax", a, axis=2)),
        ("mean", lambda a: app("reduce_mean", a, axes=(1,), keepdims=1),
         lambda a: app("reduce_mean", a, axes=(2,), keepdims=1))):
    axiom(f"{_name}-flatten-rows", f"{_name} of the rows of flatten_2(x) = flatten_2({_name} "
          "of the last axis of x)  (3-D)", _f2(flat(x)), flat(_f3(x)), ok(_f2(flat(x))), *_3)
_g = Var("g")
_l = app("layernorm", flat(x), _g, b, axis=1, epsilon="?e")
axiom("layernorm-flatten-rows", "layernorm_1(flatten_2(x), g, b) = flatten_2(layernorm_2(x, g, "
      "b))  (3-D)", _l, flat(app("layernorm", x, _g, b, axis=2, epsilon="?e")), ok(_l), *_3)
for _a in POINTWISE:
    axiom(f"{_a}-flatten-rows", f"{_a}(flatten_2(x)) = flatten_2({_a}(x))  (3-D)",
          act(_a, flat(x)), flat(act(_a, x)), ok(act(_a, flat(x))), *_3)
for _a, _fa in ((0, 0), (2, 1)):
    _l = flat(concat(_a, x, y))
    axiom(f"flatten-rows-concat{_a}", f"flatten_2(concat_{_a}(x, y)) = concat_{_fa}("
          "flatten_2(x), flatten_2(y))  (3-D)", _l, concat(_fa, flat(x), flat(y)), ok(_l), *_3)
