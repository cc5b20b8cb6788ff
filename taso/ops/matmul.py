"""Matrix products and the matrix-shaped constants."""

from __future__ import annotations

import numpy as np

from .base import ConstantOp, Op, ShapeError, check, mod, onnx_importer, register
from .elementwise import activate, emit_with_activation, normalize_activation


@register
class MatMul(Op):
    """2-D or batched (numpy-broadcast batch dimensions) matrix product, with an
    optional fused activation."""

    name = "matmul"
    inputs = ("a", "b")
    attrs = {"activation": "none"}
    gen_attrs = ({"activation": "none"},)

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
