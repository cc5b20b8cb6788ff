"""Shapes: what each operator's shape rule says about dim() and rank()."""

from __future__ import annotations

from ..dsl import (
    POINTWISE,
    SCALARS,
    VECTORS,
    Arith,
    act,
    app,
    avgpool,
    b,
    concat,
    conv,
    conv_bias,
    dim,
    eq,
    ewadd,
    ewmul,
    family,
    ge,
    gemm,
    iv,
    matmul,
    maxpool,
    ne,
    ok,
    rank,
    s,
    smul,
    split,
    transpose,
    w,
    x,
    y,
)

axiom = family("shape")
for _c, _tag in (((), ""), ((b,), "-bias")):
    _e = gemm(x, y, *_c)
    axiom(f"gemm{_tag}-dim0", "dim(gemm(x, ...), 0) = dim(x, 0)  (A not transposed)",
          dim(_e, 0), dim(x, 0), ok(_e), triggers=((_e,),), ranks={"b": 1})
for _a in POINTWISE:
    axiom(f"{_a}-dim", f"dim({_a}(x), i) = dim(x, i)", dim(act(_a, x), "?i"), dim(x, "?i"))
    axiom(f"{_a}-rank", f"rank({_a}(x)) = rank(x)", rank(act(_a, x)), rank(x))
for _name, _f in (("ewadd", ewadd), ("ewmul", ewmul)):
    _e = _f(x, y)
    axiom(f"{_name}-dim", f"dim({_name}(x, y), i) = dim(x, i)", dim(_e, "?i"), dim(x, "?i"),
          ok(_e), triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
    axiom(f"{_name}-operands", f"dim(x, i) = dim(y, i) where {_name}(x, y) is defined",
          dim(x, "?i"), dim(y, "?i"), ok(_e),
          triggers=((_e, dim(x, "?i")), (_e, dim(y, "?i"))))
    axiom(f"{_name}-rank", f"rank({_name}(x, y)) = rank(x)", rank(_e), rank(x), ok(_e))
    for _k in range(4):  # stated for the first axes as soon as the operation exists
        axiom(f"{_name}-operands{_k}", f"dim(x, {_k}) = dim(y, {_k}) where {_name}(x, y) is "
              "defined", dim(x, _k), dim(y, _k), ok(_e), triggers=((_e,),))
_e = smul(x, s)
axiom("smul-dim", "dim(x·s, i) = dim(x, i)", dim(_e, "?i"), dim(x, "?i"), ok(_e), ranks=SCALARS)
axiom("smul-rank", "rank(x·s) = rank(x)", rank(_e), rank(x), ok(_e), ranks=SCALARS)
_e = concat("?a", x, y)
axiom("concat-dim-axis", "dim(concat_a(x, y), a) = dim(x, a) + dim(y, a)", dim(_e, "?a"),
      Arith("+", dim(x, "?a"), dim(y, "?a")), ok(_e), ge("?a", 0), triggers=((_e,),))
axiom("concat-dim-l", "dim(concat_a(x, y), i) = dim(x, i)  (i ≠ a)", dim(_e, "?i"),
      dim(x, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"),
      triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
axiom("concat-dim-r", "dim(concat_a(x, y), i) = dim(y, i)  (i ≠ a)", dim(_e, "?i"),
      dim(y, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"),
      triggers=((dim(_e, "?i"),), (_e, dim(y, "?i"))))
axiom("concat-rank", "rank(concat_a(x, y)) = rank(x)", rank(_e), rank(x), ok(_e))
for _k, _sk in enumerate(("?s1", "?s2")):
    _e = split(x, "?a", ("?s1", "?s2"), _k)
    axiom(f"split{_k}-dim-axis", f"dim(split_a(x; s1, s2)[{_k}], a) = s{_k + 1}", dim(_e, "?a"),
          _sk, ok(_e), ge("?a", 0))
    axiom(f"split{_k}-dim", f"dim(split_a(x)[{_k}], i) = dim(x, i)  (i ≠ a)", dim(_e, "?i"),
          dim(x, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"))
    axiom(f"split{_k}-rank", f"rank(split_a(x)[{_k}]) = rank(x)", rank(_e), rank(x), ok(_e))
_e = matmul(x, y, "?act")
_2d = (ok(_e), eq(rank(x), 2), eq(rank(y), 2))
_on = ((_e,),)  # sizes of an application, stated as soon as it exists
axiom("matmul-dim0", "dim(x y, 0) = dim(x, 0)  (2-D)", dim(_e, 0), dim(x, 0), *_2d, triggers=_on)
axiom("matmul-dim1", "dim(x y, 1) = dim(y, 1)  (2-D)", dim(_e, 1), dim(y, 1), *_2d, triggers=_on)
axiom("matmul-inner", "dim(x, 1) = dim(y, 0) where x y is defined  (2-D)", dim(x, 1),
      dim(y, 0), *_2d, triggers=_on)
axiom("matmul-rank", "rank(x y) = 2  (2-D)", rank(_e), 2, *_2d)
for _r in (3, 4):
    _nd = (ok(_e), eq(rank(x), _r), eq(rank(y), 2))
    axiom(f"matmul-dim-last-{_r}d", f"dim(x y, {_r - 1}) = dim(y, 1)  (x {_r}-D, y 2-D)",
          dim(_e, _r - 1), dim(y, 1), *_nd, triggers=((_e,),))
    axiom(f"matmul-rank-{_r}d", f"rank(x y) = {_r}  (x {_r}-D, y 2-D)", rank(_e), _r, *_nd)
for _r in (2, 3):  # a vector added along the last axis (a dense layer's bias)
    _e = app("add", x, b)
    _bias = (ok(_e), eq(rank(x), _r), eq(rank(b), 1), eq(dim(b, 0), dim(x, _r - 1)))
    axiom(f"add-bias-dim-{_r}d", f"dim(add(x, b), i) = dim(x, i)  (x {_r}-D, b as long as "
          "its last axis)", dim(_e, "?i"), dim(x, "?i"), *_bias, ge("?i", 0), ge(_r - 1, "?i"),
          triggers=((dim(_e, "?i"),),))
    axiom(f"add-bias-rank-{_r}d", f"rank(add(x, b)) = {_r}  (x {_r}-D, b as long as its last "
          "axis)", rank(_e), _r, *_bias)
_e = conv(x, w, act="?act")
_on = ((_e,),)
axiom("conv-dim0", "dim(conv(x, w), 0) = dim(x, 0)", dim(_e, 0), dim(x, 0), ok(_e), triggers=_on)
axiom("conv-dim1", "dim(conv(x, w), 1) = dim(w, 0)", dim(_e, 1), dim(w, 0), ok(_e), triggers=_on)
axiom("conv-channels", "dim(x, 1) = dim(w, 1) · groups where conv(x, w) is defined",
      dim(x, 1), Arith("*", dim(w, 1), iv("?g")), ok(_e), triggers=_on)
axiom("conv-rank", "rank(conv(x, w)) = 4", rank(_e), 4, ok(_e))
axiom("conv-input-rank", "rank(x) = 4 where conv(x, w) is defined", rank(x), 4, ok(_e),
      triggers=_on)
axiom("conv-kernel-rank", "rank(w) = 4 where conv(x, w) is defined", rank(w), 4, ok(_e),
      triggers=_on)
axiom("conv-groups-positive", "groups >= 1 where conv(x, w) is defined", iv("?g"), 1, ok(_e),
      rel=">=", triggers=_on)
axiom("conv-groups-divide", "groups divides the output channels where conv(x, w) is defined",
      Arith("%", dim(w, 0), iv("?g")), 0, ok(_e), triggers=_on)
_e = conv_bias(x, w, b, act="?act")
_on = ((_e,),)
axiom("conv-bias-dim0", "dim(conv_bias(x, w, b), 0) = dim(x, 0)", dim(_e, 0), dim(x, 0), ok(_e),
      triggers=_on, ranks=VECTORS)
axiom("conv-bias-dim1", "dim(conv_bias(x, w, b), 1) = dim(w, 0)", dim(_e, 1), dim(w, 0), ok(_e),
      triggers=_on, ranks=VECTORS)
axiom("conv-bias-rank", "rank(conv_bias(x, w, b)) = 4", rank(_e), 4, ok(_e), ranks=VECTORS)
axiom("conv-bias-size", "dim(b, 0) = dim(w, 0) where conv_bias(x, w, b) is defined", dim(b, 0),
      dim(w, 0), ok(_e), triggers=_on, ranks=VECTORS)
_e = transpose(x)
axiom("transpose-dim0", "dim(transpose(x), 0) = dim(x, 1)  (2-D)", dim(_e, 0), dim(x, 1), ok(_e))
axiom("transpose-dim1", "dim(transpose(x), 1) = dim(x, 0)  (2-D)", dim(_e, 1), dim(x, 0), ok(_e))
axiom("transpose-rank", "rank(transpose(x)) = rank(x)", rank(transpose(x, "?perm")), rank(x),
      ok(transpose(x, "?perm")))
for _name, _e in (("maxpool", maxpool(x)), ("avgpool", avgpool(x)),
                  ("enlarge", app("enlarge", x, kernel="?k"))):
    axiom(f"{_name}-dim", f"dim({_name}(x), i) = dim(x, i)  (i = 0, 1)", dim(_e, "?i"),
          dim(x, "?i"), ok(_e), ge("?i", 0), ge(1, "?i"))
    axiom(f"{_name}-rank", f"rank({_name}(x)) = 4", rank(_e), 4, ok(_e))
for _op, _r in (("const_one", 2), ("const_one", 4), ("const_iconv", 4), ("const_pool", 4),
               ("const_imm", 2)):
    _sh = tuple(f"?d{i}" for i in range(_r))
    _e = app(_op, shape=_sh)
    axiom(f"{_op}-rank{_r}", f"rank({_op}(shape of {_r} sizes)) = {_r}", rank(_e), _r, ok(_e))
    for _i in range(_r):
        axiom(f"{_op}-dim{_i}-rank{_r}", f"dim({_op}(shape=(d0, ...)), {_i}) = d{_i}",
              dim(_e, _i), _sh[_i], ok(_e))

# ---- added for the 4-operator set (issue 25) ------------------------------------
for _k in range(2):
    _e = split(x, "?a", ("?s1", "?s2"), _k)
    axiom(f"split{_k}-sizes", "s1 + s2 = dim(x, a) where split_a(x; s1, s2) is defined",
          Arith("+", iv("?s1"), iv("?s2")), dim(x, "?a"), ok(_e), ge("?a", 0), triggers=((_e,),))
_e = conv(x, w, act="?act", s=(1, 1), p="same")
axiom("conv-dim-same", "dim(conv(x, w), i) = dim(x, i)  (i = 2, 3: same pads, stride 1)",
      dim(_e, "?i"), dim(x, "?i"), ok(_e), ge("?i", 2), ge(3, "?i"),
      triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
for _name, _e in (("maxpool", app("maxpool2d", x, kernel="?k", strides=(1, 1), pads="same")),
                  ("avgpool", avgpool(x, strides=(1, 1), pads="same"))):
    axiom(f"{_name}-dim-same", f"dim({_name}(x), i) = dim(x, i)  (i = 2, 3: same pads, stride 1)",
          dim(_e, "?i"), dim(x, "?i"), ok(_e), ge("?i", 2), ge(3, "?i"),
          triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
