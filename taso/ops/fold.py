"""Operators that folding rewrites produce: a convolution with a per-channel bias
(what conv + batch norm becomes), and the weight-only helpers that compute its
parameters — batch norm folded into a kernel and a bias, and a grouped kernel
widened for fewer groups (TASO's MERGE_GCONV). The helpers read weights only,
so after the search they are evaluated once and become initializers.
"""

from __future__ import annotations

import numpy as np

from .activation import activate, activate_xp
from .base import Op, check, mod, register
from .conv import Conv2d
from .norm import rsqrt_fp


def _bn_factor(scale: np.ndarray, var: np.ndarray, eps: float) -> np.ndarray:
    """scale / sqrt(var + eps) in float64, as batchnorm's reference computes it."""
    return scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)


def _bn_factor_fp(scale: np.ndarray, var: np.ndarray, eps: float) -> np.ndarray:
    return mod(scale * rsqrt_fp(var, eps))


@register
class Conv2dBias(Conv2d):
    """conv2d(x, w) + b per output channel, then the fused activation (ONNX Conv
    with its bias input): conv2d's attributes, shape rule, export and cost."""

    name = "conv2d_bias"
    inputs = ("x", "w", "b")
    input_ranks = {"x": 4, "w": 4, "b": 1}
    gen_attrs = ()
    gen_default = None
    taso_type = None
    example = ({"pads": (1, 1, 1, 1), "activation": "relu"},
               ((1, 4, 6, 6), (8, 4, 3, 3), (8,)))

    def shape(self, a, x, w, b):
        check(b == (w[0],) if len(w) == 4 else False,
              f"bias must have shape ({w[0] if w else '?'},), got {b}")
        return super().shape(a, x, w)

    def _run(self, a, x, w, b, fp):
        lin = dict(a, activation="none")
        y = (super().fp if fp else super().ref)(lin, x, w)
        y = y + b.reshape(1, -1, 1, 1)
        return activate(a["activation"], mod(y) if fp else y.astype(np.float32), fp)

    def ref(self, a, x, w, b):
        return self._run(a, x, w, b, fp=False)

    def fp(self, a, x, w, b):
        return self._run(a, x, w, b, fp=True)

    def lower(self, xp, a, xs, cudnn=None):
        y = super().lower(xp, dict(a, activation="none"), xs[:2], cudnn)[0]
        return [activate_xp(xp, a["activation"], y + xs[2].reshape(1, -1, 1, 1))]

    def build(self, g, input, weight, bias, strides=(1, 1), padding=(0, 0, 0, 0),
              dilations=(1, 1), groups=1, activation=None):
        return self._add(g, [input, weight, bias], strides, padding, dilations, groups,
                         activation)


@register
class BnKernel(Op):
    """A kernel (O, ...) scaled per output channel by scale / sqrt(var + eps):
    the kernel of conv followed by batch norm."""

    name = "bn_kernel"
    inputs = ("w", "scale", "var")
    input_ranks = {"scale": 1, "var": 1}
    positive = ("var",)
    attrs = {"epsilon": 1e-5}
    gen_attrs = ()
    kind = "norm"
    example = ({"epsilon": 1e-3}, ((3, 2, 1, 1), (3,), (3,)))

    def shape(self, a, w, scale, var):
        check(len(w) >= 2 and scale == (w[0],) and var == (w[0],),
              f"scale and var must have shape ({w[0] if w else '?'},)")
        return w

    def ref(self, a, w, scale, var):
        k = _bn_factor(scale, var, a["epsilon"]).reshape((-1,) + (1,) * (w.ndim - 1))
        return (w.astype(np.float64) * k).astype(np.float32)

    def fp(self, a, w, scale, var):
        k = _bn_factor_fp(scale, var, a["epsilon"]).reshape((-1,) + (1,) * (w.ndim - 1))
        return mod(w * k)

    def onnx(self, a, em, ins, outs, shapes):
        k = _emit_factor(em, ins[1], ins[2], a["epsilon"])
        shaped = em.tmp("bn_factor")
        em.node("Reshape", [k, em.const(np.array([-1] + [1] * (len(shapes[0]) - 1),
                                                  np.int64), "shape")], [shaped])
        em.node("Mul", [ins[0], shaped], outs)


@register
class BnBias(Op):
    """bias - mean * scale / sqrt(var + eps): the bias of conv followed by batch norm."""

    name = "bn_bias"
    inputs = ("scale", "bias", "mean", "var")
    input_ranks = {"scale": 1, "bias": 1, "mean": 1, "var": 1}
    positive = ("var",)
    attrs = {"epsilon": 1e-5}
    gen_attrs = ()
    kind = "norm"
    example = ({}, ((3,), (3,), (3,), (3,)))

    def shape(self, a, scale, bias, mean, var):
        check(len(scale) == 1 and scale == bias == mean == var,
              "batch-norm parameters must be vectors of one shape")
        return scale

    def ref(self, a, scale, bias, mean, var):
        k = _bn_factor(scale, var, a["epsilon"])
        return (bias.astype(np.float64) - mean.astype(np.float64) * k).astype(np.float32)

    def fp(self, a, scale, bias, mean, var):
        return mod(bias - mean * _bn_factor_fp(scale, var, a["epsilon"]))

    def onnx(self, a, em, ins, outs, shapes):
        k = _emit_factor(em, ins[0], ins[3], a["epsilon"])
        mk = em.tmp("bn_shift")
        em.node("Mul", [ins[2], k], [mk])
        em.node("Sub", [ins[1], mk], outs)


def _emit_factor(em, scale: str, var: str, eps: float) -> str:
    v, s, k = em.tmp("bn_var"), em.tmp("bn_std"), em.tmp("bn_factor")
    em.node("Add", [var, em.const(np.array(eps, np.float32), "eps")], [v])
    em.node("Sqrt", [v], [s])
    em.node("Div", [scale, s], [k])
    return k


@register
class MergeGconv(Op):
    """A grouped-conv kernel (O, C/groups, KH, KW) rewritten for groups/count
    groups: each new group's kernel is block diagonal over the `count` old
    groups it merges, zero elsewhere (TASO's MERGE_GCONV)."""

    name = "merge_gconv"
    inputs = ("w",)
    input_ranks = {"w": 4}
    attrs = {"groups": None, "count": None}
    gen_attrs = ()
    kind = "conv"
    example = ({"groups": 4, "count": 2}, ((8, 1, 3, 3),))

    def shape(self, a, w):
        g, c = a["groups"], a["count"]
        check(len(w) == 4, "merge_gconv takes a 4-D kernel")
        check(c >= 1 and g >= 1 and g % c == 0 and w[0] % g == 0,
              f"count {c} must divide groups {g}, which must divide {w[0]} output channels")
        return (w[0], w[1] * c, w[2], w[3])

    def ref(self, a, w):
        g, c = a["groups"], a["count"]
        o, cg = w.shape[0], w.shape[1]
        out = np.zeros((o, cg * c, *w.shape[2:]), w.dtype)
        per_group = o // g
        for oc in range(o):
            slot = (oc // per_group) % c
            out[oc, slot * cg:(slot + 1) * cg] = w[oc]
        return out

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        # Each kernel repeated `count` times along its channels, the copies off
        # its own group's slot masked to zero.
        o, cg = shapes[0][0], shapes[0][1]
        mask = np.zeros((o, cg * a["count"], 1, 1), np.float32)
        for oc in range(o):
            slot = (oc // (o // a["groups"])) % a["count"]
            mask[oc, slot * cg:(slot + 1) * cg] = 1
        tiled = em.tmp("merge_gconv")
        em.node("Tile", [ins[0], em.const(np.array([1, a["count"], 1, 1], np.int64), "repeats")],
                [tiled])
        em.node("Mul", [tiled, em.const(mask, "mask")], outs)
