"""Convolution (NCHW, OIHW kernels, pads in ONNX order top, left, bottom,
right), kernel enlargement and the conv-shaped constants; the window helpers
pooling shares, for numpy and for the GPU's array module."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .activation import activate, activate_xp, emit_with_activation, normalize_activation
from .base import (
    ACTIVATIONS,
    ConstantOp,
    Op,
    ShapeError,
    check,
    inv,
    mod,
    onnx_importer,
    register,
    size,
)


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


# ---- the GPU lowering: the same windows on any array module --------------------------------
def windows_xp(xp, x, kernel, strides, pads, dilations, fill=0.0):
    """A strided view of every window of an NCHW array: (N, C, OH, OW, KH, KW)."""
    pt, pl, pb, pr = pads
    xpad = xp.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    n, c, h, w = xpad.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    oh, ow = out_hw(x.shape[2:], kernel, strides, pads, dilations)
    s = xpad.strides
    return xp.lib.stride_tricks.as_strided(
        xpad, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw))


def conv2d_gemm(xp, x, w, strides, pads, dilations, groups):
    """Grouped convolution as im2col (one copy of every window) and one batched
    GEMM over the groups."""
    n, _, _, _ = x.shape
    o, cg, kh, kw = w.shape
    win = windows_xp(xp, x, (kh, kw), strides, pads, dilations)
    oh, ow = win.shape[2], win.shape[3]
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(groups, n * oh * ow, cg * kh * kw)
    kern = w.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    y = xp.matmul(cols, kern)  # (groups, n*oh*ow, o/groups)
    y = y.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3)
    return xp.ascontiguousarray(y.reshape(n, o, oh, ow))


def conv2d_cudnn(xp, cudnn, x, w, strides, pads, dilations, groups):
    """Convolution by cuDNN; asymmetric pads are applied to the input first."""
    pt, pl, pb, pr = pads
    if (pt, pl) != (pb, pr):
        x = xp.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        pt = pl = 0
    oh, ow = out_hw(x.shape[2:], w.shape[2:], strides, (pt, pl, pt, pl), dilations)
    y = xp.empty((x.shape[0], w.shape[0], oh, ow), dtype=x.dtype)
    cudnn.convolution_forward(x, w, None, y, (pt, pl), tuple(strides), tuple(dilations),
                              groups, auto_tune=True, tensor_core="auto")
    return y


@register
class Conv2d(Op):
    name = "conv2d"
    inputs = ("x", "w")
    input_ranks = {"x": 4, "w": 4}
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1,
             "activation": "none"}
    gen_attrs = tuple({"strides": (1, 1), "pads": "same", "activation": act}
                      for act in ("none", "relu"))
    kind = "conv"
    contraction = True
    blocked_layout = True
    gen_default = 2
    gen_min_spatial = 3  # the largest window enumerated
    taso_type = 3
    example = ({"pads": (1, 1, 1, 1), "groups": 2, "activation": "relu"},
               ((1, 4, 5, 5), (6, 2, 3, 3)))

    def resolve(self, a, shapes):
        x, w = shapes[:2]
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
        check(a["activation"] in ACTIVATIONS, "bad activation")
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
        return self._add(g, [input, weight], strides, padding, dilations, groups, activation)

    def _add(self, g, ins, strides, padding, dilations, groups, activation):
        """The node on `ins` (input, kernel, ...) with pads resolved ("same")."""
        a = self.resolve({"pads": padding, "strides": tuple(strides),
                          "dilations": tuple(dilations)}, (ins[0].shape, ins[1].shape))
        return g.add_node(self.name, ins, strides=strides, pads=a["pads"],
                          dilations=dilations, groups=groups,
                          activation=normalize_activation(activation))[0]

    def lower(self, xp, a, xs, cudnn=None):
        x, w = xs[:2]
        a = self.resolve(a, (x.shape, w.shape))
        args = (x, w, a["strides"], a["pads"], a["dilations"], a["groups"])
        y = conv2d_cudnn(xp, cudnn, *args) if cudnn is not None else conv2d_gemm(xp, *args)
        return [activate_xp(xp, a["activation"], y)]

    def flops(self, a, shapes, outs):
        # Multiply-adds x 2 (each output reduces over a kernel's C/groups x KH x KW),
        # and one operation per output for a fused activation.
        w, out = shapes[1], size(outs[0])
        return 2 * out * w[1] * w[2] * w[3] + (out if a["activation"] != "none" else 0)

    def gen_concrete(self, a, shapes):
        x, w = shapes
        if len(x) != 4 or len(w) != 4 or w[1] == 0 or x[1] % w[1]:
            return None
        return dict(a, groups=x[1] // w[1])  # TASO infers groups from the channels

    def gen_pattern_attrs(self, a, shapes, refs):
        if a.get("groups", 1) != 1 and shapes[1][1] == 1:
            return dict(a, groups={"dim": (refs[0], 1)})  # depthwise: a group per channel
        return a

    def from_taso(self, p):
        return {"strides": (p.get("stride_h", 1), p.get("stride_w", 1)),
                "pads": TASO_PAD[p.get("pad", 0)],
                "activation": TASO_ACTIVATION[p.get("acti", 0)]}, 4

    def dim_source(self, a, axis):
        # batch from the input, channels from the kernel's axis 0
        return {0: (0, 0), 1: (1, 0)}.get(axis)


# TASO's PaddingMode and ActiMode enumerations (graph_subst.pb parameters).
TASO_PAD = {0: "same", 1: "valid"}
TASO_ACTIVATION = {0: "none", 1: "sigmoid", 2: "relu", 3: "tanh"}


@register
class Enlarge(Op):
    """Zero-pad a conv kernel, centred, to a larger kernel size (TASO's ENLARGE)."""

    name = "enlarge"
    inputs = ("w",)
    input_ranks = {"w": 4}
    attrs = {"kernel": None}
    gen_attrs = ({"kernel": (3, 3)},)
    kind = "conv"
    gen_default = 11
    taso_type = 20
    example = ({"kernel": (5, 3)}, ((4, 2, 1, 3),))

    def gen_concrete(self, a, shapes):
        # the identity at the enlarged size: a rule using it would hold there only
        return None if tuple(shapes[0][2:]) == tuple(a["kernel"]) else a

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
    gen_default = 14
    taso_type = 23
    example = ({"shape": (2, 2, 3, 3)}, ())

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
    gen_default = 13
    taso_type = 25
    example = ({"shape": (3, 1, 3, 2)}, ())

    def gen_const_shapes(self, shapes):
        """Averaging kernels (C, 1, KH, KW) for the family's 4-D tensors (a 1x1 one
        is all ones: nothing to average)."""
        return sorted({(s[1], 1, s[2], s[3]) for s in shapes if len(s) == 4 and s[2] * s[3] > 1})

    def shape(self, a):
        check(len(a["shape"]) == 4 and a["shape"][1] == 1, "const_pool shape must be (C,1,KH,KW)")
        return a["shape"]

    def value(self, a):
        return np.full(a["shape"], 1.0 / (a["shape"][2] * a["shape"][3]))

    def fp(self, a):
        return np.full(a["shape"], inv(a["shape"][2] * a["shape"][3]), np.int64)


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
