"""Convolution and pooling (NCHW, OIHW kernels, pads in ONNX order top, left,
bottom, right), kernel enlargement and the conv-shaped constants."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .base import ConstantOp, Op, ShapeError, check, inv, mod, onnx_importer, poly, register
from .elementwise import ACT_ONNX, activate, emit_with_activation, normalize_activation


def same_pads(in_hw, kernel, strides, dilations) -> tuple[int, int, int, int]:
    """TensorFlow/TASO "SAME" padding: output size ceil(in / stride), the extra
    row or column (if any) at the bottom/right."""
    check(min(strides) >= 1, f"strides {strides} must be positive")
    begin, end = [], []
    for n, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return (begin[0], begin[1], end[0], end[1])


def resolve_pads(pads, in_hw, kernel, strides, dilations) -> tuple[int, int, int, int]:
    if isinstance(pads, str):
        p = pads.lower()
        if p == "same":
            return same_pads(in_hw, kernel, strides, dilations)
        if p == "valid":
            return (0, 0, 0, 0)
        raise ShapeError(f"unknown padding {pads!r}")
    pads = tuple(int(p) for p in pads)
    if len(pads) == 2:
        pads = pads + pads
    check(len(pads) == 4 and min(pads) >= 0, f"pads must be 4 non-negative ints, got {pads}")
    return pads


def out_hw(in_hw, kernel, strides, pads, dilations) -> tuple[int, int]:
    check(len(kernel) == len(strides) == len(dilations) == 2,
          f"kernel, strides and dilations must be pairs, got {kernel}, {strides}, {dilations}")
    check(min(kernel) >= 1 and min(strides) >= 1 and min(dilations) >= 1,
          f"kernel {kernel}, strides {strides} and dilations {dilations} must be positive")
    out = []
    for i, (n, k, s, d) in enumerate(zip(in_hw, kernel, strides, dilations)):
        span = (k - 1) * d + 1
        size = n + pads[i] + pads[i + 2] - span
        check(size >= 0, f"window {span} larger than padded input {n + pads[i] + pads[i + 2]}")
        out.append(size // s + 1)
    return tuple(out)


def windows(x, kernel, strides, pads, dilations, pad_value=0):
    """All sliding windows of an NCHW array: shape (N, C, OH, OW, KH, KW)."""
    pt, pl, pb, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    v = sliding_window_view(xp, span, axis=(2, 3))
    return v[:, :, ::sh, ::sw, ::dh, ::dw]


def conv_core(x, w, strides, pads, dilations, groups):
    """Grouped 2-D convolution by windows and a contraction; exact for int64."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    win = windows(x, (kh, kw), strides, pads, dilations)
    oh, ow = win.shape[2], win.shape[3]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, o, oh, ow)


@register
class Conv2d(Op):
    name = "conv2d"
    inputs = ("x", "w")
    input_ranks = {"x": 4, "w": 4}
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1,
             "activation": "none"}
    gen_attrs = tuple({"strides": (1, 1), "pads": "same", "activation": act}
                      for act in ("none", "relu"))

    def resolve(self, a, shapes):
        x, w = shapes
        if isinstance(a["pads"], str) or len(a["pads"]) == 2:
            a = dict(a, pads=resolve_pads(a["pads"], x[2:], w[2:], a["strides"],
                                          a["dilations"]))
        return a

    def shape(self, a, x, w):
        check(len(x) == 4 and len(w) == 4, "conv2d takes a 4-D input and a 4-D kernel")
        a = self.resolve(a, (x, w))
        g = a["groups"]
        check(g >= 1 and x[1] % g == 0 and w[0] % g == 0,
              f"groups={g} must divide input channels {x[1]} and output channels {w[0]}")
        check(x[1] == w[1] * g, f"input channels {x[1]} != kernel channels {w[1]} x groups {g}")
        check(min(a["strides"]) >= 1 and min(a["dilations"]) >= 1, "bad strides or dilations")
        check(a["activation"] in ACT_ONNX or a["activation"] == "none", "bad activation")
        return (x[0], w[0], *out_hw(x[2:], w[2:], a["strides"], a["pads"], a["dilations"]))

    def _conv(self, a, x, w, fp):
        a = self.resolve(a, (x.shape, w.shape))
        y = conv_core(x, w, a["strides"], a["pads"], a["dilations"], a["groups"])
        return activate(a["activation"], mod(y) if fp else y.astype(np.float32), fp)

    def ref(self, a, x, w):
        return self._conv(a, x, w, fp=False)

    def fp(self, a, x, w):
        return self._conv(a, x, w, fp=True)

    def onnx(self, a, em, ins, outs, shapes):
        a = self.resolve(a, shapes)
        emit_with_activation(em, a["activation"], "Conv", ins, outs,
                             strides=list(a["strides"]), pads=list(a["pads"]),
                             dilations=list(a["dilations"]), group=a["groups"],
                             kernel_shape=list(shapes[1][2:]))

    def build(self, g, input, weight, strides=(1, 1), padding=(0, 0, 0, 0),
              dilations=(1, 1), groups=1, activation=None):
        a = self.resolve({"pads": padding, "strides": tuple(strides),
                          "dilations": tuple(dilations)}, (input.shape, weight.shape))
        return g.add_node(self.name, [input, weight], strides=strides, pads=a["pads"],
                          dilations=dilations, groups=groups,
                          activation=normalize_activation(activation))[0]


@register
class Enlarge(Op):
    """Zero-pad a conv kernel, centred, to a larger kernel size (TASO's ENLARGE)."""

    name = "enlarge"
    inputs = ("w",)
    input_ranks = {"w": 4}
    attrs = {"kernel": None}
    gen_attrs = ({"kernel": (3, 3)},)

    def _pads(self, a, w):
        (kh, kw), (h, wd) = a["kernel"], w[2:]
        check(kh >= h and kw >= wd and (kh - h) % 2 == 0 and (kw - wd) % 2 == 0,
              f"cannot enlarge a {h}x{wd} kernel to {kh}x{kw}")
        return ((kh - h) // 2, (kw - wd) // 2)

    def shape(self, a, w):
        check(len(w) == 4, "enlarge takes a 4-D kernel")
        self._pads(a, w)
        return (w[0], w[1], *a["kernel"])

    def ref(self, a, w):
        ph, pw = self._pads(a, w.shape)
        return np.pad(w, ((0, 0), (0, 0), (ph, ph), (pw, pw)))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        ph, pw = self._pads(a, shapes[0])
        em.node("Pad", [ins[0], em.const(np.array([0, 0, ph, pw, 0, 0, ph, pw], np.int64),
                                         "pads")], outs)


@register
class ConstIconv(ConstantOp):
    """Identity conv kernel (C, C, KH, KW): conv with it (same pads) returns its input."""

    name = "const_iconv"

    def shape(self, a):
        s = a["shape"]
        check(len(s) == 4 and s[0] == s[1] and s[2] % 2 == 1 and s[3] % 2 == 1,
              "const_iconv shape must be (C, C, odd, odd)")
        return s

    def value(self, a):
        c, _, kh, kw = a["shape"]
        w = np.zeros(a["shape"], np.int64)
        w[np.arange(c), np.arange(c), kh // 2, kw // 2] = 1
        return w


@register
class ConstPool(ConstantOp):
    """Averaging kernel (C, 1, KH, KW) of 1/(KH*KW): a depthwise conv with it is an
    average pool that counts padding."""

    name = "const_pool"

    def shape(self, a):
        check(len(a["shape"]) == 4 and a["shape"][1] == 1, "const_pool shape must be (C,1,KH,KW)")
        return a["shape"]

    def value(self, a):
        return np.full(a["shape"], 1.0 / (a["shape"][2] * a["shape"][3]))

    def fp(self, a):
        return np.full(a["shape"], inv(a["shape"][2] * a["shape"][3]), np.int64)


# Max pooling has no polynomial form; its fingerprint sums a fixed cubic over the
# window, which keeps what max pooling commutes with (channel concat and split,
# batch concat) and nothing more.
_MAXPOOL_POLY = poly([1, 0, 2, 5])


class _Pool(Op):
    inputs = ("x",)
    input_ranks = {"x": 4}
    attrs = {"kernel": None, "strides": (1, 1), "pads": (0, 0, 0, 0)}
    gen_attrs = ({"kernel": (3, 3), "strides": (1, 1), "pads": "same"},)

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
    attrs = {**_Pool.attrs, "count_include_pad": 1}

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
def onnx_pads(ctx, in_hw, kernel, strides, dilations) -> tuple[int, int, int, int]:
    """The explicit pads of an ONNX Conv or pooling node; auto_pad SAME_UPPER,
    SAME_LOWER and VALID are resolved exactly against the static input shape."""
    mode = ctx.attr("auto_pad", "NOTSET")
    if mode == "NOTSET":
        pads = tuple(ctx.attr("pads", (0, 0, 0, 0)))
        check(len(pads) == 4, f"2-D pads must have 4 entries, got {pads}")
        return resolve_pads(pads, in_hw, kernel, strides, dilations)
    if mode == "VALID":
        return (0, 0, 0, 0)
    check(mode in ("SAME_UPPER", "SAME_LOWER"), f"unknown auto_pad {mode!r}")
    t, l, b, r = same_pads(in_hw, kernel, strides, dilations)  # extra at the end
    return (t, l, b, r) if mode == "SAME_UPPER" else (b, r, t, l)


def _onnx_window(ctx, x, kernel):
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    check(len(kernel) == 2 and len(strides) == 2 and len(dilations) == 2, "not 2-D")
    return strides, dilations, onnx_pads(ctx, x.shape[2:], kernel, strides, dilations)


@onnx_importer("Conv")
def _import_conv(ctx):
    x, w = ctx.inputs[:2]
    if len(x.shape) != 4 or len(w.shape) != 4:
        return None
    kernel = tuple(ctx.attr("kernel_shape", w.shape[2:]))
    check(kernel == w.shape[2:], f"kernel_shape {kernel} != weight shape {w.shape}")
    strides, dilations, pads = _onnx_window(ctx, x, kernel)
    y = ctx.g.conv2d(x, w, strides=strides, padding=pads, dilations=dilations,
                     groups=ctx.attr("group", 1))
    b = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if b is not None:  # the bias, broadcast over batch and space
        y = ctx.g.add(y, ctx.g.reshape(b, (1, w.shape[0], 1, 1)))
    return [y]


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
