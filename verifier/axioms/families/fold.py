"""Folding: conv with a bias, batch norm folded into it, merged group kernels."""

from __future__ import annotations

from ..dsl import (
    ACTS,
    NCHW,
    SAME,
    VECTORS,
    Arith,
    Var,
    act,
    app,
    b,
    b2,
    concat,
    conv,
    conv_bias,
    dim,
    eq,
    family,
    ge,
    iv,
    ok,
    u,
    w,
    x,
)

axiom = family("fold", ranks=NCHW)


_l = conv_bias(x, w, b)
axiom("conv-bias-def", "conv_bias(x, w, b) = add(conv(x, w), reshape(b, (1, O, 1, 1)))", _l,
      app("add", conv(x, w), app("reshape", b, shape=(1, dim(w, 0), 1, 1))), ok(_l),
      ranks=VECTORS)
for _a in ACTS:
    axiom(f"conv-bias-{_a}-fusion", f"conv_bias(x, w, b; act={_a}) = {_a}(conv_bias(x, w, b))",
          conv_bias(x, w, b, act=_a), act(_a, conv_bias(x, w, b)), ranks=VECTORS)
_l = conv_bias(x, concat(0, w, u), concat(0, b, b2), act="?act", g=1)
axiom("conv-bias-kernel-concat", "conv_bias(x, concat_0(w, u), concat_0(b, b2)) = "
      "concat_1(conv_bias(x, w, b), conv_bias(x, u, b2))", _l,
      concat(1, conv_bias(x, w, b, act="?act", g=1), conv_bias(x, u, b2, act="?act", g=1)),
      ok(_l), eq(dim(b, 0), dim(w, 0)), ranks=VECTORS)
_l = conv_bias(x, app("enlarge", w, kernel="?k"), b, act="?act", **SAME)
axiom("conv-bias-enlarge", "conv_bias(x, enlarge(w), b) = conv_bias(x, w, b)  (same, stride 1)",
      _l, conv_bias(x, w, b, act="?act", **SAME), ok(_l), ranks=VECTORS)
_bn = dict(epsilon="?e")
sc, bi, me, va = (Var(n) for n in ("scale", "bias", "mean", "var"))
_l = app("batchnorm", conv(x, w), sc, bi, me, va, **_bn)
axiom("conv-batchnorm", "batchnorm(conv(x, w)) = conv_bias(x, w·k, bias - mean·k)  "
      "(k = scale / sqrt(var + eps) per output channel)", _l,
      conv_bias(x, app("bn_kernel", w, sc, va, **_bn), app("bn_bias", sc, bi, me, va, **_bn)),
      ok(_l), positive=("var",), ranks=VECTORS)
_l = app("batchnorm", conv_bias(x, w, b), sc, bi, me, va, **_bn)
axiom("conv-bias-batchnorm", "batchnorm(conv_bias(x, w, b)) = "
      "conv_bias(x, w·k, bias - (mean - b)·k)", _l,
      conv_bias(x, app("bn_kernel", w, sc, va, **_bn),
                app("bn_bias", sc, bi, app("sub", me, b), va, **_bn)), ok(_l), positive=("var",),
      ranks=VECTORS)
for _name, _f in (("conv", conv), ("conv-bias", None)):
    _args = (x, w) if _f else (x, w, b)

    def _c(k, g, _args=_args, _f=_f):
        return (_f or conv_bias)(_args[0], k, *_args[2:], act="?act", g=g)
    _l = _c(w, "?G")
    axiom(f"{_name}-merge-gconv", f"{_name} with G groups = {_name} with G/c groups of the "
          "kernel merged c to one", _l,
          _c(app("merge_gconv", w, groups="?G", count="?cnt"), "?h"), ok(_l),
          eq("?G", Arith("*", iv("?h"), iv("?cnt"))), ge("?cnt", 1), ranks=VECTORS)
