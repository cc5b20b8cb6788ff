"""Convolution (TASO: linearity, scalars, kernel/batch/channel concat, enlarge, the
identity and averaging kernels)."""

from __future__ import annotations

from ..dsl import (
    NCHW,
    SAME,
    SCALARS,
    app,
    avgpool,
    concat,
    conv,
    dim,
    eq,
    ewadd,
    family,
    ok,
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
