"""Normalizations (batch norm, layer norm, softmax) and mean reductions (global
average pooling, ReduceMean).

Layer norm, softmax and ReduceMean are enumerated by the generator over the
last axis (the transformer set, `taso-gen --ops transformer`); the others exist
so that models load, evaluate, export and optimize around them. Fingerprints are
exact where the operator is polynomial in its inputs (float attributes enter as
exact residues of their binary fractions); 1/sqrt and exp are replaced by their
own fixed polynomials.
"""

from __future__ import annotations

import numpy as np

from .base import (
    Op,
    check,
    f32,
    f32_attr,
    inv,
    inv_array,
    mod,
    onnx_importer,
    poly,
    register,
    residue,
)
from .shape import _axis, norm_axes

_RSQRT_POLY = poly([5, 3, 1])  # stands in for 1/sqrt(var + eps)
_EXP_POLY = poly([1, 1, 2, 6])  # stands in for exp


def rsqrt_fp(var: np.ndarray, eps: float) -> np.ndarray:
    return _RSQRT_POLY(mod(var + residue(eps)))


def _rows_only(a: dict, shapes) -> dict | None:
    """Generator hint: normalize (average) the rows of a matrix or of a batch of
    sequences, not a vector (in the transformer family, a layer's parameters),
    nor rows of one element (a softmax of those is a constant 1)."""
    return a if len(shapes[0]) >= 2 and shapes[0][-1] > 1 else None


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, -1) + (1,) * (x.ndim - 2)

# ---- normalization ------------------------------------------------------------


@register
class BatchNorm(Op):
    """Inference-mode batch normalization over channel axis 1 (ONNX
    BatchNormalization): (x - mean) / sqrt(var + epsilon) * scale + bias."""

    name = "batchnorm"
    inputs = ("x", "scale", "bias", "mean", "var")
    input_ranks = {"scale": 1, "bias": 1, "mean": 1, "var": 1}
    positive = ("var",)
    attrs = {"epsilon": 1e-5}
    gen_attrs = ()
    kind = "norm"
    epilogue = True
    example = ({"epsilon": 1e-3}, ((2, 3, 4, 5), (3,), (3,), (3,), (3,)))

    def shape(self, a, x, *params):
        check(len(x) >= 2, "batchnorm takes an input of rank >= 2 (N, C, ...)")
        for p in params:
            check(p == (x[1],), f"parameters must have shape ({x[1]},), got {p}")
        check(a["epsilon"] >= 0, "epsilon must be non-negative")
        return x

    def ref(self, a, x, scale, bias, mean, var):
        c = _channel_shape(x)
        k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + a["epsilon"])
        return f32((x - mean.reshape(c)) * k.reshape(c) + bias.reshape(c))

    def fp(self, a, x, scale, bias, mean, var):
        c = _channel_shape(x)
        k = mod(scale * rsqrt_fp(var, a["epsilon"]))
        return mod(mod(x - mean.reshape(c)) * k.reshape(c) + bias.reshape(c))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("BatchNormalization", ins, outs, epsilon=float(a["epsilon"]))

    def build(self, g, input, scale, bias, mean, var, epsilon=1e-5):
        return g.add_node(self.name, [input, scale, bias, mean, var],
                          epsilon=f32_attr(epsilon))[0]


@onnx_importer("BatchNormalization")
def _import_batchnorm(ctx):
    if ctx.attr("training_mode", 0) or len([o for o in ctx.node.output if o]) > 1:
        return ctx.opaque()
    return [ctx.g.batchnorm(*ctx.inputs[:5], epsilon=ctx.attr("epsilon", 1e-5))]


@register
class LayerNorm(Op):
    """Layer normalization over the axes from `axis` to the last (ONNX
    LayerNormalization, opset 17); scale and bias have the normalized shape."""

    name = "layernorm"
    inputs = ("x", "scale", "bias")
    attrs = {"axis": -1, "epsilon": 1e-5}
    axes = {"axis": "in"}
    gen_attrs = ({"axis": -1},)
    kind = "norm"
    epilogue = True
    example = ({"axis": 2}, ((2, 3, 5, 6), (5, 6), (5, 6)))

    def gen_concrete(self, a, shapes):
        return _rows_only(a, shapes)

    def shape(self, a, x, scale, bias):
        ax = _axis(a["axis"], len(x))
        check(scale == x[ax:] and bias == x[ax:],
              f"scale and bias must have the normalized shape {x[ax:]}")
        check(a["epsilon"] >= 0, "epsilon must be non-negative")
        return x

    def _axes(self, a, x):
        return tuple(range(_axis(a["axis"], x.ndim), x.ndim))

    def ref(self, a, x, scale, bias):
        axes = self._axes(a, x)
        x = x.astype(np.float64)
        d = x - x.mean(axis=axes, keepdims=True)
        var = (d * d).mean(axis=axes, keepdims=True)
        return f32(d / np.sqrt(var + a["epsilon"]) * scale + bias)

    def fp(self, a, x, scale, bias):
        axes = self._axes(a, x)
        n_inv = inv(int(np.prod([x.shape[i] for i in axes])))
        d = mod(x - mod(mod(x.sum(axis=axes, keepdims=True)) * n_inv))
        var = mod(mod((d * d).sum(axis=axes, keepdims=True)) * n_inv)
        return mod(mod(d * rsqrt_fp(var, a["epsilon"])) * scale + bias)

    def onnx(self, a, em, ins, outs, shapes):
        if getattr(em, "opset", 17) >= 17:
            em.node("LayerNormalization", ins, outs, axis=int(a["axis"]),
                    epsilon=float(a["epsilon"]))
            return
        # Before opset 17: the same arithmetic in primitive nodes.
        x, scale, bias = ins
        rank = len(shapes[0])
        axes = list(range(_axis(a["axis"], rank), rank))
        mu, d, d2, var, ve, sd, y, ys = (em.tmp("ln") for _ in range(8))
        emit_reduce_mean(em, x, mu, axes, 1)
        em.node("Sub", [x, mu], [d])
        em.node("Mul", [d, d], [d2])
        emit_reduce_mean(em, d2, var, axes, 1)
        em.node("Add", [var, em.const(np.array(a["epsilon"], np.float32), "eps")], [ve])
        em.node("Sqrt", [ve], [sd])
        em.node("Div", [d, sd], [y])
        em.node("Mul", [y, scale], [ys])
        em.node("Add", [ys, bias], outs)

    def build(self, g, input, scale, bias, axis=-1, epsilon=1e-5):
        return g.add_node(self.name, [input, scale, bias], axis=axis,
                          epsilon=f32_attr(epsilon))[0]


@onnx_importer("LayerNormalization")
def _import_layernorm(ctx):
    if len([o for o in ctx.node.output if o]) > 1 or ctx.attr("stash_type", 1) != 1:
        return ctx.opaque()
    x, scale = ctx.inputs[0], ctx.inputs[1]
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    axis = ctx.attr("axis", -1)
    if bias is None:
        bias = ctx.weight(np.zeros(scale.shape, np.float32), ctx.node.output[0] + "_bias")
    if scale.shape != x.shape[_axis(axis, len(x.shape)):] or bias.shape != scale.shape:
        return ctx.opaque()  # broadcast parameters: not our form
    return [ctx.g.layernorm(x, scale, bias, axis=axis, epsilon=ctx.attr("epsilon", 1e-5))]


# ---- softmax ----------------------------------------------------------------------


@register
class Softmax(Op):
    """Softmax along one axis (ONNX Softmax, opset >= 13)."""

    name = "softmax"
    inputs = ("x",)
    attrs = {"axis": -1}
    axes = {"axis": "in"}
    gen_attrs = ({"axis": -1},)
    kind = "norm"
    example = ({"axis": 1}, ((2, 3, 4),))

    def gen_concrete(self, a, shapes):
        return _rows_only(a, shapes)

    def shape(self, a, x):
        _axis(a["axis"], len(x))
        return x

    def ref(self, a, x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
        return f32(e / e.sum(axis=a["axis"], keepdims=True))

    def fp(self, a, x):
        e = _EXP_POLY(x)
        return mod(e * inv_array(e.sum(axis=a["axis"], keepdims=True)))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Softmax", ins, outs, axis=int(a["axis"]))

    def build(self, g, input, axis=-1):
        return g.add_node(self.name, [input], axis=axis)[0]


@onnx_importer("Softmax")
def _import_softmax(ctx):
    rank = len(ctx.inputs[0].shape)
    axis = ctx.attr("axis", -1 if getattr(ctx, "opset", 13) >= 13 else 1)
    # Before opset 13 Softmax flattened from `axis` on: the same only on the last axis.
    if getattr(ctx, "opset", 13) < 13 and _axis(axis, rank) != rank - 1:
        return ctx.opaque()
    return [ctx.g.softmax(ctx.inputs[0], axis=axis)]


# ---- mean reductions ---------------------------------------------------------------


@register
class GlobalAvgPool(Op):
    """Mean over all spatial axes: (N, C, H, W) -> (N, C, 1, 1)."""

    name = "global_avgpool"
    inputs = ("x",)
    gen_attrs = ()
    kind = "pool"
    example = ({}, ((2, 3, 4, 5),))

    def shape(self, a, x):
        check(len(x) >= 3, "global_avgpool takes an input of rank >= 3 (N, C, spatial...)")
        return (x[0], x[1]) + (1,) * (len(x) - 2)

    def ref(self, a, x):
        return f32(x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True))

    def fp(self, a, x):
        axes = tuple(range(2, x.ndim))
        n = int(np.prod(x.shape[2:]))
        return mod(mod(x.sum(axis=axes, keepdims=True)) * inv(n))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("GlobalAveragePool", ins, outs)


@onnx_importer("GlobalAveragePool")
def _import_global_avgpool(ctx):
    return [ctx.g.global_avgpool(ctx.inputs[0])]


@register
class ReduceMean(Op):
    name = "reduce_mean"
    inputs = ("x",)
    attrs = {"axes": None, "keepdims": 1}
    axes = {"axes": "in"}
    gen_attrs = ({"axes": (-1,), "keepdims": 1},)
    kind = "norm"
    example = ({"axes": (1, 2), "keepdims": 0}, ((2, 3, 4),))

    def gen_concrete(self, a, shapes):
        return _rows_only(a, shapes)

    def shape(self, a, x):
        axes = norm_axes(a["axes"], len(x))
        if a["keepdims"]:
            return tuple(1 if i in axes else d for i, d in enumerate(x))
        return tuple(d for i, d in enumerate(x) if i not in axes)

    def ref(self, a, x):
        return f32(x.astype(np.float64).mean(axis=tuple(a["axes"]),
                                              keepdims=bool(a["keepdims"])))

    def fp(self, a, x):
        axes = tuple(a["axes"])
        n = int(np.prod([x.shape[i] for i in axes]))
        # np.asarray: reducing every axis without keepdims gives a numpy scalar
        return np.asarray(mod(mod(x.sum(axis=axes, keepdims=bool(a["keepdims"]))) * inv(n)))

    def onnx(self, a, em, ins, outs, shapes):
        emit_reduce_mean(em, ins[0], outs[0], a["axes"], a["keepdims"])

    def build(self, g, x, axes, keepdims=1):
        return g.add_node(self.name, [x], axes=norm_axes(axes, len(x.shape)),
                          keepdims=int(bool(keepdims)))[0]


def emit_reduce_mean(em, x: str, out: str, axes, keepdims: int) -> None:
    """ReduceMean; its axes moved from an attribute to an input at opset 18."""
    if getattr(em, "opset", 18) >= 18:
        em.node("ReduceMean", [x, em.const(np.array(axes, np.int64), "axes")], [out],
                keepdims=int(keepdims))
    else:
        em.node("ReduceMean", [x], [out], axes=[int(i) for i in axes], keepdims=int(keepdims))


@onnx_importer("ReduceMean")
def _import_reduce_mean(ctx):
    x = ctx.inputs[0]
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:  # opset 18: axes input
        axes = ctx.const(1)
        if axes is None:
            return ctx.opaque()
        axes = axes.tolist()
    else:
        axes = ctx.attr("axes", None)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [ctx.g.identity(x)]
        axes = range(len(x.shape))
    return [ctx.g.reduce_mean(x, axes, keepdims=ctx.attr("keepdims", 1))]
