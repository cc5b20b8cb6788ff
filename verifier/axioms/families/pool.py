"""Pooling."""

from __future__ import annotations

from ..dsl import (
    NCHW,
    SCALARS,
    avgpool,
    concat,
    conv,
    dim,
    eq,
    ewadd,
    family,
    ge,
    maxpool,
    ok,
    s,
    smul,
    w,
    x,
    y,
)

axiom = family("pool")
for _name, _pool in (("maxpool", maxpool), ("avgpool", avgpool)):
    _l = _pool(concat("?a", x, y))
    axiom(f"{_name}-concat", f"{_name}(concat_a(x, y)) = concat_a({_name}(x), {_name}(y))  "
          "(batch or channel axis)", _l, concat("?a", _pool(x), _pool(y)), ok(_l),
          ge("?a", 0), ge(1, "?a"))
_l = avgpool(ewadd(x, y))
axiom("avgpool-ewadd", "avgpool(x + y) = avgpool(x) + avgpool(y)", _l,
      ewadd(avgpool(x), avgpool(y)), ok(_l))
axiom("avgpool-smul", "avgpool(x·s) = avgpool(x)·s", avgpool(smul(x, s)), smul(avgpool(x), s),
      ranks=SCALARS)
_l = avgpool(conv(x, w, s=(1, 1), p="same"))
axiom("avgpool-conv-1x1", "avgpool(conv(x, w)) = conv(avgpool(x), w)  (w 1x1, stride 1: mixing "
      "channels commutes with averaging each channel)", _l,
      conv(avgpool(x), w, s=(1, 1), p="same"), ok(_l), eq(dim(w, 2), 1), eq(dim(w, 3), 1),
      triggers=((_l,),), ranks=NCHW)
