"""Concat and split."""

from __future__ import annotations

from ..dsl import (
    SCALARS,
    STACK_ARITIES,
    Var,
    concat,
    dim,
    eq,
    ewadd,
    ewmul,
    family,
    ge,
    ne,
    ok,
    s,
    smul,
    split,
    u,
    x,
    y,
    z,
)

axiom = family("concat")
axiom("concat-assoc", "concat_a(concat_a(x, y), z) = concat_a(x, concat_a(y, z))",
      concat("?a", concat("?a", x, y), z), concat("?a", x, concat("?a", y, z)))
axiom("concat3", "concat_a(x, y, z) = concat_a(concat_a(x, y), z)",
      concat("?a", x, y, z), concat("?a", concat("?a", x, y), z),
      triggers=((concat("?a", x, y, z),),))
axiom("concat4", "concat_a(x, y, z, u) = concat_a(concat_a(x, y, z), u)",
      concat("?a", x, y, z, u), concat("?a", concat("?a", x, y, z), u),
      triggers=((concat("?a", x, y, z, u),),))
axiom("concat-ewadd", "concat_a(x + y, z + u) = concat_a(x, z) + concat_a(y, u)",
      concat("?a", ewadd(x, y), ewadd(z, u)), ewadd(concat("?a", x, z), concat("?a", y, u)),
      ok(concat("?a", ewadd(x, y), ewadd(z, u))))
axiom("concat-ewmul", "concat_a(x * y, z * u) = concat_a(x, z) * concat_a(y, u)",
      concat("?a", ewmul(x, y), ewmul(z, u)), ewmul(concat("?a", x, z), concat("?a", y, u)),
      ok(concat("?a", ewmul(x, y), ewmul(z, u))))
for _name, _f in (("ewadd", ewadd), ("ewmul", ewmul)):
    _r = _f(concat("?a", x, z), concat("?a", y, u))
    axiom(f"{_name}-concat", f"{_name}(concat_a(x, z), concat_a(y, u)) = "
          f"concat_a({_name}(x, y), {_name}(z, u))  (x, y equal along a, a counted from 0)",
          _r, concat("?a", _f(x, y), _f(z, u)), ok(_r), ge("?a", 0),
          eq(dim(x, "?a"), dim(y, "?a")))
axiom("concat-smul", "concat_a(x·s, y·s) = concat_a(x, y)·s",
      concat("?a", smul(x, s), smul(y, s)), smul(concat("?a", x, y), s), ranks=SCALARS)
_lhs = concat("?a", concat("?b", x, y), concat("?b", z, u))
_rhs = concat("?b", concat("?a", x, z), concat("?a", y, u))
_axes = (ne("?a", "?b"), ge("?a", 0), ge("?b", 0))
axiom("concat-interchange", "concat_a(concat_b(x, y), concat_b(z, u)) = "
      "concat_b(concat_a(x, z), concat_a(y, u))  (a ≠ b, x and z equal along b)",
      _lhs, _rhs, ok(_lhs), eq(dim(x, "?b"), dim(z, "?b")), *_axes, triggers=((_lhs,),))
axiom("concat-interchange-rev", "concat_b(concat_a(x, z), concat_a(y, u)) = "
      "concat_a(concat_b(x, y), concat_b(z, u))  (a ≠ b, x and y equal along a)",
      _rhs, _lhs, ok(_rhs), eq(dim(x, "?a"), dim(y, "?a")), *_axes, triggers=((_rhs,),))
axiom("concat-empty-left", "concat_a(x, y) = y  when x is empty along a",
      concat("?a", x, y), y, ok(concat("?a", x, y)), ge("?a", 0), eq(dim(x, "?a"), 0),
      sizes=(0, 1, 2))
axiom("concat-empty-right", "concat_a(x, y) = x  when y is empty along a",
      concat("?a", x, y), x, ok(concat("?a", x, y)), ge("?a", 0), eq(dim(y, "?a"), 0),
      sizes=(0, 1, 2))
_parts = (dim(x, "?a"), dim(y, "?a"))
for _k, _v in enumerate((x, y)):
    _l = split(concat("?a", x, y), "?a", _parts, _k)
    axiom(f"split-concat{_k}", f"split_a(concat_a(x, y), sizes of x, y)[{_k}] = {_v}",
          _l, _v, ok(_l))
_l = concat("?a", split(x, "?a", ("?s1", "?s2"), 0), split(x, "?a", ("?s1", "?s2"), 1))
axiom("concat-split", "concat_a(split_a(x)[0], split_a(x)[1]) = x", _l, x, ok(_l))
for _m in STACK_ARITIES:
    _xs = tuple(Var(f"x{_i}") for _i in range(_m))
    for _k in range(_m):
        _l = split(concat("?a", *_xs), "?a", tuple(dim(_v, "?a") for _v in _xs), _k)
        axiom(f"split-concat{_k}-of-{_m}", f"split_a(concat_a(x0..x{_m - 1}), sizes of the "
              f"parts)[{_k}] = x{_k}", _l, _xs[_k], ok(_l), sizes=(1, 2),
              ranks={_v.name: 2 for _v in _xs})
