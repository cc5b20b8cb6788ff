"""Strictness: an operator applied to ⊥ is ⊥ (a defined application has defined
operands), for every operator an axiom or a rule of the shipped sets applies."""

from __future__ import annotations

from taso.ops import OPS

from ..dsl import (
    ACTS,
    POINTWISE,
    STACK_ARITIES,
    Var,
    app,
    b,
    concat,
    dim,
    family,
    gemm,
    ok,
    u,
    x,
    y,
    z,
)

axiom = family("strict")
# An operator applied to ⊥ is ⊥: a defined application has defined operands.
for _op in ("ewadd", "ewmul", "scalar_mul", "relu", "sigmoid", "tanh", "transpose", "matmul",
            "conv2d", "maxpool2d", "avgpool2d", "enlarge", "add", "mul", "split", "conv2d_bias",
            "reshape", "batchnorm", "bn_kernel", "bn_bias", "merge_gconv", "sub", "flatten",
            *(p for p in POINTWISE if p not in ACTS), "div", "softmax", "layernorm",
            "reduce_mean"):
    _o = OPS[_op]
    _args = tuple(Var(n) for n in _o.inputs)  # named as the operator names its inputs
    _ranks = dict(_o.input_ranks)  # what the numeric check draws
    _e = app(_op, *_args, **{k: f"?{k}" for k in _o.attrs})
    for _v in _args:
        axiom(f"{_op}-strict-{_v}", f"ok({_op}(...{_v}...)) implies ok({_v})", _v, None, ok(_e),
              rel="ok", triggers=((_e,),), ranks=_ranks)
for _c in ((), (b,)):
    _e = gemm(x, y, *_c)
    for _v in (x, y, *_c):
        axiom(f"gemm{len(_c) + 2}-strict-{_v}", f"ok(gemm(...{_v}...)) implies ok({_v})", _v,
              None, ok(_e), rel="ok", triggers=((_e,),))
for _n in range(2, max(STACK_ARITIES) + 1):
    _args = (x, y, z, u)[:_n] if _n <= 4 else tuple(Var(f"x{_i}") for _i in range(_n))
    _e = concat("?a", *_args)
    for _v in _args:
        axiom(f"concat{_n}-strict-{_v}", f"ok(concat(...{_v}...)) implies ok({_v})", _v, None,
              ok(_e), rel="ok", triggers=((_e,),))
# (a shape axiom, stated last as it always was: the solver sees axioms in order)
family("shape")("dim-nonneg", "dim(x, i) >= 0", dim(x, "?i"), 0, rel=">=",
                triggers=((dim(x, "?i"),),))
