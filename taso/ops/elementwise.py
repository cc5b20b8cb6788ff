"""Elementwise operators: same-shape binary ops, activations, scalar multiply, and
broadcasting arithmetic."""

from __future__ import annotations

import numpy as np

from .base import Op, ShapeError, check, mod, onnx_importer, poly, register

# Each activation's fingerprint is its own fixed polynomial: distinct, non-linear,
# so no linear identity holds for it by accident.
ACT_POLY = {
    "relu": poly([1, 3, 7]),  # x^2 + 3x + 7
    "sigmoid": poly([2, 5, 11]),
    "tanh": poly([3, 1, 0, 13]),
}
ACT_REF = {
    "relu": lambda x: np.maximum(x, 0).astype(np.float32),
    "sigmoid": lambda x: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32),
    "tanh": lambda x: np.tanh(x).astype(np.float32),
}
ACT_ONNX = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def activate(act: str, x: np.ndarray, fp: bool = False) -> np.ndarray:
    """Apply a fused activation ("none" is identity) under either semantics."""
    if act == "none":
        return x
    return (ACT_POLY if fp else ACT_REF)[act](x)


def emit_with_activation(em, act: str, op_type: str, ins, outs, **attrs) -> None:
    """Emit `op_type` and, if fused, the activation node after it."""
    if act == "none":
        em.node(op_type, ins, outs, **attrs)
    else:
        t = em.tmp(op_type.lower())
        em.node(op_type, ins, [t], **attrs)
        em.node(ACT_ONNX[act], [t], outs)


def normalize_activation(act) -> str:
    a = "none" if act is None else str(act).lower()
    a = {"ac_mode_none": "none", "ac_mode_relu": "relu", "ac_mode_sigmoid": "sigmoid",
         "ac_mode_tanh": "tanh"}.get(a, a)
    if a not in ("none", *ACT_POLY):
        raise ShapeError(f"unknown activation {act!r}")
    return a


class _SameShapeBinary(Op):
    inputs = ("x", "y")
    onnx_type = ""

    def shape(self, a, x, y):
        check(x == y, "operands must have equal shapes")
        return x

    def onnx(self, a, em, ins, outs, shapes):
        em.node(self.onnx_type, ins, outs)


@register
class EwAdd(_SameShapeBinary):
    name = "ewadd"
    commutative = True
    onnx_type = "Add"

    def ref(self, a, x, y):
        return x + y

    def fp(self, a, x, y):
        return mod(x + y)


@register
class EwMul(_SameShapeBinary):
    name = "ewmul"
    commutative = True
    onnx_type = "Mul"

    def ref(self, a, x, y):
        return x * y

    def fp(self, a, x, y):
        return mod(x * y)


class _Activation(Op):
    inputs = ("x",)
    elementwise = True

    def shape(self, a, x):
        return x

    def ref(self, a, x):
        return ACT_REF[self.name](x)

    def fp(self, a, x):
        return ACT_POLY[self.name](x)

    def onnx(self, a, em, ins, outs, shapes):
        em.node(ACT_ONNX[self.name], ins, outs)


@register
class Relu(_Activation):
    name = "relu"


@register
class Sigmoid(_Activation):
    name = "sigmoid"


@register
class Tanh(_Activation):
    name = "tanh"


@register
class ScalarMul(Op):
    """TASO's MUL: a tensor times a 0-d scalar tensor."""

    name = "scalar_mul"
    inputs = ("x", "s")

    def shape(self, a, x, s):
        check(s == (), f"the scalar operand must be 0-d, got {s}")
        return x

    def ref(self, a, x, s):
        return (x * s).astype(np.float32)

    def fp(self, a, x, s):
        return mod(x * s)

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Mul", ins, outs)


class _Broadcast(Op):
    """Numpy/ONNX multidirectional broadcasting arithmetic."""

    inputs = ("x", "y")
    onnx_type = ""
    same_shape_op = ""  # the same-shape operator the builder prefers

    def shape(self, a, x, y):
        try:
            return tuple(np.broadcast_shapes(x, y))
        except ValueError:
            raise ShapeError("shapes do not broadcast") from None

    def onnx(self, a, em, ins, outs, shapes):
        em.node(self.onnx_type, ins, outs)

    def build(self, g, x, y):
        # The same-shape operator is what the rules speak of; pick it when it applies.
        if self.same_shape_op and x.shape == y.shape:
            return g.add_node(self.same_shape_op, [x, y])[0]
        if self.name == "mul" and (x.shape == () or y.shape == ()):
            return g.add_node("scalar_mul", [x, y] if y.shape == () else [y, x])[0]
        return g.add_node(self.name, [x, y])[0]


@register
class Add(_Broadcast):
    name = "add"
    commutative = True
    onnx_type = "Add"
    same_shape_op = "ewadd"

    def ref(self, a, x, y):
        return (x + y).astype(np.float32)

    def fp(self, a, x, y):
        return mod(x + y)


@register
class Sub(_Broadcast):
    name = "sub"
    onnx_type = "Sub"

    def ref(self, a, x, y):
        return (x - y).astype(np.float32)

    def fp(self, a, x, y):
        return mod(x - y)


@register
class Mul(_Broadcast):
    name = "mul"
    commutative = True
    onnx_type = "Mul"
    same_shape_op = "ewmul"

    def ref(self, a, x, y):
        return (x * y).astype(np.float32)

    def fp(self, a, x, y):
        return mod(x * y)


@register
class Div(_Broadcast):
    name = "div"
    onnx_type = "Div"

    def ref(self, a, x, y):
        return (x / y).astype(np.float32)


# ---- ONNX import ------------------------------------------------------------------
@onnx_importer("Add", "Sub", "Mul", "Div")
def _import_arithmetic(ctx):
    # The builders pick the same-shape or scalar operator where it applies.
    x, y = ctx.inputs
    return [getattr(ctx.g, ctx.node.op_type.lower())(x, y)]


@onnx_importer("Relu", "Sigmoid", "Tanh")
def _import_activation(ctx):
    return [ctx.g.add_node(ctx.node.op_type.lower(), ctx.inputs)[0]]
