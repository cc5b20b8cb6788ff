"""Matrix products (MatMul, ONNX's Gemm) and the matrix-shaped constants."""

from __future__ import annotations

import numpy as np

from .activation import activate, activate_xp, emit_with_activation, normalize_activation
from .base import (
    ConstantOp,
    Op,
    ShapeError,
    check,
    f32,
    f32_attr,
    mod,
    onnx_importer,
    register,
    residue,
    size,
)
from .conv import TASO_ACTIVATION


@register
class MatMul(Op):
    """2-D or batched (numpy-broadcast batch dimensions) matrix product, with an
    optional fused activation."""

    name = "matmul"
    inputs = ("a", "b")
    attrs = {"activation": "none"}
    gen_attrs = ({"activation": "none"},)
    kind = "matmul"
    contraction = True
    gen_rank = 2  # on matrices, as TASO's generator
    # a transformer's dense layers (3-D by 2-D) and batched products (3-D by 3-D)
    gen_sets = {"transformer": ({"activation": "none"},)}
    gen_default = 1
    taso_type = 18
    example = ({"activation": "tanh"}, ((3, 5, 4), (4, 2)))

    def lower(self, xp, a, xs, cudnn=None):
        return [activate_xp(xp, a["activation"], xp.matmul(*xs))]

    def flops(self, a, shapes, outs):
        out = size(outs[0])
        return 2 * out * shapes[0][-1] + (out if a["activation"] != "none" else 0)

    def default_consts(self, shapes):
        # a plain matrix right operand is a weight; a batched one is an
        # activation, as in attention
        return (False, len(shapes[1]) == 2)

    def from_taso(self, p):
        return {"activation": TASO_ACTIVATION[p.get("acti", 0)]}, 2

    def dim_source(self, a, axis):
        # rows from the left operand, columns from the right (TASO's are 2-D)
        return {0: (0, 0), 1: (1, 1)}.get(axis)

    def shape(self, a, x, y):
        check(len(x) >= 2 and len(y) >= 2, "matmul operands must have rank >= 2")
        check(x[-1] == y[-2], f"inner dimensions differ ({x[-1]} vs {y[-2]})")
        try:
            batch = np.broadcast_shapes(x[:-2], y[:-2])
        except ValueError:
            raise ShapeError("batch dimensions do not broadcast") from None
        return (*batch, x[-2], y[-1])

    def ref(self, a, x, y):
        return activate(a["activation"], np.matmul(x, y).astype(np.float32))

    def fp(self, a, x, y):
        return activate(a["activation"], mod(np.matmul(x, y)), fp=True)

    def onnx(self, a, em, ins, outs, shapes):
        emit_with_activation(em, a["activation"], "MatMul", ins, outs)

    def build(self, g, input, weight, activation=None):
        return g.add_node(self.name, [input, weight],
                          activation=normalize_activation(activation))[0]


@register
class ConstImm(ConstantOp):
    """Identity matrix (n, n)."""

    name = "const_imm"
    gen_default = 15
    taso_type = 22
    example = ({"shape": (3, 3)}, ())

    def shape(self, a):
        s = a["shape"]
        check(len(s) == 2 and s[0] == s[1], "const_imm shape must be (n, n)")
        return s

    def value(self, a):
        return np.eye(a["shape"][0], dtype=np.int64)


@register
class ConstOne(ConstantOp):
    """A tensor of ones of any shape."""

    name = "const_one"
    gen_default = 16
    taso_type = 24
    example = ({"shape": (2, 3)}, ())

    def shape(self, a):
        return a["shape"]

    def value(self, a):
        return np.ones(a["shape"], np.int64)


# ---- ONNX import ------------------------------------------------------------------
@onnx_importer("MatMul")
def _import_matmul(ctx):
    a, b = ctx.inputs
    if len(a.shape) < 2 or len(b.shape) < 2:
        return None  # 1-D operands (vector products) stay opaque
    return [ctx.g.matmul(a, b)]


# ---- Gemm ------------------------------------------------------------------------


@register
class Gemm(Op):
    """alpha * A' B' + beta * C with A' = A or its transpose (likewise B'); C is
    optional and broadcasts to (M, N) (ONNX Gemm)."""

    name = "gemm"
    inputs = ("*abc",)
    attrs = {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0}
    gen_attrs = ()
    kind = "matmul"
    contraction = True
    example = ({"alpha": 0.5, "beta": 2.0, "trans_b": 1}, ((6, 8), (5, 8), (5,)))

    def flops(self, a, shapes, outs):
        # The first operand holds rows x K in some order.
        rows = outs[0][0] if outs[0] else 1
        return 2 * size(outs[0]) * max(size(shapes[0]) // max(rows, 1), 1)

    def default_consts(self, shapes):
        return tuple(i > 0 for i in range(len(shapes)))

    def check_arity(self, n):
        check(n in (2, 3), f"gemm takes 2 or 3 inputs, got {n}")

    def shape(self, a, x, y, *c):
        check(len(x) == 2 and len(y) == 2, "gemm takes 2-D A and B")
        m, k = x[::-1] if a["trans_a"] else x
        k2, n = y[::-1] if a["trans_b"] else y
        check(k == k2, f"inner dimensions differ ({k} vs {k2})")
        if c:
            check(len(c[0]) <= 2 and all(d in (1, e) for d, e in
                                         zip(c[0][::-1], (n, m))),
                  f"C of shape {c[0]} does not broadcast to ({m}, {n})")
        return (m, n)

    def _ab(self, a, x, y):
        return (x.T if a["trans_a"] else x), (y.T if a["trans_b"] else y)

    def ref(self, a, x, y, *c):
        x, y = self._ab(a, x.astype(np.float64), y.astype(np.float64))
        out = a["alpha"] * (x @ y)
        if c:
            out = out + a["beta"] * c[0].astype(np.float64)
        return f32(out)

    def fp(self, a, x, y, *c):
        x, y = self._ab(a, x, y)
        out = mod(mod(x @ y) * residue(a["alpha"]))
        if c:
            out = mod(out + mod(c[0] * residue(a["beta"])))
        return out

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Gemm", ins, outs, alpha=float(a["alpha"]), beta=float(a["beta"]),
                transA=int(a["trans_a"]), transB=int(a["trans_b"]))

    def build(self, g, a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
        ins = [a, b] if c is None else [a, b, c]
        return g.add_node(self.name, ins, alpha=f32_attr(alpha), beta=f32_attr(beta),
                          trans_a=int(bool(trans_a)), trans_b=int(bool(trans_b)))[0]


@onnx_importer("Gemm")
def _import_gemm(ctx):
    a, b = ctx.inputs[0], ctx.inputs[1]
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    return [ctx.g.gemm(a, b, c, alpha=ctx.attr("alpha", 1.0), beta=ctx.attr("beta", 1.0),
                       trans_a=ctx.attr("transA", 0), trans_b=ctx.attr("transB", 0))]
