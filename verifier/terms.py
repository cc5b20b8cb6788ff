"""Terms: the one language in which both rule sides and axioms are written.

A tensor term is a variable (`Var`) or an operator applied to tensor terms
(`App`, with a complete attribute tuple and an output index). An integer term is
a Python int, an attribute variable (`IVar`, written "?name" in rule patterns),
a tensor's dimension (`Dim`), its rank (`Rank`) or a sum or product (`Arith`).
A condition is `Ok(t)` (t is well-shaped) or a comparison (`Cmp`).

The meaning of a term is that of the operator library in a model with one
extra value, ⊥ ("ill-shaped"): an operator applied to ⊥, or to shapes or
attributes its shape rule rejects, gives ⊥; dim(t, i) is the size of axis i of t
(0 when i is out of range or t is ⊥) and rank(⊥) = -1. `TermEvaluator` computes
exactly this meaning with the numpy reference; the Z3 encoding
(`taso.verifier.encode`) names it symbolically.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from taso.rules_db.pattern import axis_variables, checked, same_dims

from taso.ops import OPS, ShapeError
from taso.ops.base import freeze


@dataclass(frozen=True)
class Var:
    """A tensor variable."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class App:
    """Output `out` of operator `op` applied to `args`; `attrs` is complete (every
    attribute of the operator, in declaration order)."""

    op: str
    args: tuple[Any, ...]
    attrs: tuple[tuple[str, Any], ...]
    out: int = 0

    def __repr__(self) -> str:
        shown = [f"{k}={v!r}" for k, v in self.attrs
                 if OPS[self.op].attrs.get(k, object()) != v]
        body = ", ".join([*map(repr, self.args), *shown])
        return f"{self.op}({body})" + (f"[{self.out}]" if self.out else "")


@dataclass(frozen=True)
class IVar:
    """An integer or attribute variable."""

    name: str

    def __repr__(self) -> str:
        return "?" + self.name


@dataclass(frozen=True)
class Dim:
    t: Any
    axis: Any

    def __repr__(self) -> str:
        return f"dim({self.t!r}, {self.axis!r})"


@dataclass(frozen=True)
class Rank:
    t: Any

    def __repr__(self) -> str:
        return f"rank({self.t!r})"


@dataclass(frozen=True)
class Arith:
    op: str  # "+", "*" or "%" (remainder, divisor positive)
    a: Any
    b: Any

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


@dataclass(frozen=True)
class Ok:
    t: Any

    def __repr__(self) -> str:
        return f"ok({self.t!r})"


@dataclass(frozen=True)
class Cmp:
    op: str  # "==", "!=", ">="
    a: Any
    b: Any

    def __repr__(self) -> str:
        return f"{self.a!r} {self.op} {self.b!r}"


Tensor = Union[Var, App]  # noqa: UP007 (a runtime alias)
Cond = Union[Ok, Cmp]  # noqa: UP007


def app(op: str, *args: Any, out: int = 0, **attrs: Any) -> App:
    """An operator application with its attributes completed by the defaults.
    A string "?name" stands for the attribute variable IVar(name)."""
    o = OPS[op]
    o.check_arity(len(args))
    missing = [k for k, d in o.attrs.items() if d is None and k not in attrs]
    unknown = set(attrs) - set(o.attrs)
    if missing or unknown:
        raise ShapeError(f"{op}: missing attributes {missing}, unknown {sorted(unknown)}")
    full = tuple((k, _attr_value(attrs.get(k, d))) for k, d in o.attrs.items())
    return App(op, tuple(args), full, out)


def _attr_value(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("?"):
        return IVar(v[1:])
    if isinstance(v, (list, tuple)):
        return tuple(_attr_value(u) for u in v)
    return freeze(v)


# ---- traversal -----------------------------------------------------------------
def children(t: Any) -> Iterator[Any]:
    """Immediate sub-terms (tensor and integer) of a term, condition or attribute."""
    if isinstance(t, App):
        yield from t.args
        for _, v in t.attrs:
            yield v
    elif isinstance(t, tuple):
        yield from t
    elif isinstance(t, (Dim,)):
        yield t.t
        yield t.axis
    elif isinstance(t, (Rank, Ok)):
        yield t.t
    elif isinstance(t, (Arith, Cmp)):
        yield t.a
        yield t.b


def walk(t: Any) -> Iterator[Any]:
    yield t
    for c in children(t):
        yield from walk(c)


def tensor_vars(ts: Iterable[Any]) -> list[str]:
    """Tensor variables in order of first occurrence."""
    seen: dict[str, None] = {}
    for t in ts:
        for u in walk(t):
            if isinstance(u, Var):
                seen.setdefault(u.name)
    return list(seen)


def int_vars(ts: Iterable[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for t in ts:
        for u in walk(t):
            if isinstance(u, IVar):
                seen.setdefault(u.name)
    return list(seen)


def apps(ts: Iterable[Any]) -> list[App]:
    """Every operator application inside the terms, sub-terms first."""
    out: dict[App, None] = {}

    def visit(t):
        for c in children(t):
            visit(c)
        if isinstance(t, App):
            out.setdefault(t)
    for t in ts:
        visit(t)
    return list(out)


# ---- rules as terms ------------------------------------------------------------
def rule_terms(rule) -> tuple[list[App | Var], list[App | Var], list[App], list[App]]:
    """A rule's mapped outputs as term pairs and every node term of each side:
    (src outputs, dst outputs, src nodes, dst nodes). The rule is checked and
    its axes normalised first (`taso.rules_db.pattern.checked`)."""
    rule = checked(rule)
    src_env, src_terms = _side_terms(rule.src)
    dst_env, dst_terms = _side_terms(rule.dst)
    src = [_lookup(src_env, s) for s, _ in rule.outputs]
    dst = [_lookup(dst_env, d) for _, d in rule.outputs]
    return src, dst, src_terms, dst_terms


def _side_terms(nodes) -> tuple[dict, list[App]]:
    env: dict[Any, Any] = {}
    terms = []
    for i, n in enumerate(nodes):
        ins = [_lookup(env, r) for r in n.inputs]
        attrs = {k: _pattern_attr(v, env) for k, v in n.attrs.items()}
        for k in range(OPS[n.op].num_outputs(_probe(n.op, attrs))):
            t = app(n.op, *ins, out=k, **attrs)
            env[(i, k)] = t
            terms.append(t)
    return env, terms


def rule_conditions(rule) -> list[Cmp]:
    """A rule's constraints between variable sizes, as conditions."""
    return [Cmp("==", Dim(Var(v), a), Dim(Var(u), b))
            for v, a, u, b in same_dims(checked(rule))]


def axis_conditions(rule) -> list[Cmp]:
    """Every axis variable in range, as the optimizer binds it: 0 <= a < rank of
    the operand it counts (<= for a cut between axes, Flatten's; of the output
    for Unsqueeze's)."""
    rule = checked(rule)
    envs = {"src": _side_terms(rule.src)[0], "dst": _side_terms(rule.dst)[0]}
    out: list[Cmp] = []
    for side, name, kind, first, i in axis_variables(rule):
        a = IVar(name)
        t = _lookup(envs[side], (i, 0)) if kind == "out" else _lookup(envs[side], first)
        hi = Arith("+", Rank(t), 1) if kind == "in+1" else Rank(t)
        out += [Cmp(">=", a, 0), Cmp(">=", Arith("+", hi, -1), a)]
    return out


def _lookup(env: dict, ref: Any) -> Any:
    if isinstance(ref, str):
        return Var(ref)
    return env[tuple(ref)]


def _pattern_attr(v: Any, env: dict) -> Any:
    if isinstance(v, dict) and "dim" in v:
        ref, axis = v["dim"]
        return Dim(_lookup(env, ref), axis)  # axis non-negative (`checked`)
    if isinstance(v, (list, tuple)):
        return tuple(_pattern_attr(u, env) for u in v)
    return v


def _probe(op: str, attrs: dict) -> dict:
    """Attributes good enough to ask an operator its number of outputs (split
    counts its sizes, whatever they are)."""
    return {k: (v if not isinstance(v, (IVar, Dim)) else 0) for k, v in attrs.items()}


# ---- evaluation in the ⊥ model -----------------------------------------------------
BOTTOM = None


class TermEvaluator:
    """Shapes and values of terms for given variable shapes, attribute-variable
    values and (optionally) variable values. ⊥ is None."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], ints: dict[str, Any],
                 values: dict[str, np.ndarray] | None = None):
        self.shapes = shapes
        self.ints = ints
        self.values = values or {}
        self._shape: dict[Any, list[tuple[int, ...]] | None] = {}
        self._value: dict[Any, list[np.ndarray] | None] = {}

    # attributes and integers
    def attr(self, v: Any) -> Any:
        if isinstance(v, IVar):
            return self.ints[v.name]
        if isinstance(v, (Dim, Rank, Arith)):
            return self.int(v)
        if isinstance(v, tuple):
            return tuple(self.attr(u) for u in v)
        return v

    def int(self, e: Any) -> int:
        if isinstance(e, (bool, int, np.integer)):
            return int(e)
        if isinstance(e, IVar):
            return self.ints[e.name]
        if isinstance(e, Dim):
            s = self.shape(e.t)
            i = self.int(e.axis)
            return s[i] if s is not None and 0 <= i < len(s) else 0
        if isinstance(e, Rank):
            s = self.shape(e.t)
            return -1 if s is None else len(s)
        if isinstance(e, Arith):
            a, b = self.int(e.a), self.int(e.b)
            return a + b if e.op == "+" else a * b if e.op == "*" else a % b
        raise TypeError(f"not an integer term: {e!r}")

    def holds(self, c: Any) -> bool:
        if isinstance(c, Ok):
            return self.shape(c.t) is not None
        a, b = self.int(c.a), self.int(c.b)
        return {"==": a == b, "!=": a != b, ">=": a >= b}[c.op]

    # tensors
    def shape(self, t: Any) -> tuple[int, ...] | None:
        if isinstance(t, Var):
            return self.shapes[t.name]
        key = (t.op, t.args, t.attrs)
        if key not in self._shape:
            self._shape[key] = self._app_shapes(t)
        outs = self._shape[key]
        return None if outs is None or t.out >= len(outs) else outs[t.out]

    def _app_shapes(self, t: App) -> list[tuple[int, ...]] | None:
        ins = [self.shape(a) for a in t.args]
        if any(s is None for s in ins):
            return None
        try:
            attrs = {k: self.attr(v) for k, v in t.attrs}
            o = OPS[t.op]
            if t.out >= o.num_outputs(attrs):
                return None
            return o.out_shapes(attrs, ins)
        except (ShapeError, ValueError, IndexError, TypeError, KeyError):
            # TypeError/KeyError: an attribute value of the wrong kind (e.g. a
            # sampled integer where a tuple belongs) is ill-formed, i.e. ⊥.
            return None

    def value(self, t: Any) -> np.ndarray | None:
        if isinstance(t, Var):
            return self.values[t.name]
        if self.shape(t) is None:
            return None
        key = (t.op, t.args, t.attrs)
        if key not in self._value:
            xs = [self.value(a) for a in t.args]
            attrs = {k: self.attr(v) for k, v in t.attrs}
            outs = OPS[t.op].run_ref(attrs, xs)
            self._value[key] = [np.asarray(o, dtype=np.float32) for o in outs]
        return self._value[key][t.out]
