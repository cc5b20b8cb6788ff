"""Convolution (TASO: linearity, scalars, kernel/batch/channel concat, enlarge, the
identity and averaging kernels)."""

from __future__ import annotations

from ..dsl import (
    NCHW,
    SAME,
    SCALARS,
    Var,
    app,
    avgpool,
    concat,
    conv,
    dim,
    eq,
    ewadd,
    family,
    ok,
    relu,
    s,
    smul,
    u,
    w,
    x,
    y,
)

axiom = family("conv", ranks=NCHW)
_l = conv(x, ewadd(w, u))
axiom("conv-kernel-ewadd", "conv(x, w + u) = conv(x, w) + conv(x, u)", _l,
      ewadd(conv(x, w), conv(x, u)), ok(_l))
_l = conv(ewadd(x, y), w)
axiom("conv-input-ewadd", "conv(x + y, w) = conv(x, w) + conv(y, w)", _l,
      ewadd(conv(x, w), conv(y, w)), ok(_l))
axiom("conv-input-smul", "conv(x·s, w) = conv(x, w)·s", conv(smul(x, s), w),
      smul(conv(x, w), s), ranks=SCALARS)
axiom("conv-kernel-smul", "conv(x, w·s) = conv(x, w)·s", conv(x, smul(w, s)),
      smul(conv(x, w), s), ranks=SCALARS)
_l = conv(x, concat(0, w, u), act="?act", g=1)
axiom("conv-kernel-concat", "conv(x, concat_0(w, u)) = concat_1(conv(x, w), conv(x, u))", _l,
      concat(1, conv(x, w, act="?act", g=1), conv(x, u, act="?act", g=1)), ok(_l))
_l = conv(concat(0, x, y), w, act="?act")
axiom("conv-batch-concat", "conv(concat_0(x, y), w) = concat_0(conv(x, w), conv(y, w))", _l,
      concat(0, conv(x, w, act="?act"), conv(y, w, act="?act")), ok(_l))
_l = conv(concat(1, x, y), concat(1, w, u), g=1)
axiom("conv-channel-concat", "conv(concat_1(x, y), concat_1(w, u)) = conv(x, w) + conv(y, u)",
      _l, ewadd(conv(x, w, g=1), conv(y, u, g=1)), ok(_l), eq(dim(x, 1), dim(w, 1)))
_l = conv(x, app("enlarge", w, kernel="?k"), act="?act", **SAME)
axiom("conv-enlarge", "conv(x, enlarge(w)) = conv(x, w)  (same pads, stride 1)", _l,
      conv(x, w, act="?act", **SAME), ok(_l))
_l = conv(x, app("const_iconv", shape="?ic"), g=1, **SAME)
axiom("conv-iconv", "conv(x, identity kernel) = x  (same pads, stride 1)", _l, x, ok(_l))
_l = conv(x, app("const_pool", shape=("?c", 1, "?kh", "?kw")), d=(1, 1))
_r = avgpool(x, kernel=("?kh", "?kw"), count_include_pad=1)
axiom("conv-pool", "depthwise conv with the averaging kernel = average pooling", _l, _r,
      ok(_l), ok(_r), eq("?g", "?c"))

_l = conv(concat(1, x, x), w, act="?act", g=2)
axiom("conv-duplicate-groups", "conv(concat_1(x, x), w; groups=2) = conv(x, w)", _l,
      conv(x, w, act="?act", g=1), ok(_l))
_l = conv(concat(1, x, y), concat(0, w, u), act="?act", g=2)
axiom("conv-grouped-concat", "conv(concat_1(x, y), concat_0(w, u); groups=2) = "
      "concat_1(conv(x, w), conv(y, u))  (equal halves: x, y channels and w, u kernels)", _l,
      concat(1, conv(x, w, act="?act", g=1), conv(y, u, act="?act", g=1)), ok(_l),
      eq(dim(w, 0), dim(u, 0)), eq(dim(x, 1), dim(y, 1)))
_l = conv(concat(1, x, y), concat(0, w, u), act="?act", g=4)
axiom("conv-grouped4-concat", "conv(concat_1(x, y), concat_0(w, u); groups=4) = "
      "concat_1(conv(x, w; groups=2), conv(y, u; groups=2))  (equal halves: x, y channels and "
      "w, u kernels)", _l,
      concat(1, conv(x, w, act="?act", g=2), conv(y, u, act="?act", g=2)), ok(_l),
      eq(dim(w, 0), dim(u, 0)), eq(dim(x, 1), dim(y, 1)), sizes=(2, 4, 6), triggers=((_l,),))
_z, _v = Var("z"), Var("v")
_l = conv(concat(1, x, concat(1, y, _z)), concat(0, w, concat(0, u, _v)), act="?act", g=3)
axiom("conv-grouped3-concat", "conv(concat_1(x, y, z), concat_0(w, u, v); groups=3) = "
      "concat_1(conv(x, w), conv(y, u), conv(z, v))  (equal thirds: x, y, z channels and w, u, v "
      "kernels; concatenations nested to the right)", _l,
      concat(1, conv(x, w, act="?act", g=1),
             concat(1, conv(y, u, act="?act", g=1), conv(_z, _v, act="?act", g=1))), ok(_l),
      eq(dim(w, 0), dim(u, 0)), eq(dim(u, 0), dim(_v, 0)), eq(dim(x, 1), dim(y, 1)),
      eq(dim(y, 1), dim(_z, 1)), ranks={"z": 4, "v": 4}, triggers=((_l,),))
# Two groups over a kernel concatenated along its input channels: each group
# reads its half of the input against both parts of the kernel.
_xa, _xb, _ya, _yb = (Var(n) for n in ("xa", "xb", "ya", "yb"))
_l = conv(concat(1, concat(1, _xa, _xb), concat(1, _ya, _yb)), concat(1, w, u), g=2)
axiom("conv-grouped-channel-concat", "conv(concat_1(concat_1(xa, xb), concat_1(ya, yb)), "
      "concat_1(w, u); groups=2) = conv(concat_1(xa, ya), w; groups=2) + conv(concat_1(xb, yb), "
      "u; groups=2)  (xa, ya as many channels as w reads, xb as many as u)", _l,
      ewadd(conv(concat(1, _xa, _ya), w, g=2), conv(concat(1, _xb, _yb), u, g=2)), ok(_l),
      eq(dim(_xa, 1), dim(w, 1)), eq(dim(_ya, 1), dim(w, 1)), eq(dim(_xb, 1), dim(u, 1)),
      triggers=((_l,),), ranks={"xa": 4, "xb": 4, "ya": 4, "yb": 4})
_l = ewadd(conv(x, w), conv(y, w))
axiom("ewadd-conv-input", "conv(x, w) + conv(y, w) = conv(x + y, w)  (x, y of one shape)", _l,
      conv(ewadd(x, y), w), ok(_l), *(eq(dim(x, i), dim(y, i)) for i in range(4)),
      triggers=((_l,),))
_l = conv(x, relu(w), act="?act")
axiom("conv-relu-kernel-defined", "conv(x, relu(w)) is defined where conv(x, w) is  (relu keeps "
      "the shape)", _l, None, ok(conv(x, w, act="?act")), rel="ok", triggers=((_l,),))
_l = conv(x, app("const_iconv", shape=("?c", "?c", "?kh", "?kw")), act="?act", **SAME)
axiom("conv-iconv-size", "conv(x, identity kernel (c, c, kh, kw)) = conv(x, identity kernel "
      "(c, c, 1, 1))  (same pads, stride 1, any groups: only the centre tap reads the input)", _l,
      conv(x, app("const_iconv", shape=("?c", "?c", 1, 1)), act="?act", **SAME), ok(_l))
