"""The operator axioms: each one a statement, a readable sentence, and a test.

An axiom says lhs = rhs (or, for sizes, lhs >= rhs) for all tensors and integer
attributes, whenever its guards (`when`) hold. Its meaning is the ⊥ model of
`taso.verifier.terms`: an ill-shaped application is ⊥, so an unguarded equation
claims that both sides are ill-shaped together, and a guard ok(lhs) says "where
the left side is well-shaped". Attribute variables ("?s", "?p", ...) range over
every value; `DOMAINS` lists the values the numeric check samples.

`check_axiom` evaluates an axiom with the numpy reference on shapes found by the
shape solver and random values; tests/test_axioms.py runs it for every axiom
under hypothesis. The semantics is exact real arithmetic; the float32 reference
stands in for it within a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taso.ops import ACTIVATIONS, OPS
from taso.tolerance import scaled_mismatch as mismatch

from .shapes import solve
from .terms import (
    App,
    Arith,
    Cmp,
    Dim,
    IVar,
    Ok,
    Rank,
    Var,
    app,
    apps,
    int_vars,
    tensor_vars,
)
from .terms import (
    TermEvaluator as Evaluator,
)


@dataclass(frozen=True)
class Axiom:
    """lhs `rel` rhs whenever every condition in `when` holds."""

    name: str
    statement: str
    lhs: Any
    rhs: Any
    when: tuple = ()
    rel: str = "=="  # "==", ">=", or "ok" (the conclusion is ok(lhs); rhs unused)
    triggers: tuple | None = None  # groups of terms (multi-patterns); default: the sides
    sizes: tuple[int, ...] = (1, 2, 3)  # axis sizes the numeric check draws from
    family: str = ""
    ranks: dict = field(default_factory=dict, hash=False, compare=False)
    positive: tuple[str, ...] = ()  # variables drawn positive (e.g. a variance under a sqrt)

    def trigger_groups(self) -> tuple:
        """The E-matching triggers: explicit ones, else each side that is an operator
        application (for a size axiom, its left side only)."""
        if self.triggers is not None:
            return self.triggers
        sides = [self.lhs, self.rhs] if isinstance(self.lhs, (Var, App)) else [self.lhs]
        return tuple((t,) for t in sides if isinstance(t, App)
                     or isinstance(t, (Dim, Rank)) and isinstance(t.t, App))

    def int_vars(self) -> list[str]:
        return int_vars([self.lhs, self.rhs, *self.when])

    def tensor_vars(self) -> list[str]:
        return tensor_vars([self.lhs, self.rhs, *self.when])

    def ops(self) -> set[str]:
        return {a.op for a in apps([self.lhs, self.rhs, *self.when])}

    def __str__(self) -> str:
        return f"{self.name}: {self.statement}"


AXIOMS: list[Axiom] = []
_family = ""


def axiom(name: str, statement: str, lhs: Any, rhs: Any, *when: Any, **kw: Any) -> Axiom:
    if _family in ("conv", "fold"):  # the numeric check draws NCHW tensors and OIHW kernels
        kw["ranks"] = {"x": 4, "y": 4, "w": 4, "u": 4, **kw.get("ranks", {})}
    ax = Axiom(name, statement, iv(lhs), iv(rhs), tuple(when), family=_family, **kw)
    if any(a.name == name for a in AXIOMS):
        raise ValueError(f"axiom {name} is defined twice")
    AXIOMS.append(ax)
    return ax


def by_name() -> dict[str, Axiom]:
    return {a.name: a for a in AXIOMS}


# ---- vocabulary ---------------------------------------------------------------------
x, y, z, w, u = (Var(n) for n in "xyzwu")
s, t = Var("s"), Var("t")  # 0-d scalars
SCALARS = {"s": 0, "t": 0}
ACTS = [a for a in ACTIVATIONS if a != "none"]

# Values each attribute variable takes where the operator accepts it: what the
# refuter draws for a rule's variables (axes non-negative, as rules receive
# them) and the numeric check of the axioms draws, with EDGES.
DOMAINS: dict[str, list[Any]] = {
    "a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "i": [0, 1, 2, 3, 4],
    "s": [(1, 1), (2, 2), (1, 2)], "d": [(1, 1), (2, 1)], "g": [1, 2, 3, 4],
    "p": ["same", "valid", (0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)],
    "act": list(ACTIVATIONS), "cip": [0, 1],
    "perm": [(1, 0), (0, 1), (1, 0, 2), (0, 2, 1), (2, 0, 1), (0, 1, 2, 3), (0, 2, 3, 1),
             (1, 0, 3, 2)],
    "k": [(1, 1), (3, 3), (5, 3), (2, 2), (4, 4)], "kh": [1, 2, 3], "kw": [1, 2, 3],
    "s1": [1, 2], "s2": [1, 2], "c": [1, 2, 3],
    "n": [(1, 1), (2, 2), (3, 3)], "KH": [1, 3, 5], "KW": [1, 3, 5],
    "k1": [(1, 1), (3, 3), (1, 3), (5, 5)], "k2": [(3, 3), (5, 5), (3, 5)],
    "sh": [(), (2,), (3, 3), (2, 2), (1, 3), (2, 2, 3, 3), (2, 1, 1, 3)],
    "e": [1e-5, 1e-3, 0.5], "G": [1, 2, 4, 8, 16], "h": [1, 2, 4, 8], "cnt": [1, 2, 3, 4],
    "K": [1, 3, 5], "d0": [1, 2, 3], "d1": [1, 2, 3], "d2": [1, 3], "d3": [1, 3],
    "ic": [(1, 1, 1, 1), (2, 2, 3, 3), (3, 3, 1, 1), (2, 2, 1, 3)],
    "al": [1.0, 0.5, -2.0], "be": [1.0, 2.0, 0.0], "tb": [0, 1],
}
# the strictness axioms name their attribute variables after the attributes
DOMAINS.update(strides=DOMAINS["s"], pads=DOMAINS["p"], dilations=DOMAINS["d"],
               groups=DOMAINS["g"], activation=DOMAINS["act"], kernel=DOMAINS["k"],
               axis=[0, 1, 2, 3], sizes=[(1, 1), (1, 2), (2, 1), (2, 2), (1, 1, 1)],
               count_include_pad=DOMAINS["cip"], epsilon=DOMAINS["e"], count=DOMAINS["cnt"],
               shape=[(1, 2, 1, 1), (2, 3), (6,), (3, 2), (1, 3, 1, 1)])
# Values an axiom must survive too, though no well-formed rule binds them: an
# axis counted from the end or past the last, counts of zero or below, odd
# sizes. An axiom whose guard lets one through is false.
_AXES = [-5, -2, -1, 4, 5]
EDGES: dict[str, list[Any]] = {
    "a": _AXES, "b": _AXES, "i": [-2, -1, 5], "axis": _AXES, "g": [-2, -1, 0], "groups": [-1, 0],
    "G": [-4, -2, -1, 0], "h": [-2, -1, 0], "cnt": [-2, -1, 0], "count": [-2, -1, 0],
    "s1": [0, -1, 3], "s2": [0, -1, 3], "c": [0], "kh": [0, 4], "kw": [0, 4],
    "KH": [0, 2], "KW": [0, 2], "K": [0, 2], "d0": [0], "d1": [0], "d2": [0, 2], "d3": [0, 2],
    "perm": [(1, 1), (0, 1, 1), (-1, 0), (2, 0)], "sizes": [(0, 2), (-1, 3), (1,)],
    "k": [(0, 1), (2, 3)], "s": [(0, 1), (3, 3)], "d": [(1, 2)],
    "strides": [(3, 3)], "dilations": [(1, 2)], "kernel": [(2, 3)],
    "e": [0.0], "epsilon": [0.0], "al": [0.0], "be": [-1.0],
}


def check_domains() -> dict[str, list[Any]]:
    """What the numeric check of the axioms draws from: DOMAINS and EDGES."""
    return {k: [*v, *EDGES.get(k, [])] for k, v in DOMAINS.items()}


def iv(v: Any) -> Any:
    """An integer term: "?name" is the attribute variable IVar(name)."""
    return IVar(v[1:]) if isinstance(v, str) and v.startswith("?") else v


def ok(e: Any) -> Ok:
    return Ok(e)


def eq(a: Any, b: Any) -> Cmp:
    return Cmp("==", iv(a), iv(b))


def ne(a: Any, b: Any) -> Cmp:
    return Cmp("!=", iv(a), iv(b))


def ge(a: Any, b: Any) -> Cmp:
    return Cmp(">=", iv(a), iv(b))


def dim(e: Any, i: Any) -> Dim:
    return Dim(e, iv(i))


def rank(e: Any) -> Rank:
    return Rank(e)


def ewadd(a, b):
    return app("ewadd", a, b)


def ewmul(a, b):
    return app("ewmul", a, b)


def smul(a, b):
    return app("scalar_mul", a, b)


def act(name, a):
    return app(name, a)


def relu(a):
    return app("relu", a)


def concat(axis, *xs):
    return app("concat", *xs, axis=axis)


def split(a, axis, sizes, k):
    return app("split", a, axis=axis, sizes=sizes, out=k)


def transpose(a, perm=(1, 0)):
    return app("transpose", a, perm=perm)


def matmul(a, b, act="none"):
    return app("matmul", a, b, activation=act)


def conv(a, b, act="none", s="?s", p="?p", d="?d", g="?g"):
    return app("conv2d", a, b, strides=s, pads=p, dilations=d, groups=g, activation=act)


def maxpool(a):
    return app("maxpool2d", a, kernel="?k", strides="?s", pads="?p")


def avgpool(a, **kw):
    kw = {"kernel": "?k", "strides": "?s", "pads": "?p", "count_include_pad": "?cip", **kw}
    return app("avgpool2d", a, **kw)





# ---- elementwise arithmetic (TASO: ewadd/ewmul associativity, commutativity,
# distributivity) --------------------------------------------------------------------
_family = "elementwise"
axiom("ewadd-comm", "x + y = y + x", ewadd(x, y), ewadd(y, x))
axiom("ewadd-assoc", "(x + y) + z = x + (y + z)", ewadd(ewadd(x, y), z), ewadd(x, ewadd(y, z)))
axiom("ewmul-comm", "x * y = y * x", ewmul(x, y), ewmul(y, x))
axiom("ewmul-assoc", "(x * y) * z = x * (y * z)", ewmul(ewmul(x, y), z), ewmul(x, ewmul(y, z)))
axiom("ewmul-distrib", "(x + y) * z = x*z + y*z", ewmul(ewadd(x, y), z),
      ewadd(ewmul(x, z), ewmul(y, z)))

# ---- scalar multiplication (s, t are 0-d) ----------------------------------------------
_family = "scalar"
axiom("smul-ewadd", "(x + y)·s = x·s + y·s", smul(ewadd(x, y), s),
      ewadd(smul(x, s), smul(y, s)), ranks=SCALARS)
axiom("smul-ewmul", "(x * y)·s = (x·s) * y", smul(ewmul(x, y), s), ewmul(smul(x, s), y),
      ranks=SCALARS)
axiom("smul-smul", "(x·s)·t = x·(s * t)", smul(smul(x, s), t), smul(x, ewmul(s, t)),
      ranks=SCALARS)
axiom("smul-scalar-ewadd", "x·(s + t) = x·s + x·t", smul(x, ewadd(s, t)),
      ewadd(smul(x, s), smul(x, t)), ranks=SCALARS)

# ---- activations: idempotence, commuting with concat, transpose and max pooling ------------
_family = "activation"
axiom("relu-idem", "relu(relu(x)) = relu(x)", relu(relu(x)), relu(x))
for _a in ACTS:
    axiom(f"{_a}-concat", f"{_a}(concat_a(x, y)) = concat_a({_a}(x), {_a}(y))",
          act(_a, concat("?a", x, y)), concat("?a", act(_a, x), act(_a, y)))
    axiom(f"{_a}-transpose", f"{_a}(transpose_p(x)) = transpose_p({_a}(x))",
          act(_a, transpose(x, "?perm")), transpose(act(_a, x), "?perm"))
axiom("relu-maxpool", "maxpool(relu(x)) = relu(maxpool(x))  (relu is monotone)",
      maxpool(relu(x)), relu(maxpool(x)))

# ---- fused activations: conv/matmul with an activation is the activation after them ---------
_family = "fusion"
for _a in ACTS:
    axiom(f"conv-{_a}-fusion", f"conv(x, w; act={_a}) = {_a}(conv(x, w))",
          conv(x, w, act=_a), act(_a, conv(x, w)))
    axiom(f"matmul-{_a}-fusion", f"matmul(x, y; act={_a}) = {_a}(matmul(x, y))",
          matmul(x, y, act=_a), act(_a, matmul(x, y)))

# ---- transpose ----------------------------------------------------------------------
_family = "transpose"
axiom("transpose-involution", "transpose(transpose(x)) = x  (2-D, where defined)",
      transpose(transpose(x)), x, ok(transpose(transpose(x))))
axiom("transpose-ewadd", "transpose_p(x + y) = transpose_p(x) + transpose_p(y)",
      transpose(ewadd(x, y), "?perm"), ewadd(transpose(x, "?perm"), transpose(y, "?perm")))
axiom("transpose-ewmul", "transpose_p(x * y) = transpose_p(x) * transpose_p(y)",
      transpose(ewmul(x, y), "?perm"), ewmul(transpose(x, "?perm"), transpose(y, "?perm")))
axiom("transpose-smul", "transpose_p(x·s) = transpose_p(x)·s",
      transpose(smul(x, s), "?perm"), smul(transpose(x, "?perm"), s), ranks=SCALARS)
axiom("transpose-matmul", "transpose(matmul(x, y)) = matmul(transpose(y), transpose(x))",
      transpose(matmul(x, y, "?act")), matmul(transpose(y), transpose(x), "?act"))
axiom("transpose-concat0", "transpose(concat_0(x, y)) = concat_1(transpose(x), transpose(y))",
      transpose(concat(0, x, y)), concat(1, transpose(x), transpose(y)))
axiom("transpose-concat1", "transpose(concat_1(x, y)) = concat_0(transpose(x), transpose(y))",
      transpose(concat(1, x, y)), concat(0, transpose(x), transpose(y)))

# ---- concat and split ---------------------------------------------------------------------
_family = "concat"
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
# Concatenations of more parts (a stack of rows, STACK_ARITIES); the check draws
# matrices with sizes 1 and 2, so that the parts agree often enough to compare.
STACK_ARITIES = range(3, 9)
for _m in STACK_ARITIES:
    _xs = tuple(Var(f"x{_i}") for _i in range(_m))
    for _k in range(_m):
        _l = split(concat("?a", *_xs), "?a", tuple(dim(_v, "?a") for _v in _xs), _k)
        axiom(f"split-concat{_k}-of-{_m}", f"split_a(concat_a(x0..x{_m - 1}), sizes of the "
              f"parts)[{_k}] = x{_k}", _l, _xs[_k], ok(_l), sizes=(1, 2),
              ranks={_v.name: 2 for _v in _xs})

# ---- matrix products (TASO: associativity, distributivity, concat interchange, scalars,
# the identity matrix) -------------------------------------------------------------------------
_family = "matmul"
axiom("matmul-assoc", "(x y) z = x (y z)", matmul(matmul(x, y), z), matmul(x, matmul(y, z)))
axiom("matmul-ewadd-right", "x (y + z) = x y + x z", matmul(x, ewadd(y, z)),
      ewadd(matmul(x, y), matmul(x, z)), ok(matmul(x, ewadd(y, z))))
axiom("matmul-ewadd-left", "(x + y) z = x z + y z", matmul(ewadd(x, y), z),
      ewadd(matmul(x, z), matmul(y, z)), ok(matmul(ewadd(x, y), z)))
axiom("matmul-smul-left", "(x·s) y = (x y)·s", matmul(smul(x, s), y), smul(matmul(x, y), s),
      ranks=SCALARS)
axiom("matmul-smul-right", "x (y·s) = (x y)·s", matmul(x, smul(y, s)), smul(matmul(x, y), s),
      ranks=SCALARS)
_l = matmul(x, concat(1, y, z), "?act")
axiom("matmul-concat-cols", "x [y | z] = [x y | x z]  (2-D)", _l,
      concat(1, matmul(x, y, "?act"), matmul(x, z, "?act")), ok(_l), eq(rank(x), 2),
      eq(rank(y), 2))
for _r in (3, 4):
    _l = matmul(x, concat(1, y, z), "?act")
    axiom(f"matmul-concat-cols-{_r}d", f"x [y | z] = concat_{_r - 1}(x y, x z)  "
          f"(x {_r}-D, y, z matrices)", _l,
          concat(_r - 1, matmul(x, y, "?act"), matmul(x, z, "?act")), ok(_l), eq(rank(x), _r),
          eq(rank(y), 2))
_l = matmul(concat(0, x, y), z, "?act")
axiom("matmul-concat-rows", "[x ; y] z = [x z ; y z]  (2-D)", _l,
      concat(0, matmul(x, z, "?act"), matmul(y, z, "?act")), ok(_l), eq(rank(x), 2),
      eq(rank(z), 2))
for _m in STACK_ARITIES:
    _xs = tuple(Var(f"x{_i}") for _i in range(_m))
    _l = matmul(concat(0, *_xs), z, "?act")
    axiom(f"matmul-concat-rows-of-{_m}", f"[x0 ; ... ; x{_m - 1}] z = [x0 z ; ... ; x{_m - 1} z]"
          "  (2-D)", _l, concat(0, *(matmul(_v, z, "?act") for _v in _xs)), ok(_l),
          *(eq(rank(_v), 2) for _v in _xs), eq(rank(z), 2), sizes=(1, 2),
          ranks={**{_v.name: 2 for _v in _xs}, "z": 2})
_l = matmul(concat(1, x, y), concat(0, z, u))
axiom("matmul-concat-inner", "[x | y] [z ; u] = x z + y u  (2-D, x cols = z rows)", _l,
      ewadd(matmul(x, z), matmul(y, u)), ok(_l), eq(dim(x, 1), dim(z, 0)), eq(rank(x), 2),
      eq(rank(z), 2))
_l = matmul(x, app("const_imm", shape="?n"))
axiom("matmul-imm-right", "x I = x", _l, x, ok(_l))
_l = matmul(app("const_imm", shape="?n"), x)
axiom("matmul-imm-left", "I x = x", _l, x, ok(_l))

# ---- rows: flattening a 3-D tensor's leading axes into one commutes with the operators
# that act on each row alike (a product with a matrix, a bias add, an elementwise add), and a
# reshape to the original sizes undoes it. They let a dense layer run over a matrix.
_family = "rows"


def flat(a):
    return app("flatten", a, axis=2)


_3d = (eq(rank(x), 3),)
axiom("flatten-rows-dim0", "dim(flatten_2(x), 0) = dim(x, 0) · dim(x, 1)  (3-D)",
      dim(flat(x), 0), Arith("*", dim(x, 0), dim(x, 1)), ok(flat(x)), *_3d,
      triggers=((flat(x),),))
axiom("flatten-rows-dim1", "dim(flatten_2(x), 1) = dim(x, 2)  (3-D)", dim(flat(x), 1),
      dim(x, 2), ok(flat(x)), *_3d, triggers=((flat(x),),))
axiom("flatten-rank", "rank(flatten_a(x)) = 2", rank(app("flatten", x, axis="?a")), 2,
      ok(app("flatten", x, axis="?a")))
_l = matmul(flat(x), w, "?act")
axiom("matmul-flatten-rows", "flatten_2(x) w = flatten_2(x w)  (x 3-D, w 2-D)", _l,
      flat(matmul(x, w, "?act")), ok(_l), *_3d, eq(rank(w), 2))
_v = Var("b")
_l = app("add", flat(x), _v)
axiom("add-flatten-rows", "add(flatten_2(x), b) = flatten_2(add(x, b))  (x 3-D, b 1-D)", _l,
      flat(app("add", x, _v)), ok(_l), *_3d, eq(rank(_v), 1))
_l = ewadd(flat(x), flat(y))
axiom("ewadd-flatten-rows", "flatten_2(x) + flatten_2(y) = flatten_2(x + y)  (x, y 3-D of "
      "equal sizes)", _l, flat(ewadd(x, y)), ok(_l), *_3d, eq(rank(y), 3),
      eq(dim(x, 0), dim(y, 0)), eq(dim(x, 1), dim(y, 1)))
_l = app("reshape", flat(x), shape=(dim(x, 0), dim(x, 1), dim(x, 2)))
axiom("reshape-flatten-rows", "reshape(flatten_2(x), sizes of x) = x  (3-D)", _l, x, ok(_l),
      *_3d)

# ---- convolution (TASO: linearity, scalars, kernel/batch/channel concat, enlarge, the
# identity and averaging kernels) --------------------------------------------------------------
_family = "conv"
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
_same = {"s": (1, 1), "p": "same", "d": (1, 1)}
_l = conv(x, app("enlarge", w, kernel="?k"), act="?act", **_same)
axiom("conv-enlarge", "conv(x, enlarge(w)) = conv(x, w)  (same pads, stride 1)", _l,
      conv(x, w, act="?act", **_same), ok(_l))
_l = conv(x, app("const_iconv", shape="?ic"), g=1, **_same)
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

# ---- constants and enlarge ------------------------------------------------------------------
_family = "constant"
_l = ewmul(x, app("const_one", shape="?sh"))
axiom("ewmul-one", "x * 1 = x", _l, x, ok(_l))
axiom("smul-one", "x·1 = x  (the 0-d one)", smul(x, app("const_one", shape=())), x)
_ic = app("const_iconv", shape="?ic")
axiom("iconv-idem", "I * I = I  (the identity kernel is 0/1)", ewmul(_ic, _ic), _ic)
_l = app("enlarge", app("const_iconv", shape=("?c", "?c", "?kh", "?kw")), kernel=("?KH", "?KW"))
axiom("enlarge-iconv", "enlarge(identity kernel) = the larger identity kernel", _l,
      app("const_iconv", shape=("?c", "?c", "?KH", "?KW")), ok(_l))


def enlarge(a, k="?k"):
    return app("enlarge", a, kernel=k)


# The identity kernel used as an input: conv(I, w) only moves (flips, transposes,
# zero-pads) the entries of w, so doing it twice restores w, enlarged.
_I = app("const_iconv", shape=("?c", "?c", "?K", "?K"))
_l = conv(_I, conv(_I, w, g=1, **_same), g=1, **_same)
axiom("iconv-input-twice", "conv(I, conv(I, w)) = enlarge(w)  (I an identity kernel as input)",
      _l, enlarge(w, ("?K", "?K")), ok(_l), ok(enlarge(w, ("?K", "?K"))))
_l = ewmul(_I, conv(_I, w, g=1, **_same))
_Iw = app("const_iconv", shape=("?d0", "?d1", "?d2", "?d3"))
_r = enlarge(ewmul(w, _Iw), ("?K", "?K"))
axiom("iconv-input-mask", "I * conv(I, w) = enlarge(w * I_w)  (I_w the identity kernel of w's "
      "shape: the centre of w's diagonal)", _l, _r, ok(_l), ok(_r),
      *(eq(dim(w, i), f"?d{i}") for i in range(4)), triggers=((_l, _Iw),))
_l = conv(_I, relu(w), g=1, **_same)
axiom("iconv-input-relu", "conv(I, relu(w)) = relu(conv(I, w))  (entries moved, none summed)",
      _l, relu(conv(_I, w, g=1, **_same)), ok(_l))


_l = enlarge(w, ("?kh", "?kw"))
axiom("enlarge-identity", "enlarge(w, (kh, kw)) = w  when w is kh x kw already", _l, w, ok(_l),
      eq(dim(w, 2), "?kh"), eq(dim(w, 3), "?kw"))
def minus(a, b):
    return Arith("+", iv(a), Arith("*", -1, iv(b)))


axiom("enlarge-defined", "enlarge(w, (kh, kw)) is defined for a 4-D w no larger than kh x kw "
      "with sizes of kh's and kw's parity", _l, None, ok(w), eq(rank(w), 4),
      ge(minus("?kh", dim(w, 2)), 0), ge(minus("?kw", dim(w, 3)), 0),
      eq(Arith("%", minus("?kh", dim(w, 2)), 2), 0), eq(Arith("%", minus("?kw", dim(w, 3)), 2), 0),
      rel="ok", triggers=((_l,),))
axiom("enlarge-enlarge", "enlarge(enlarge(w, k1), k2) = enlarge(w, k2)",
      enlarge(enlarge(w, "?k1"), "?k2"), enlarge(w, "?k2"), ok(enlarge(enlarge(w, "?k1"), "?k2")))
for _name, _f in (("ewadd", ewadd), ("ewmul", ewmul)):
    _l = enlarge(_f(w, u))
    axiom(f"enlarge-{_name}", f"enlarge({_name}(w, u)) = {_name}(enlarge(w), enlarge(u))  "
          "(zero padding)", _l, _f(enlarge(w), enlarge(u)), ok(_l))
    _r = _f(enlarge(w), enlarge(u))
    axiom(f"{_name}-enlarge", f"{_name}(enlarge(w), enlarge(u)) = enlarge({_name}(w, u))  "
          "(w, u of one shape)", _r, enlarge(_f(w, u)), ok(_r),
          *(eq(dim(w, i), dim(u, i)) for i in range(4)))
axiom("relu-enlarge", "relu(enlarge(w)) = enlarge(relu(w))  (relu(0) = 0)", relu(enlarge(w)),
      enlarge(relu(w)))
axiom("enlarge-smul", "enlarge(w·s) = enlarge(w)·s", enlarge(smul(w, s)), smul(enlarge(w), s),
      ranks=SCALARS)
_l = enlarge(concat("?a", w, u))
axiom("enlarge-concat", "enlarge(concat_a(w, u)) = concat_a(enlarge(w), enlarge(u))  (a = 0, 1)",
      _l, concat("?a", enlarge(w), enlarge(u)), ok(_l), ge("?a", 0), ge(1, "?a"))

# ---- folding: conv with a bias, batch norm folded into it, merged group kernels ----------------
_family = "fold"


def conv_bias(a, b, c, act="none", s="?s", p="?p", d="?d", g="?g"):
    return app("conv2d_bias", a, b, c, strides=s, pads=p, dilations=d, groups=g, activation=act)


b, b2 = Var("b"), Var("b2")
VECTORS = {"b": 1, "b2": 1, "scale": 1, "bias": 1, "mean": 1, "var": 1}
_l = conv_bias(x, w, b)
axiom("conv-bias-def", "conv_bias(x, w, b) = add(conv(x, w), reshape(b, (1, O, 1, 1)))", _l,
      app("add", conv(x, w), app("reshape", b, shape=(1, dim(w, 0), 1, 1))), ok(_l),
      ranks=VECTORS)
for _a in ACTS:
    axiom(f"conv-bias-{_a}-fusion", f"conv_bias(x, w, b; act={_a}) = {_a}(conv_bias(x, w, b))",
          conv_bias(x, w, b, act=_a), act(_a, conv_bias(x, w, b)), ranks=VECTORS)
_l = conv_bias(x, concat(0, w, u), concat(0, b, b2), act="?act", g=1)
axiom("conv-bias-kernel-concat", "conv_bias(x, concat_0(w, u), concat_0(b, b2)) = "
      "concat_1(conv_bias(x, w, b), conv_bias(x, u, b2))", _l,
      concat(1, conv_bias(x, w, b, act="?act", g=1), conv_bias(x, u, b2, act="?act", g=1)),
      ok(_l), eq(dim(b, 0), dim(w, 0)), ranks=VECTORS)
_l = conv_bias(x, app("enlarge", w, kernel="?k"), b, act="?act", **_same)
axiom("conv-bias-enlarge", "conv_bias(x, enlarge(w), b) = conv_bias(x, w, b)  (same, stride 1)",
      _l, conv_bias(x, w, b, act="?act", **_same), ok(_l), ranks=VECTORS)
_bn = dict(epsilon="?e")
sc, bi, me, va = (Var(n) for n in ("scale", "bias", "mean", "var"))
_l = app("batchnorm", conv(x, w), sc, bi, me, va, **_bn)
axiom("conv-batchnorm", "batchnorm(conv(x, w)) = conv_bias(x, w·k, bias - mean·k)  "
      "(k = scale / sqrt(var + eps) per output channel)", _l,
      conv_bias(x, app("bn_kernel", w, sc, va, **_bn), app("bn_bias", sc, bi, me, va, **_bn)),
      ok(_l), positive=("var",), ranks=VECTORS)
_l = app("batchnorm", conv_bias(x, w, b), sc, bi, me, va, **_bn)
axiom("conv-bias-batchnorm", "batchnorm(conv_bias(x, w, b)) = "
      "conv_bias(x, w·k, bias - (mean - b)·k)", _l,
      conv_bias(x, app("bn_kernel", w, sc, va, **_bn),
                app("bn_bias", sc, bi, app("sub", me, b), va, **_bn)), ok(_l), positive=("var",),
      ranks=VECTORS)
for _name, _f in (("conv", conv), ("conv-bias", None)):
    _args = (x, w) if _f else (x, w, b)

    def _c(k, g, _args=_args, _f=_f):
        return (_f or conv_bias)(_args[0], k, *_args[2:], act="?act", g=g)
    _l = _c(w, "?G")
    axiom(f"{_name}-merge-gconv", f"{_name} with G groups = {_name} with G/c groups of the "
          "kernel merged c to one", _l,
          _c(app("merge_gconv", w, groups="?G", count="?cnt"), "?h"), ok(_l),
          eq("?G", Arith("*", iv("?h"), iv("?cnt"))), ge("?cnt", 1), ranks=VECTORS)

# ---- pooling ------------------------------------------------------------------------------
_family = "pool"
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

# ---- broadcasting arithmetic ----------------------------------------------------------------
_family = "broadcast"
axiom("add-ewadd", "add(x, y) = x + y  (equal shapes)", app("add", x, y), ewadd(x, y),
      ok(ewadd(x, y)))
axiom("mul-ewmul", "mul(x, y) = x * y  (equal shapes)", app("mul", x, y), ewmul(x, y),
      ok(ewmul(x, y)))
axiom("mul-smul", "mul(x, s) = x·s  (s 0-d)", app("mul", x, s), smul(x, s), ok(smul(x, s)),
      ranks=SCALARS)
axiom("add-comm", "add(x, y) = add(y, x)", app("add", x, y), app("add", y, x))
axiom("mul-comm", "mul(x, y) = mul(y, x)", app("mul", x, y), app("mul", y, x))
axiom("add-assoc", "add(add(x, y), z) = add(x, add(y, z))", app("add", app("add", x, y), z),
      app("add", x, app("add", y, z)))
axiom("mul-assoc", "mul(mul(x, y), z) = mul(x, mul(y, z))", app("mul", app("mul", x, y), z),
      app("mul", x, app("mul", y, z)))
axiom("mul-add-distrib", "mul(add(x, y), z) = add(mul(x, z), mul(y, z))",
      app("mul", app("add", x, y), z), app("add", app("mul", x, z), app("mul", y, z)))

for _r in (2, 3):  # a dense layer's bias, broadcast over the last axis, follows the concat
    _l = app("add", concat(_r - 1, x, y), concat(0, b, b2))
    axiom(f"add-bias-concat-{_r}d", f"add(concat_{_r - 1}(x, y), concat_0(b, b2)) = "
          f"concat_{_r - 1}(add(x, b), add(y, b2))  (x, y {_r}-D; b, b2 as long as their last "
          "axes)",
          _l, concat(_r - 1, app("add", x, b), app("add", y, b2)), ok(_l), eq(rank(x), _r),
          eq(rank(b), 1), eq(dim(b, 0), dim(x, _r - 1)), eq(dim(b2, 0), dim(y, _r - 1)))

# ---- gemm (ONNX's dense layer) with A not transposed: its rows are independent, as a
# product's are, when C is absent or one vector broadcast over them --------------------------
_family = "gemm"


def gemm(a, bm, *c):
    return app("gemm", a, bm, *c, alpha="?al", beta="?be", trans_a=0, trans_b="?tb")


for _c, _tag in (((), ""), ((b,), "-bias")):
    _l = gemm(concat(0, x, y), z, *_c)
    axiom(f"gemm{_tag}-concat-rows", f"gemm([x ; y], z{', b' * bool(_c)}) = "
          f"[gemm(x, z{', b' * bool(_c)}) ; gemm(y, z{', b' * bool(_c)})]  (A not transposed"
          f"{'; b a vector' * bool(_c)})", _l,
          concat(0, gemm(x, z, *_c), gemm(y, z, *_c)), ok(_l),
          *[eq(rank(b), 1)] * bool(_c), ranks={"b": 1})
    for _m in STACK_ARITIES:
        _xs = tuple(Var(f"x{_i}") for _i in range(_m))
        _l = gemm(concat(0, *_xs), z, *_c)
        axiom(f"gemm{_tag}-concat-rows-of-{_m}", f"gemm([x0 ; ... ; x{_m - 1}], z"
              f"{', b' * bool(_c)}) = [gemm(x0, ...) ; ... ; gemm(x{_m - 1}, ...)]", _l,
              concat(0, *(gemm(_v, z, *_c) for _v in _xs)), ok(_l),
              *[eq(rank(b), 1)] * bool(_c), sizes=(1, 2),
              ranks={**{_v.name: 2 for _v in _xs}, "z": 2, "b": 1})

# ---- shapes: what each operator's shape rule says about dim() and rank() ----------------------
_family = "shape"
for _c, _tag in (((), ""), ((b,), "-bias")):
    _e = gemm(x, y, *_c)
    axiom(f"gemm{_tag}-dim0", "dim(gemm(x, ...), 0) = dim(x, 0)  (A not transposed)",
          dim(_e, 0), dim(x, 0), ok(_e), triggers=((_e,),), ranks={"b": 1})
for _a in ACTS:
    axiom(f"{_a}-dim", f"dim({_a}(x), i) = dim(x, i)", dim(act(_a, x), "?i"), dim(x, "?i"))
    axiom(f"{_a}-rank", f"rank({_a}(x)) = rank(x)", rank(act(_a, x)), rank(x))
for _name, _f in (("ewadd", ewadd), ("ewmul", ewmul)):
    _e = _f(x, y)
    axiom(f"{_name}-dim", f"dim({_name}(x, y), i) = dim(x, i)", dim(_e, "?i"), dim(x, "?i"),
          ok(_e), triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
    axiom(f"{_name}-operands", f"dim(x, i) = dim(y, i) where {_name}(x, y) is defined",
          dim(x, "?i"), dim(y, "?i"), ok(_e),
          triggers=((_e, dim(x, "?i")), (_e, dim(y, "?i"))))
    axiom(f"{_name}-rank", f"rank({_name}(x, y)) = rank(x)", rank(_e), rank(x), ok(_e))
    for _k in range(4):  # stated for the first axes as soon as the operation exists
        axiom(f"{_name}-operands{_k}", f"dim(x, {_k}) = dim(y, {_k}) where {_name}(x, y) is "
              "defined", dim(x, _k), dim(y, _k), ok(_e), triggers=((_e,),))
_e = smul(x, s)
axiom("smul-dim", "dim(x·s, i) = dim(x, i)", dim(_e, "?i"), dim(x, "?i"), ok(_e), ranks=SCALARS)
axiom("smul-rank", "rank(x·s) = rank(x)", rank(_e), rank(x), ok(_e), ranks=SCALARS)
_e = concat("?a", x, y)
axiom("concat-dim-axis", "dim(concat_a(x, y), a) = dim(x, a) + dim(y, a)", dim(_e, "?a"),
      Arith("+", dim(x, "?a"), dim(y, "?a")), ok(_e), ge("?a", 0), triggers=((_e,),))
axiom("concat-dim-l", "dim(concat_a(x, y), i) = dim(x, i)  (i ≠ a)", dim(_e, "?i"),
      dim(x, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"),
      triggers=((dim(_e, "?i"),), (_e, dim(x, "?i"))))
axiom("concat-dim-r", "dim(concat_a(x, y), i) = dim(y, i)  (i ≠ a)", dim(_e, "?i"),
      dim(y, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"),
      triggers=((dim(_e, "?i"),), (_e, dim(y, "?i"))))
axiom("concat-rank", "rank(concat_a(x, y)) = rank(x)", rank(_e), rank(x), ok(_e))
for _k, _sk in enumerate(("?s1", "?s2")):
    _e = split(x, "?a", ("?s1", "?s2"), _k)
    axiom(f"split{_k}-dim-axis", f"dim(split_a(x; s1, s2)[{_k}], a) = s{_k + 1}", dim(_e, "?a"),
          _sk, ok(_e), ge("?a", 0))
    axiom(f"split{_k}-dim", f"dim(split_a(x)[{_k}], i) = dim(x, i)  (i ≠ a)", dim(_e, "?i"),
          dim(x, "?i"), ok(_e), ge("?a", 0), ne("?i", "?a"))
    axiom(f"split{_k}-rank", f"rank(split_a(x)[{_k}]) = rank(x)", rank(_e), rank(x), ok(_e))
_e = matmul(x, y, "?act")
_2d = (ok(_e), eq(rank(x), 2), eq(rank(y), 2))
_on = ((_e,),)  # sizes of an application, stated as soon as it exists
axiom("matmul-dim0", "dim(x y, 0) = dim(x, 0)  (2-D)", dim(_e, 0), dim(x, 0), *_2d, triggers=_on)
axiom("matmul-dim1", "dim(x y, 1) = dim(y, 1)  (2-D)", dim(_e, 1), dim(y, 1), *_2d, triggers=_on)
axiom("matmul-inner", "dim(x, 1) = dim(y, 0) where x y is defined  (2-D)", dim(x, 1),
      dim(y, 0), *_2d, triggers=_on)
axiom("matmul-rank", "rank(x y) = 2  (2-D)", rank(_e), 2, *_2d)
for _r in (3, 4):
    _nd = (ok(_e), eq(rank(x), _r), eq(rank(y), 2))
    axiom(f"matmul-dim-last-{_r}d", f"dim(x y, {_r - 1}) = dim(y, 1)  (x {_r}-D, y 2-D)",
          dim(_e, _r - 1), dim(y, 1), *_nd, triggers=((_e,),))
    axiom(f"matmul-rank-{_r}d", f"rank(x y) = {_r}  (x {_r}-D, y 2-D)", rank(_e), _r, *_nd)
for _r in (2, 3):  # a vector added along the last axis (a dense layer's bias)
    _e = app("add", x, b)
    _bias = (ok(_e), eq(rank(x), _r), eq(rank(b), 1), eq(dim(b, 0), dim(x, _r - 1)))
    axiom(f"add-bias-dim-{_r}d", f"dim(add(x, b), i) = dim(x, i)  (x {_r}-D, b as long as "
          "its last axis)", dim(_e, "?i"), dim(x, "?i"), *_bias, ge("?i", 0), ge(_r - 1, "?i"),
          triggers=((dim(_e, "?i"),),))
    axiom(f"add-bias-rank-{_r}d", f"rank(add(x, b)) = {_r}  (x {_r}-D, b as long as its last "
          "axis)", rank(_e), _r, *_bias)
_e = conv(x, w, act="?act")
_on = ((_e,),)
axiom("conv-dim0", "dim(conv(x, w), 0) = dim(x, 0)", dim(_e, 0), dim(x, 0), ok(_e), triggers=_on)
axiom("conv-dim1", "dim(conv(x, w), 1) = dim(w, 0)", dim(_e, 1), dim(w, 0), ok(_e), triggers=_on)
axiom("conv-channels", "dim(x, 1) = dim(w, 1) · groups where conv(x, w) is defined",
      dim(x, 1), Arith("*", dim(w, 1), iv("?g")), ok(_e), triggers=_on)
axiom("conv-rank", "rank(conv(x, w)) = 4", rank(_e), 4, ok(_e))
axiom("conv-input-rank", "rank(x) = 4 where conv(x, w) is defined", rank(x), 4, ok(_e),
      triggers=_on)
axiom("conv-kernel-rank", "rank(w) = 4 where conv(x, w) is defined", rank(w), 4, ok(_e),
      triggers=_on)
axiom("conv-groups-positive", "groups >= 1 where conv(x, w) is defined", iv("?g"), 1, ok(_e),
      rel=">=", triggers=_on)
axiom("conv-groups-divide", "groups divides the output channels where conv(x, w) is defined",
      Arith("%", dim(w, 0), iv("?g")), 0, ok(_e), triggers=_on)
_e = conv_bias(x, w, b, act="?act")
_on = ((_e,),)
axiom("conv-bias-dim0", "dim(conv_bias(x, w, b), 0) = dim(x, 0)", dim(_e, 0), dim(x, 0), ok(_e),
      triggers=_on, ranks=VECTORS)
axiom("conv-bias-dim1", "dim(conv_bias(x, w, b), 1) = dim(w, 0)", dim(_e, 1), dim(w, 0), ok(_e),
      triggers=_on, ranks=VECTORS)
axiom("conv-bias-rank", "rank(conv_bias(x, w, b)) = 4", rank(_e), 4, ok(_e), ranks=VECTORS)
axiom("conv-bias-size", "dim(b, 0) = dim(w, 0) where conv_bias(x, w, b) is defined", dim(b, 0),
      dim(w, 0), ok(_e), triggers=_on, ranks=VECTORS)
_e = transpose(x)
axiom("transpose-dim0", "dim(transpose(x), 0) = dim(x, 1)  (2-D)", dim(_e, 0), dim(x, 1), ok(_e))
axiom("transpose-dim1", "dim(transpose(x), 1) = dim(x, 0)  (2-D)", dim(_e, 1), dim(x, 0), ok(_e))
axiom("transpose-rank", "rank(transpose(x)) = rank(x)", rank(transpose(x, "?perm")), rank(x),
      ok(transpose(x, "?perm")))
for _name, _e in (("maxpool", maxpool(x)), ("avgpool", avgpool(x)),
                  ("enlarge", app("enlarge", x, kernel="?k"))):
    axiom(f"{_name}-dim", f"dim({_name}(x), i) = dim(x, i)  (i = 0, 1)", dim(_e, "?i"),
          dim(x, "?i"), ok(_e), ge("?i", 0), ge(1, "?i"))
    axiom(f"{_name}-rank", f"rank({_name}(x)) = 4", rank(_e), 4, ok(_e))
for _op, _r in (("const_one", 2), ("const_one", 4), ("const_iconv", 4), ("const_pool", 4),
               ("const_imm", 2)):
    _sh = tuple(f"?d{i}" for i in range(_r))
    _e = app(_op, shape=_sh)
    axiom(f"{_op}-rank{_r}", f"rank({_op}(shape of {_r} sizes)) = {_r}", rank(_e), _r, ok(_e))
    for _i in range(_r):
        axiom(f"{_op}-dim{_i}-rank{_r}", f"dim({_op}(shape=(d0, ...)), {_i}) = d{_i}",
              dim(_e, _i), _sh[_i], ok(_e))
# An operator applied to ⊥ is ⊥: a defined application has defined operands.
_family = "strict"
for _op in ("ewadd", "ewmul", "scalar_mul", "relu", "sigmoid", "tanh", "transpose", "matmul",
            "conv2d", "maxpool2d", "avgpool2d", "enlarge", "add", "mul", "split", "conv2d_bias",
            "reshape", "batchnorm", "bn_kernel", "bn_bias", "merge_gconv", "sub", "flatten"):
    _o = OPS[_op]
    _args = tuple(Var(n) for n in _o.inputs)  # named as the operator names its inputs
    _ranks = {"scalar_mul": SCALARS, "batchnorm": VECTORS, "bn_kernel": VECTORS,
              "bn_bias": VECTORS, "conv2d_bias": VECTORS}.get(_op, {})
    _e = app(_op, *_args, **{k: f"?{k}" for k in _o.attrs})
    for _v in _args:
        axiom(f"{_op}-strict-{_v}", f"ok({_op}(...{_v}...)) implies ok({_v})", _v, None, ok(_e),
              rel="ok", triggers=((_e,),), ranks=_ranks)
for _c in ((), (b,)):
    _e = gemm(x, y, *_c)
    for _v in (x, y, *_c):
        axiom(f"gemm{len(_c) + 2}-strict-{_v}", f"ok(gemm(...{_v}...)) implies ok({_v})", _v,
              None, ok(_e), rel="ok", triggers=((_e,),))
for _n in range(2, max(STACK_ARITIES) + 1):
    _args = (x, y, z, u)[:_n] if _n <= 4 else tuple(Var(f"x{_i}") for _i in range(_n))
    _e = concat("?a", *_args)
    for _v in _args:
        axiom(f"concat{_n}-strict-{_v}", f"ok(concat(...{_v}...)) implies ok({_v})", _v, None,
              ok(_e), rel="ok", triggers=((_e,),))
_family = "shape"
axiom("dim-nonneg", "dim(x, i) >= 0", dim(x, "?i"), 0, rel=">=", triggers=((dim(x, "?i"),),))


# ---- the numeric check ----------------------------------------------------------------------
@dataclass
class Outcome:
    status: str  # "held" (compared on well-shaped values), "vacuous" or "violated"
    detail: dict = field(default_factory=dict)


def _guards(ax: Axiom) -> tuple[list[Any], list[Any]]:
    oks = [c.t for c in ax.when if isinstance(c, Ok)]
    cmps = [c for c in ax.when if not isinstance(c, Ok)]
    return oks, cmps


def check_seeds(ax: Axiom) -> int:
    """How many seeds an axiom's check draws (the test suite's, scored by
    bench/axiom_mutants.py): 12, and 8 more for each tensor variable past four,
    since a counterexample must then line up more sizes at once (a split of a
    six-way concat is first caught near seed 28)."""
    return max(12, 8 * (len(ax.tensor_vars()) - 2))


def check_axiom(ax: Axiom, seed: int, budget: int = 2000) -> Outcome:
    """Evaluate `ax` on the numpy reference: find shapes where its guards hold and
    one side is well-shaped, draw values, and compare both sides in the ⊥ model
    (also with one variable set to ⊥). A violation is a counterexample."""
    rng = np.random.default_rng(seed)
    oks, cmps = _guards(ax)
    tensor_eq = ax.rel == "==" and isinstance(ax.lhs, (Var, App))
    # Draws: for an equation of tensors, one where each side is well-shaped; for
    # a size or definedness axiom, one where its applications are well-shaped
    # (not for "ok": that is its conclusion) and one where only its guards
    # hold, so that a forgotten guard lets an ill-shaped application through.
    sides: list[Any] = [ax.lhs, ax.rhs] if tensor_eq else \
        ["guards"] if ax.rel == "ok" else [None, "guards"]
    # Seeds cycle through four kinds of draw: one within the values operators
    # accept (DOMAINS) and the ranks the family uses, and three adding the
    # values an axiom must survive though no rule binds them (EDGES: negative
    # and out-of-range axes, counts of zero or below), one of which also
    # leaves ranks to the solver, where an axiom whose guard forgets a rank
    # its family always has is caught. Odd seeds draw values four times larger.
    kind = seed % 4
    domains = DOMAINS if kind == 0 else check_domains()
    ranks = {} if kind == 2 else ax.ranks
    free = (0, 1, 2, 3, 4, 5) if kind == 2 else (1, 2, 3, 4)
    scale = np.float32(4.0 if seed % 2 else 1.0)
    status = "vacuous"
    for side in sides:
        terms = [*oks, *([side] if isinstance(side, App) else [])]
        if side is None:
            terms += apps([ax.lhs, ax.rhs])
        sol = solve(terms, cmps, ranks=ranks, domains=domains, rng=rng, sizes=ax.sizes,
                    budget=budget, free_ranks=free)
        if sol is None:
            continue
        shapes, ints = sol
        for v in ax.tensor_vars():
            r = ranks.get(v, int(rng.choice(free)))
            shapes.setdefault(v, tuple(int(d) for d in rng.choice(ax.sizes, r)))
        for v in ax.int_vars():
            ints.setdefault(v, domains[v][int(rng.integers(len(domains[v])))])
        values = {v: (rng.standard_normal(sh) * scale).astype(np.float32)
                  for v, sh in shapes.items()}
        for v in ax.positive:
            values[v] = np.abs(values[v]) + np.float32(0.1)
        bad = _compare(ax, shapes, ints, values, tensor_eq)
        if bad:
            return Outcome("violated", bad)
        status = "held"
        # the same assignment with one variable ⊥ (unguarded axioms must survive it)
        if not ax.tensor_vars():
            continue
        v = ax.tensor_vars()[int(rng.integers(len(ax.tensor_vars())))]
        bad = _compare(ax, {**shapes, v: None}, ints, {**values, v: None}, tensor_eq)
        if bad:
            return Outcome("violated", {**bad, "bottom": v})
    return Outcome(status)


def _compare(ax: Axiom, shapes, ints, values, tensor_eq: bool) -> dict:
    ev = Evaluator(shapes, ints, values)
    if not all(ev.holds(c) for c in ax.when):
        return {}
    info = {"shapes": shapes, "ints": ints}
    if ax.rel == "ok":
        return {} if ev.shape(ax.lhs) is not None else {**info, "lhs": None}
    if not tensor_eq:
        a, b = ev.int(ax.lhs), ev.int(ax.rhs)
        good = a >= b if ax.rel == ">=" else a == b
        return {} if good else {**info, "lhs": a, "rhs": b}
    la, ra = ev.value(ax.lhs), ev.value(ax.rhs)
    if la is None and ra is None:
        return {}
    if la is None or ra is None or la.shape != ra.shape:
        return {**info, "lhs_shape": None if la is None else la.shape,
                "rhs_shape": None if ra is None else ra.shape}
    diff = mismatch(la, ra, rtol=1e-4)
    return {} if diff is None else {**info, "max_diff": diff}
