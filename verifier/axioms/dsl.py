"""The language the operator axioms are written in: `Axiom`, the registry, the
term constructors, and the values the numeric check draws.

Each module of this package states one family of axioms (its name) through
`family(name)`; `taso.verifier.axioms` imports them in a fixed order.

An axiom says lhs = rhs (or, for sizes, lhs >= rhs) for all tensors and integer
attributes, whenever its guards (`when`) hold. Its meaning is the ⊥ model of
`taso.verifier.terms`: an ill-shaped application is ⊥, so an unguarded equation
claims that both sides are ill-shaped together, and a guard ok(lhs) says "where
the left side is well-shaped". Attribute variables ("?s", "?p", ...) range over
every value; `DOMAINS` lists the values the numeric check samples.

`check.check_axiom` evaluates an axiom with the numpy reference (every axiom
is tested so: tests/test_axioms.py). The semantics is exact real arithmetic; the
float32 reference stands in for it within a tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from taso.ops import ACTIVATIONS, OPS

from ..terms import (
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

# The numeric check draws NCHW tensors and OIHW kernels for these variables in
# the convolution families.
NCHW = {"x": 4, "y": 4, "w": 4, "u": 4}


def family(name: str, ranks: dict[str, int] | None = None) -> Callable[..., Axiom]:
    """The function that states axioms of family `name` (`ranks`: the ranks the
    numeric check draws unless an axiom says otherwise)."""

    def axiom(label: str, statement: str, lhs: Any, rhs: Any, *when: Any, **kw: Any) -> Axiom:
        if ranks:
            kw["ranks"] = {**ranks, **kw.get("ranks", {})}
        ax = Axiom(label, statement, iv(lhs), iv(rhs), tuple(when), family=name, **kw)
        if any(a.name == label for a in AXIOMS):
            raise ValueError(f"axiom {label} is defined twice")
        AXIOMS.append(ax)
        return ax

    return axiom


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
               shape=[(1, 2, 1, 1), (2, 3), (6,), (3, 2), (1, 3, 1, 1)],
               axes=[(0,), (1,), (2,), (3,), (0, 1)], keepdims=[0, 1])
DOMAINS["rows"] = [1, 2, 3, 4, 6, 8]  # a row count (reshape to the matrix of rows)
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
    "axes": [(-1,), (5,), (1, 1)], "keepdims": [2], "rows": [0, 5],
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


def flat(a):
    return app("flatten", a, axis=2)


def enlarge(a, k="?k"):
    return app("enlarge", a, kernel=k)


def minus(a, b):
    return Arith("+", iv(a), Arith("*", -1, iv(b)))


def conv_bias(a, b, c, act="none", s="?s", p="?p", d="?d", g="?g"):
    return app("conv2d_bias", a, b, c, strides=s, pads=p, dilations=d, groups=g, activation=act)


def gemm(a, bm, *c):
    return app("gemm", a, bm, *c, alpha="?al", beta="?be", trans_a=0, trans_b="?tb")


b, b2 = Var("b"), Var("b2")  # bias vectors
VECTORS = {"b": 1, "b2": 1, "scale": 1, "bias": 1, "mean": 1, "var": 1}
SAME = {"s": (1, 1), "p": "same", "d": (1, 1)}  # conv attributes: same pads, stride 1
# Concatenations of more parts (a stack of rows); the check draws matrices with
# sizes 1 and 2, so that the parts agree often enough to compare.
STACK_ARITIES = range(3, 9)
# The operators the pointwise laws are stated for (`Op.pointwise`, without
# attributes): the fused activations first, then the others by name.
POINTWISE = ACTS + sorted(n for n, op in OPS.items()
                          if op.pointwise and not op.attrs and n not in ACTS)
