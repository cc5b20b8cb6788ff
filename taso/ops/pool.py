"""Pooling over 2-D windows (NCHW, pads in ONNX order top, left, bottom, right)."""

from __future__ import annotations

import numpy as np

from .base import Op, check, inv, mod, onnx_importer, poly, register
from .conv import _onnx_window, out_hw, resolve_pads, windows, windows_xp

# Max pooling has no polynomial form; its fingerprint sums a fixed cubic over the
# window, which keeps what max pooling commutes with (channel concat and split,
# batch concat) and nothing more.
_MAXPOOL_POLY = poly([1, 0, 2, 5])


class _Pool(Op):
    inputs = ("x",)
    input_ranks = {"x": 4}
    attrs = {"kernel": None, "strides": (1, 1), "pads": (0, 0, 0, 0)}
    gen_attrs = ({"kernel": (3, 3), "strides": (1, 1), "pads": "same"},)
    kind = "pool"
    gen_min_spatial = 3  # the largest window enumerated
    example = ({"kernel": (3, 2), "strides": (2, 1), "pads": (1, 0, 1, 1)}, ((1, 2, 6, 5),))

    def resolve(self, a, shapes):
        if isinstance(a["pads"], str) or len(a["pads"]) == 2:
            a = dict(a, pads=resolve_pads(a["pads"], shapes[0][2:], a["kernel"], a["strides"],
                                          (1, 1)))
        return a

    def shape(self, a, x):
        check(len(x) == 4, "pooling takes a 4-D input")
        a = self.resolve(a, (x,))
        check(max(a["pads"][0], a["pads"][2]) < a["kernel"][0]
              and max(a["pads"][1], a["pads"][3]) < a["kernel"][1], "pad must be < kernel")
        return (x[0], x[1], *out_hw(x[2:], a["kernel"], a["strides"], a["pads"], (1, 1)))

    def _onnx_attrs(self, a, shapes):
        a = self.resolve(a, shapes)
        return dict(kernel_shape=list(a["kernel"]), strides=list(a["strides"]),
                    pads=list(a["pads"]))

    def build(self, g, input, kernel, strides=(1, 1), padding=(0, 0, 0, 0), **kw):
        a = self.resolve({"pads": padding, "kernel": tuple(kernel), "strides": tuple(strides)},
                         (input.shape,))
        return g.add_node(self.name, [input], kernel=kernel, strides=strides, pads=a["pads"],
                          **kw)[0]


@register
class MaxPool2d(_Pool):
    name = "maxpool2d"
    gen_default = 7
    taso_type = 6

    def lower(self, xp, a, xs, cudnn=None):
        a = self.resolve(a, (xs[0].shape,))
        win = windows_xp(xp, xs[0], a["kernel"], a["strides"], a["pads"], (1, 1), fill=-np.inf)
        return [win.max(axis=(4, 5))]

    def ref(self, a, x):
        a = self.resolve(a, (x.shape,))
        return windows(x, a["kernel"], a["strides"], a["pads"], (1, 1), -np.inf).max((4, 5))

    def fp(self, a, x):
        a = self.resolve(a, (x.shape,))
        mask = windows(np.ones_like(x), a["kernel"], a["strides"], a["pads"], (1, 1))
        win = windows(x, a["kernel"], a["strides"], a["pads"], (1, 1))
        return mod((_MAXPOOL_POLY(win) * mask).sum((4, 5)))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("MaxPool", ins, outs, **self._onnx_attrs(a, shapes))


@register
class AvgPool2d(_Pool):
    name = "avgpool2d"
    gen_default = 6
    attrs = {**_Pool.attrs, "count_include_pad": 1}
    taso_type = 7
    example = ({"kernel": (2, 3), "strides": (2, 1), "pads": (1, 0, 0, 1),
                "count_include_pad": 0}, ((1, 3, 6, 5),))

    def lower(self, xp, a, xs, cudnn=None):
        x = xs[0]
        a = self.resolve(a, (x.shape,))
        total = windows_xp(xp, x, a["kernel"], a["strides"], a["pads"], (1, 1)).sum(axis=(4, 5))
        if a["count_include_pad"]:
            return [total / (a["kernel"][0] * a["kernel"][1])]
        ones = xp.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
        return [total / windows_xp(xp, ones, a["kernel"], a["strides"], a["pads"],
                                   (1, 1)).sum(axis=(4, 5))]

    def _counts(self, a, shape):
        if a["count_include_pad"]:
            return np.full((1,), a["kernel"][0] * a["kernel"][1])
        ones = np.ones((1, 1, *shape[2:]), np.int64)
        return windows(ones, a["kernel"], a["strides"], a["pads"], (1, 1)).sum((4, 5))

    def ref(self, a, x):
        a = self.resolve(a, (x.shape,))
        s = windows(x, a["kernel"], a["strides"], a["pads"], (1, 1)).sum((4, 5))
        return (s / self._counts(a, x.shape)).astype(np.float32)

    def fp(self, a, x):
        a = self.resolve(a, (x.shape,))
        s = mod(windows(x, a["kernel"], a["strides"], a["pads"], (1, 1)).sum((4, 5)))
        counts = self._counts(a, x.shape)
        inverses = np.vectorize(inv, otypes=[np.int64])(counts)
        return mod(s * inverses)

    def onnx(self, a, em, ins, outs, shapes):
        em.node("AveragePool", ins, outs, count_include_pad=int(a["count_include_pad"]),
                **self._onnx_attrs(a, shapes))


# ---- ONNX import ------------------------------------------------------------------
def _import_pool(ctx, op: str, **attrs):
    x = ctx.inputs[0]
    if (len(x.shape) != 4 or ctx.attr("ceil_mode", 0)
            or len([o for o in ctx.node.output if o]) > 1):  # MaxPool's indices
        return None
    kernel = tuple(ctx.attr("kernel_shape"))
    strides, dilations, pads = _onnx_window(ctx, x, kernel)
    if dilations != (1, 1):
        return None
    return [ctx.g.add_node(op, [x], kernel=kernel, strides=strides, pads=pads, **attrs)[0]]


@onnx_importer("MaxPool")
def _import_maxpool(ctx):
    return _import_pool(ctx, "maxpool2d")


@onnx_importer("AveragePool")
def _import_avgpool(ctx):
    return _import_pool(ctx, "avgpool2d", count_include_pad=ctx.attr("count_include_pad", 0))
