"""Pointwise operators: the activations conv2d and matmul fuse (relu, sigmoid,
tanh), erf and GELU, clip and identity; and the helpers that apply a fused
activation (named by the `activation` attribute) under either semantics.

Fingerprints: each non-linear function is replaced by its own fixed polynomial,
distinct and non-linear, so no linear identity holds for it by accident.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .base import (
    ACTIVATIONS,
    OPS,
    Op,
    ShapeError,
    f32,
    f32_attr,
    onnx_importer,
    poly,
    register,
    residue,
)


def activate(act: str, x: np.ndarray, fp: bool = False) -> np.ndarray:
    """Apply a fused activation ("none" is identity) under either semantics."""
    if act == "none":
        return x
    op = OPS[act]
    return op.fp({}, x) if fp else op.ref({}, x)


def activate_xp(xp: Any, act: str, y: Any) -> Any:
    """A fused activation on arrays of module `xp` (the GPU lowering)."""
    return y if act == "none" else OPS[act].lower(xp, {}, [y])[0]


def emit_with_activation(em, act: str, op_type: str, ins, outs, **attrs) -> None:
    """Emit `op_type` and, if fused, the activation node after it."""
    if act == "none":
        em.node(op_type, ins, outs, **attrs)
    else:
        t = em.tmp(op_type.lower())
        em.node(op_type, ins, [t], **attrs)
        OPS[act].onnx({}, em, [t], outs, [])


def normalize_activation(act) -> str:
    a = "none" if act is None else str(act).lower()
    a = {"ac_mode_none": "none", "ac_mode_relu": "relu", "ac_mode_sigmoid": "sigmoid",
         "ac_mode_tanh": "tanh"}.get(a, a)
    if a not in ACTIVATIONS:
        raise ShapeError(f"unknown activation {act!r}")
    return a


class Pointwise(Op):
    """A unary function of each element; `onnx_type` is the ONNX node computing
    it. The verifier states the pointwise laws for every one without attributes."""

    inputs = ("x",)
    kind = "elementwise"
    pointwise = True
    gen_attrs = ()
    onnx_type = ""
    example = ({}, ((2, 3, 4),))

    def shape(self, a, x):
        return x

    def onnx(self, a, em, ins, outs, shapes):
        em.node(self.onnx_type, ins, outs)

    def dim_source(self, a, axis):
        return (0, axis)


def _import_as(name: str) -> Callable:
    return lambda ctx: [ctx.g.add_node(name, ctx.inputs)[0]]


class _Fused(Pointwise):
    """An activation conv2d and matmul can fuse (TASO's): generated over."""

    epilogue = True
    gen_attrs = ({},)
    fp_poly: Callable[[np.ndarray], np.ndarray]

    def fp(self, a, x):
        return type(self).fp_poly(x)

    def from_taso(self, p):
        return {}, None


@register
class Relu(_Fused):
    name = "relu"
    onnx_type = "Relu"
    fp_poly = poly([1, 3, 7])  # x^2 + 3x + 7
    gen_default = 5
    taso_type = 8

    def ref(self, a, x):
        return np.maximum(x, 0).astype(np.float32)

    def lower(self, xp, a, xs, cudnn=None):
        return [xp.maximum(xs[0], 0)]


@register
class Sigmoid(_Fused):
    name = "sigmoid"
    onnx_type = "Sigmoid"
    fp_poly = poly([2, 5, 11])
    taso_type = 9

    def ref(self, a, x):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)

    def lower(self, xp, a, xs, cudnn=None):
        return [1 / (1 + xp.exp(-xs[0]))]  # in float32: the reference computes in float64


@register
class Tanh(_Fused):
    name = "tanh"
    onnx_type = "Tanh"
    fp_poly = poly([3, 1, 0, 13])
    taso_type = 10

    def ref(self, a, x):
        return np.tanh(x).astype(np.float32)

    def lower(self, xp, a, xs, cudnn=None):
        return [xp.tanh(xs[0])]


onnx_importer("Relu")(_import_as("relu"))
onnx_importer("Sigmoid")(_import_as("sigmoid"))
onnx_importer("Tanh")(_import_as("tanh"))

# ---- erf and GELU ----------------------------------------------------------------------
_erf64 = np.frompyfunc(math.erf, 1, 1)


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 (numpy has none; math.erf is correctly rounded enough)."""
    return np.asarray(_erf64(np.asarray(x, np.float64)), np.float64)  # 0-d gives a float


def erf_xp(xp: Any, x: Any) -> Any:
    """erf on the GPU (the reference's math.erf runs on the host only)."""
    if xp is np:
        return erf64(x).astype(np.float32)
    from cupyx.scipy.special import erf

    return erf(x)


@register
class Erf(Pointwise):
    name = "erf"
    onnx_type = "Erf"
    epilogue = True
    gen_attrs = ({},)
    fp_poly = poly([7, 0, 3, 0])

    def ref(self, a, x):
        return f32(erf64(x))

    def fp(self, a, x):
        return Erf.fp_poly(x)

    def lower(self, xp, a, xs, cudnn=None):
        return [erf_xp(xp, xs[0])]


onnx_importer("Erf")(_import_as("erf"))


@register
class Gelu(Pointwise):
    """GELU, exact (erf) form: x * (1 + erf(x / sqrt 2)) / 2."""

    name = "gelu"
    epilogue = True
    gen_attrs = ({},)
    fp_poly = poly([4, 9, 2, 0])

    def ref(self, a, x):
        x = x.astype(np.float64)
        return f32(0.5 * x * (1.0 + erf64(x / math.sqrt(2.0))))

    def fp(self, a, x):
        return Gelu.fp_poly(x)

    def lower(self, xp, a, xs, cudnn=None):
        x = xs[0]
        return [0.5 * x * (1.0 + OPS["erf"].lower(xp, {}, [x * (1.0 / 2.0 ** 0.5)])[0])]

    def onnx(self, a, em, ins, outs, shapes):
        if getattr(em, "opset", 0) >= 20:
            em.node("Gelu", ins, outs)
            return
        # Older opsets: the erf form, spelled with Div, Erf, Add and two Muls.
        q, e, s, h = (em.tmp("gelu") for _ in range(4))
        em.node("Div", [ins[0], em.const(np.array(math.sqrt(2.0), np.float32), "sqrt2")], [q])
        em.node("Erf", [q], [e])
        em.node("Add", [e, em.const(np.array(1.0, np.float32), "one")], [s])
        em.node("Mul", [ins[0], s], [h])
        em.node("Mul", [h, em.const(np.array(0.5, np.float32), "half")], outs)


@onnx_importer("Gelu")
def _import_gelu(ctx):
    if ctx.attr("approximate", "none") != "none":
        return ctx.opaque()
    return [ctx.g.gelu(ctx.inputs[0])]


# ---- clip and identity ------------------------------------------------------------------
@register
class Clip(Pointwise):
    """Clamp to [min, max] (float bounds; infinite means unbounded); ReLU6 is
    clip(0, 6). If min > max every element becomes max, as in ONNX."""

    name = "clip"
    attrs = {"min": -math.inf, "max": math.inf}
    epilogue = True
    example = ({"min": 0.0, "max": 6.0}, ((2, 3, 4),))

    def ref(self, a, x):
        return f32(np.minimum(np.maximum(x, np.float32(a["min"])), np.float32(a["max"])))

    def fp(self, a, x):
        # Its own polynomial per pair of bounds, so clips with different bounds differ.
        return poly([3, self._code(a["min"]), self._code(a["max"])])(x)

    @staticmethod
    def _code(v: float) -> int:
        return 11 if v == -math.inf else 13 if v == math.inf else residue(v)

    def onnx(self, a, em, ins, outs, shapes):
        bounds = ["" if math.isinf(v) else em.const(np.array(v, np.float32), k)
                  for k, v in (("min", a["min"]), ("max", a["max"]))]
        while bounds and bounds[-1] == "":
            bounds.pop()
        em.node("Clip", [ins[0], *bounds], outs)

    def build(self, g, x, min=None, max=None):
        return g.add_node(self.name, [x], min=-math.inf if min is None else f32_attr(min),
                          max=math.inf if max is None else f32_attr(max))[0]


@onnx_importer("Clip")
def _import_clip(ctx):
    if len(ctx.inputs) > 1:  # opset >= 11: bounds are inputs, known before run time
        bounds = []
        for i in (1, 2):
            if i >= len(ctx.inputs) or ctx.inputs[i] is None:
                bounds.append(None)
                continue
            v = ctx.const(i)
            if v is None or v.size != 1:
                return ctx.opaque()
            bounds.append(float(v.reshape(())))
        lo, hi = bounds
    else:
        lo, hi = ctx.attr("min", None), ctx.attr("max", None)
    return [ctx.g.clip(ctx.inputs[0], min=lo, max=hi)]


@register
class Identity(Pointwise):
    name = "identity"
    kind = "movement"
    onnx_type = "Identity"

    def ref(self, a, x):
        return x

    def fp(self, a, x):
        return x


onnx_importer("Identity")(_import_as("identity"))
