"""Elementwise arithmetic: same-shape binary ops (TASO's), scalar multiply, and
broadcasting arithmetic. (Unary ones, the activations among them: activation.py.)"""

from __future__ import annotations

import numpy as np

from .base import Op, ShapeError, check, inv_array, mod, onnx_importer, register


class _Arithmetic(Op):
    inputs = ("x", "y")
    kind = "elementwise"
    arithmetic = True
    epilogue = True
    example = ({}, ((2, 3), (2, 3)))

class _SameShapeBinary(_Arithmetic):
    onnx_type = ""

    def shape(self, a, x, y):
        check(x == y, "operands must have equal shapes")
        return x

    def onnx(self, a, em, ins, outs, shapes):
        em.node(self.onnx_type, ins, outs)

    def from_taso(self, p):
        return {}, None

    def dim_source(self, a, axis):
        return (0, axis)


@register
class EwAdd(_SameShapeBinary):
    name = "ewadd"
    gen_default = 3
    taso_type = 16
    commutative = True
    onnx_type = "Add"

    def ref(self, a, x, y):
        return x + y

    def fp(self, a, x, y):
        return mod(x + y)


@register
class EwMul(_SameShapeBinary):
    name = "ewmul"
    gen_default = 4
    taso_type = 17
    commutative = True
    onnx_type = "Mul"

    def ref(self, a, x, y):
        return x * y

    def fp(self, a, x, y):
        return mod(x * y)


@register
class ScalarMul(_Arithmetic):
    """TASO's MUL: a tensor times a 0-d scalar tensor."""

    name = "scalar_mul"
    inputs = ("x", "s")
    input_ranks = {"s": 0}
    gen_default = 12
    taso_type = 19
    example = ({}, ((2, 3), ()))

    def shape(self, a, x, s):
        check(s == (), f"the scalar operand must be 0-d, got {s}")
        return x

    def ref(self, a, x, s):
        return (x * s).astype(np.float32)

    def fp(self, a, x, s):
        return mod(x * s)

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Mul", ins, outs)

    from_taso = _SameShapeBinary.from_taso
    dim_source = _SameShapeBinary.dim_source


class _Broadcast(_Arithmetic):
    """Numpy/ONNX multidirectional broadcasting arithmetic."""

    onnx_type = ""
    example = ({}, ((2, 3, 4), (4,)))
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
    divisor = 1
    # A tensor by a scalar only (attention's 1/sqrt(d); a scalar by itself is
    # a constant 1). A zero divisor has no inverse residue (its fingerprint is
    # 0): rules that cancel one are caught by the generator's check with the
    # divisor at zero (`Op.divisor`).
    gen_attrs = ({},)

    def gen_concrete(self, a, shapes):
        return a if shapes[1] == () and shapes[0] != () else None

    def ref(self, a, x, y):
        return (x / y).astype(np.float32)

    def fp(self, a, x, y):
        return mod(x * inv_array(y))


# ---- ONNX import ------------------------------------------------------------------
@onnx_importer("Add", "Sub", "Mul", "Div")
def _import_arithmetic(ctx):
    # The builders pick the same-shape or scalar operator where it applies.
    x, y = ctx.inputs
    return [getattr(ctx.g, ctx.node.op_type.lower())(x, y)]
