"""The operators real models need beyond TASO's generator set: normalizations,
softmax, erf and GELU, global pooling, padding, slicing, squeeze/unsqueeze, clip,
identity, Gemm, flatten and reduce-mean.

None of them is enumerated by the generator (`gen_attrs = ()`); they exist so
that models load, evaluate, export and optimize around them. Fingerprints are
exact where the operator is polynomial in its inputs (float attributes enter as
exact residues of their binary fractions); each non-polynomial part (1/sqrt,
exp, erf, GELU, clip) is replaced by its own fixed polynomial.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .base import Op, P, as_array, check, inv, mod, onnx_importer, poly, register
from .shape import _axis

# ---- fingerprint helpers -------------------------------------------------------


def residue(value: float) -> int:
    """A float as an exact residue: a binary fraction n / 2^k becomes n * inv(2^k)."""
    f = Fraction(value)
    return int(f.numerator) % P * inv(f.denominator) % P


def inv_array(x: np.ndarray) -> np.ndarray:
    """Elementwise inverse modulo P by Fermat's little theorem (0 maps to 0)."""
    out, base, e = np.ones_like(x, dtype=np.int64), mod(x), P - 2
    while e:
        if e & 1:
            out = mod(out * base)
        base = mod(base * base)
        e >>= 1
    return out


_RSQRT_POLY = poly([5, 3, 1])  # stands in for 1/sqrt(var + eps)
_EXP_POLY = poly([1, 1, 2, 6])  # stands in for exp
_ERF_POLY = poly([7, 0, 3, 0])
_GELU_POLY = poly([4, 9, 2, 0])


def _rsqrt_fp(var: np.ndarray, eps: float) -> np.ndarray:
    return _RSQRT_POLY(mod(var + residue(eps)))


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, -1) + (1,) * (x.ndim - 2)


def _f32(x: np.ndarray) -> np.ndarray:
    return as_array(x).astype(np.float32)


def f32_attr(v: float) -> float:
    """A float attribute as ONNX stores it (float32), so export and re-import
    give back the same attribute and the reference uses the exported value."""
    return float(np.float32(v))


def _norm_axes(axes, rank: int) -> tuple[int, ...]:
    axes = tuple(_axis(int(a), rank) for a in axes)
    check(len(set(axes)) == len(axes), f"repeated axes {axes}")
    return tuple(sorted(axes))


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

    def shape(self, a, x, *params):
        check(len(x) >= 2, "batchnorm takes an input of rank >= 2 (N, C, ...)")
        for p in params:
            check(p == (x[1],), f"parameters must have shape ({x[1]},), got {p}")
        check(a["epsilon"] >= 0, "epsilon must be non-negative")
        return x

    def ref(self, a, x, scale, bias, mean, var):
        c = _channel_shape(x)
        k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + a["epsilon"])
        return _f32((x - mean.reshape(c)) * k.reshape(c) + bias.reshape(c))

    def fp(self, a, x, scale, bias, mean, var):
        c = _channel_shape(x)
        k = mod(scale * _rsqrt_fp(var, a["epsilon"]))
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
    gen_attrs = ()

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
        return _f32(d / np.sqrt(var + a["epsilon"]) * scale + bias)

    def fp(self, a, x, scale, bias):
        axes = self._axes(a, x)
        n_inv = inv(int(np.prod([x.shape[i] for i in axes])))
        d = mod(x - mod(mod(x.sum(axis=axes, keepdims=True)) * n_inv))
        var = mod(mod((d * d).sum(axis=axes, keepdims=True)) * n_inv)
        return mod(mod(d * _rsqrt_fp(var, a["epsilon"])) * scale + bias)

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


# ---- softmax and the erf family ---------------------------------------------------------


@register
class Softmax(Op):
    """Softmax along one axis (ONNX Softmax, opset >= 13)."""

    name = "softmax"
    inputs = ("x",)
    attrs = {"axis": -1}
    axes = {"axis": "in"}
    gen_attrs = ()

    def shape(self, a, x):
        _axis(a["axis"], len(x))
        return x

    def ref(self, a, x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
        return _f32(e / e.sum(axis=a["axis"], keepdims=True))

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


_erf64 = np.frompyfunc(math.erf, 1, 1)


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 (numpy has none; math.erf is correctly rounded enough)."""
    return np.asarray(_erf64(np.asarray(x, np.float64)), np.float64)  # 0-d gives a float


class _Unary(Op):
    inputs = ("x",)
    elementwise = True
    gen_attrs = ()

    def shape(self, a, x):
        return x


@register
class Erf(_Unary):
    name = "erf"

    def ref(self, a, x):
        return _f32(erf64(x))

    def fp(self, a, x):
        return _ERF_POLY(x)

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Erf", ins, outs)


@onnx_importer("Erf")
def _import_erf(ctx):
    return [ctx.g.erf(ctx.inputs[0])]


@register
class Gelu(_Unary):
    """GELU, exact (erf) form: x * (1 + erf(x / sqrt 2)) / 2."""

    name = "gelu"

    def ref(self, a, x):
        x = x.astype(np.float64)
        return _f32(0.5 * x * (1.0 + erf64(x / math.sqrt(2.0))))

    def fp(self, a, x):
        return _GELU_POLY(x)

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


# ---- elementwise odds and ends ------------------------------------------------------------


@register
class Clip(_Unary):
    """Clamp to [min, max] (float bounds; infinite means unbounded); ReLU6 is
    clip(0, 6). If min > max every element becomes max, as in ONNX."""

    name = "clip"
    attrs = {"min": -math.inf, "max": math.inf}

    def ref(self, a, x):
        return _f32(np.minimum(np.maximum(x, np.float32(a["min"])), np.float32(a["max"])))

    def fp(self, a, x):
        # Its own polynomial per pair of bounds, so clips with different bounds differ.
        return poly([3, self._code(a["min"]), self._code(a["max"])])(x)

    @staticmethod
    def _code(v: float) -> int:
        return 11 if v == -math.inf else 13 if v == math.inf else residue(v)

    def z3_params(self, a):
        return tuple(self._code(v) for v in (a["min"], a["max"]))

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
class Identity(_Unary):
    name = "identity"

    def ref(self, a, x):
        return x

    def fp(self, a, x):
        return x

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Identity", ins, outs)


@onnx_importer("Identity")
def _import_identity(ctx):
    return [ctx.g.identity(ctx.inputs[0])]


# ---- pooling and reduction ---------------------------------------------------------------


@register
class GlobalAvgPool(Op):
    """Mean over all spatial axes: (N, C, H, W) -> (N, C, 1, 1)."""

    name = "global_avgpool"
    inputs = ("x",)
    gen_attrs = ()

    def shape(self, a, x):
        check(len(x) >= 3, "global_avgpool takes an input of rank >= 3 (N, C, spatial...)")
        return (x[0], x[1]) + (1,) * (len(x) - 2)

    def ref(self, a, x):
        return _f32(x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True))

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
    gen_attrs = ()

    def shape(self, a, x):
        axes = _norm_axes(a["axes"], len(x))
        if a["keepdims"]:
            return tuple(1 if i in axes else d for i, d in enumerate(x))
        return tuple(d for i, d in enumerate(x) if i not in axes)

    def ref(self, a, x):
        return _f32(x.astype(np.float64).mean(axis=tuple(a["axes"]),
                                              keepdims=bool(a["keepdims"])))

    def fp(self, a, x):
        axes = tuple(a["axes"])
        n = int(np.prod([x.shape[i] for i in axes]))
        # np.asarray: reducing every axis without keepdims gives a numpy scalar
        return np.asarray(mod(mod(x.sum(axis=axes, keepdims=bool(a["keepdims"]))) * inv(n)))

    def onnx(self, a, em, ins, outs, shapes):
        emit_reduce_mean(em, ins[0], outs[0], a["axes"], a["keepdims"])

    def build(self, g, x, axes, keepdims=1):
        return g.add_node(self.name, [x], axes=_norm_axes(axes, len(x.shape)),
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


# ---- data movement -----------------------------------------------------------------------


@register
class Pad(Op):
    """Constant padding; `pads` in ONNX order: every axis's begin, then every end."""

    name = "pad"
    inputs = ("x",)
    attrs = {"pads": None, "value": 0.0}
    gen_attrs = ()

    def shape(self, a, x):
        p = a["pads"]
        check(len(p) == 2 * len(x), f"pads needs {2 * len(x)} entries for rank {len(x)}, "
                                    f"got {len(p)}")
        check(min(p, default=0) >= 0, f"pads must be non-negative, got {p}")
        r = len(x)
        return tuple(d + p[i] + p[i + r] for i, d in enumerate(x))

    def _widths(self, a, rank):
        p = a["pads"]
        return [(p[i], p[i + rank]) for i in range(rank)]

    def ref(self, a, x):
        return np.pad(x, self._widths(a, x.ndim), constant_values=np.float32(a["value"]))

    def fp(self, a, x):
        return np.pad(x, self._widths(a, x.ndim), constant_values=residue(a["value"]))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Pad", [ins[0], em.const(np.array(a["pads"], np.int64), "pads"),
                        em.const(np.array(a["value"], np.float32), "pad_value")], outs,
                mode="constant")

    def build(self, g, x, pads, value=0.0):
        return g.add_node(self.name, [x], pads=tuple(int(p) for p in pads),
                          value=f32_attr(value))[0]


@onnx_importer("Pad")
def _import_pad(ctx):
    x = ctx.inputs[0]
    if ctx.attr("mode", "constant") != "constant":
        return ctx.opaque()
    rank = len(x.shape)
    if len(ctx.inputs) > 1:  # opset >= 11: pads, constant_value and axes are inputs
        pads = ctx.const(1)
        value = ctx.const(2) if len(ctx.inputs) > 2 and ctx.inputs[2] is not None \
            else np.zeros(())
        axes = ctx.const(3) if len(ctx.inputs) > 3 and ctx.inputs[3] is not None \
            else np.arange(rank)
        if pads is None or value is None or axes is None:
            return ctx.opaque()
        pads, axes = pads.tolist(), [_axis(int(i), rank) for i in axes.tolist()]
        full = [0] * (2 * rank)
        for k, ax in enumerate(axes):
            full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
        pads, value = full, float(np.asarray(value).reshape(()))
    else:
        pads, value = ctx.attr("pads", None), ctx.attr("value", 0.0)
    if min(pads, default=0) < 0:
        return ctx.opaque()  # negative pads crop: not this operator
    return [ctx.g.pad(x, pads, value=value)]


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice clamping of one axis's start and end (end may become -1, meaning
    "through index 0", for negative steps)."""
    check(step != 0, "slice step must not be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


@register
class Slice(Op):
    """Static strided slice (ONNX Slice with constant starts, ends, axes, steps)."""

    name = "slice"
    inputs = ("x",)
    attrs = {"starts": None, "ends": None, "axes": None, "steps": None}
    axes = {"axes": "in"}
    gen_attrs = ()

    def _index(self, a, x: tuple[int, ...]) -> tuple[slice, ...]:
        n = len(a["starts"])
        check(len(a["ends"]) == n and len(a["axes"]) == n and len(a["steps"]) == n,
              "starts, ends, axes and steps must have equal lengths")
        axes = [_axis(ax, len(x)) for ax in a["axes"]]
        check(len(set(axes)) == n, f"repeated axes {a['axes']}")
        index = [slice(None)] * len(x)
        for ax, s, e, st in zip(axes, a["starts"], a["ends"], a["steps"]):
            s, e = slice_bounds(x[ax], s, e, st)
            index[ax] = slice(s, None if e < 0 else e, st)
        return tuple(index)

    def shape(self, a, x):
        return tuple(len(range(*ix.indices(d))) for ix, d in zip(self._index(a, x), x))

    def ref(self, a, x):
        return np.ascontiguousarray(x[self._index(a, x.shape)])

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        consts = [em.const(np.array(a[k], np.int64), k)
                  for k in ("starts", "ends", "axes", "steps")]
        em.node("Slice", [ins[0], *consts], outs)

    def build(self, g, x, starts, ends, axes=None, steps=None):
        rank = len(x.shape)
        axes = range(len(starts)) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        return g.add_node(self.name, [x], starts=tuple(int(s) for s in starts),
                          ends=tuple(int(e) for e in ends),
                          axes=tuple(_axis(int(ax), rank) for ax in axes),
                          steps=tuple(int(s) for s in steps))[0]


@onnx_importer("Slice")
def _import_slice(ctx):
    x = ctx.inputs[0]
    if len(ctx.inputs) > 1:  # opset >= 10: starts, ends, axes, steps are inputs
        vals = [ctx.const(i) if i < len(ctx.inputs) and ctx.inputs[i] is not None else None
                for i in range(1, 5)]
        if vals[0] is None or vals[1] is None or any(
                v is None for i, v in enumerate(vals) if i + 1 < len(ctx.inputs)
                and ctx.inputs[i + 1] is not None):
            return ctx.opaque()
        starts, ends, axes, steps = (None if v is None else v.tolist() for v in vals)
    else:
        starts, ends, axes, steps = ctx.attr("starts", None), ctx.attr("ends", None), \
            ctx.attr("axes", None), None
    return [ctx.g.slice(x, starts, ends, axes=axes, steps=steps)]


@register
class Squeeze(Op):
    name = "squeeze"
    inputs = ("x",)
    attrs = {"axes": None}
    axes = {"axes": "in"}
    gen_attrs = ()

    def shape(self, a, x):
        axes = _norm_axes(a["axes"], len(x))
        check(all(x[i] == 1 for i in axes), f"cannot squeeze axes {axes} of shape {x}")
        return tuple(d for i, d in enumerate(x) if i not in axes)

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Squeeze", [ins[0], em.const(np.array(a["axes"], np.int64), "axes")], outs)

    def build(self, g, x, axes):
        return g.add_node(self.name, [x], axes=_norm_axes(axes, len(x.shape)))[0]


@register
class Unsqueeze(Op):
    """Insert size-1 axes; `axes` index the output."""

    name = "unsqueeze"
    inputs = ("x",)
    attrs = {"axes": None}
    axes = {"axes": "out"}
    gen_attrs = ()

    def shape(self, a, x):
        rank = len(x) + len(a["axes"])
        axes = _norm_axes(a["axes"], rank)
        rest = iter(x)
        return tuple(1 if i in axes else next(rest) for i in range(rank))

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Unsqueeze", [ins[0], em.const(np.array(a["axes"], np.int64), "axes")], outs)

    def build(self, g, x, axes):
        return g.add_node(self.name, [x],
                          axes=_norm_axes(axes, len(x.shape) + len(tuple(axes))))[0]


def _axes_input(ctx) -> list[int] | None:
    """Squeeze/Unsqueeze axes: input 1 from opset 13, the attribute before."""
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
        v = ctx.const(1)
        return None if v is None else v.tolist()
    return ctx.attr("axes", None)


@onnx_importer("Squeeze")
def _import_squeeze(ctx):
    x = ctx.inputs[0]
    axes = _axes_input(ctx)
    if axes is None:
        if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
            return ctx.opaque()  # axes computed at run time
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [ctx.g.squeeze(x, axes)]


@onnx_importer("Unsqueeze")
def _import_unsqueeze(ctx):
    axes = _axes_input(ctx)
    if axes is None:
        return ctx.opaque()
    return [ctx.g.unsqueeze(ctx.inputs[0], axes)]


@register
class Flatten(Op):
    """Collapse to 2-D: the axes before `axis`, and the rest (ONNX Flatten)."""

    name = "flatten"
    inputs = ("x",)
    attrs = {"axis": 1}
    axes = {"axis": "in+1"}
    gen_attrs = ()

    def shape(self, a, x):
        ax = a["axis"]
        check(-len(x) <= ax <= len(x), f"axis {ax} out of range for rank {len(x)}")
        ax = ax % len(x) if ax < 0 else ax
        return (int(np.prod(x[:ax])), int(np.prod(x[ax:])))

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Flatten", ins, outs, axis=int(a["axis"]))

    def build(self, g, x, axis=1):
        return g.add_node(self.name, [x], axis=axis)[0]


@onnx_importer("Flatten")
def _import_flatten(ctx):
    return [ctx.g.flatten(ctx.inputs[0], axis=ctx.attr("axis", 1))]


# ---- Gemm ------------------------------------------------------------------------


@register
class Gemm(Op):
    """alpha * A' B' + beta * C with A' = A or its transpose (likewise B'); C is
    optional and broadcasts to (M, N) (ONNX Gemm)."""

    name = "gemm"
    inputs = ("*abc",)
    attrs = {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0}
    gen_attrs = ()

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
        return _f32(out)

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
