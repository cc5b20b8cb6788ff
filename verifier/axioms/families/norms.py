"""Softmax, layer norm and the mean over one axis (kept): what a transformer
normalizes by.

Each acts on slices along its axes alone (softmax and the mean along axis a,
layer norm along a and every axis after it), so it commutes with a concat
along another axis; the mean is linear; a layer norm is linear in its scale
and shift together. A mean over an empty axis is undefined (0/0): a law holds
only where both sides are undefined together."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    Arith,
    Var,
    app,
    b,
    b2,
    concat,
    dim,
    eq,
    ewadd,
    family,
    ge,
    iv,
    matmul,
    ne,
    ok,
    rank,
    s,
    smul,
    x,
    y,
)

g, g2 = Var("g"), Var("g2")  # a layer norm's scales (b, b2 its shifts)


def softmax(a, axis="?a"):
    return app("softmax", a, axis=axis)


def lnorm(a, scale, shift, axis="?a"):
    return app("layernorm", a, scale, shift, axis=axis, epsilon="?e")


def rmean(a, axis="?a"):
    return app("reduce_mean", a, axes=(axis,), keepdims=1)


def div(a, c):
    return app("div", a, c)


axiom = family("norms")
_apart = (ne("?a", "?b"), ge("?a", 0), ge("?b", 0))
_l = softmax(concat("?b", x, y))
axiom("softmax-concat", "softmax_a(concat_b(x, y)) = concat_b(softmax_a(x), softmax_a(y))  "
      "(a ≠ b)", _l, concat("?b", softmax(x), softmax(y)), ok(_l), *_apart)
_l = rmean(concat("?b", x, y))
axiom("mean-concat", "mean_a(concat_b(x, y)) = concat_b(mean_a(x), mean_a(y))  (a ≠ b)", _l,
      concat("?b", rmean(x), rmean(y)), ok(_l), *_apart)
_l = lnorm(concat("?b", x, y), g, b)
axiom("layernorm-concat", "layernorm_a(concat_b(x, y), g, b) = concat_b(layernorm_a(x, g, b), "
      "layernorm_a(y, g, b))  (b before a)", _l,
      concat("?b", lnorm(x, g, b), lnorm(y, g, b)), ok(_l), ge("?b", 0),
      ge("?a", Arith("+", iv("?b"), 1)))
axiom("mean-concat-swap", "mean_a(concat_a(x, y)) = mean_a(concat_a(y, x))",
      rmean(concat("?a", x, y)), rmean(concat("?a", y, x)), ok(rmean(concat("?a", x, y))))
axiom("mean-concat-self", "mean_a(concat_a(x, x)) = mean_a(x)", rmean(concat("?a", x, x)),
      rmean(x), ok(rmean(concat("?a", x, x))))
axiom("mean-idem", "mean_a(mean_a(x)) = mean_a(x)", rmean(rmean(x)), rmean(x))
_m = rmean(concat("?a", x, y))
axiom("mean-concat-halves", "mean_a(concat_a(x, y)) twice = mean_a(x) + mean_a(y)  (x, y "
      "equally long along a)", ewadd(_m, _m), ewadd(rmean(x), rmean(y)), ok(_m), ge("?a", 0),
      eq(dim(x, "?a"), dim(y, "?a")), triggers=((ewadd(_m, _m),), (_m,)))
axiom("mean-ewadd", "mean_a(x + y) = mean_a(x) + mean_a(y)", rmean(ewadd(x, y)),
      ewadd(rmean(x), rmean(y)), ok(rmean(ewadd(x, y))))
axiom("mean-smul", "mean_a(x·s) = mean_a(x)·s", rmean(smul(x, s)), smul(rmean(x), s),
      ranks=SCALARS)
axiom("mean-div", "mean_a(x/s) = mean_a(x)/s", rmean(div(x, s)), div(rmean(x), s),
      eq(rank(s), 0), ranks=SCALARS)
_l = rmean(matmul(x, y))
# (x y's inner size non-empty: else the left is a mean of nothing, undefined,
# and the right an empty sum, 0)
axiom("mean-matmul", "mean of the last axis of x y = x (mean of y's last axis)  (y 2-D, "
      "x's columns not empty)", _l, matmul(x, rmean(y, 1)), ok(_l), eq(rank(y), 2),
      eq(Arith("+", iv("?a"), 1), rank(x)), ge(dim(y, 0), 1))
axiom("layernorm-smul", "layernorm(x, g, b)·s = layernorm(x, g·s, b·s)", smul(lnorm(x, g, b), s),
      lnorm(x, smul(g, s), smul(b, s)), ranks=SCALARS)
axiom("layernorm-div", "layernorm(x, g, b)/s = layernorm(x, g/s, b/s)", div(lnorm(x, g, b), s),
      lnorm(x, div(g, s), div(b, s)), eq(rank(s), 0), ranks=SCALARS)
_l = ewadd(lnorm(x, g, b), lnorm(x, g2, b2))
axiom("layernorm-ewadd", "layernorm(x, g, b) + layernorm(x, g2, b2) = layernorm(x, g + g2, "
      "b + b2)", _l, lnorm(x, ewadd(g, g2), ewadd(b, b2)), ok(_l))
for _name, _f in (("softmax", softmax), ("mean", rmean)):
    _e = _f(x)
    axiom(f"{_name}-rank", f"rank({_name}_a(x)) = rank(x)", rank(_e), rank(x), ok(_e))
    axiom(f"{_name}-dim", f"dim({_name}_a(x), i) = dim(x, i)" + ("  (i ≠ a)" if _f is rmean
                                                                 else ""),
          dim(_e, "?i"), dim(x, "?i"), ok(_e), *((ne("?i", "?a"),) if _f is rmean else ()),
          triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
axiom("mean-dim-axis", "dim(mean_a(x), a) = 1", dim(rmean(x), "?a"), 1, ok(rmean(x)),
      ge("?a", 0))
_e = lnorm(x, g, b)
axiom("layernorm-rank", "rank(layernorm(x, g, b)) = rank(x)", rank(_e), rank(x), ok(_e))
axiom("layernorm-dim", "dim(layernorm(x, g, b), i) = dim(x, i)", dim(_e, "?i"), dim(x, "?i"),
      ok(_e), triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
