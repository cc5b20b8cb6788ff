"""Pooling."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    avgpool,
    concat,
    ewadd,
    family,
    ge,
    maxpool,
    ok,
    s,
    smul,
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
