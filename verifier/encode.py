"""Z3 encoding of terms, axioms and rules.

Sorts and symbols:
  Tensor                        an uninterpreted sort: every tensor, and ⊥;
  ok(Tensor) -> Bool            the tensor is not ⊥ (its operators' shape rules held);
  dim(Tensor, Int) -> Int       size of an axis (0 out of range or for ⊥);
  rank(Tensor) -> Int           number of axes (-1 for ⊥);
  <op>.<n>.<k>(Int*, Tensor*)   output k of operator op applied to n tensors: one
                                function symbol per operator output (and per input
                                count of a variadic operator), read from the registry;
                                its integer parameters are the operator's attributes,
                                one per attribute in declaration order;
  tuple<n>(Int*) -> Int         codes a tuple-valued attribute from its elements.

An attribute value is coded exactly: an int as itself, a string (or another
leaf) as a large negative integer spelling its bytes, a tuple as tuple<n> of its
elements' codes, an attribute variable "?v" as the integer variable v, and a
{"dim": ...} size as a dim() term. Equal values get equal codes; distinct ones
are at worst left undecided, never identified, so the coding cannot make a
false rule provable.

Axioms are universally quantified over their tensor and integer variables and
carry E-matching triggers (their left and right sides by default). A dim()
term in an attribute position of an axiom is lifted into a fresh variable and a
guard, so that the axiom matches a rule whose attribute is the same size written
differently (e.g. dim(x, 1) for dim(relu(x), 1)); the shape axioms then close the
gap.

A rule is proved when the axioms, ok() of every node of both sides (a rule
rewrites only where both sides are well-shaped), the variables' rank and size
constraints, the range of every axis variable (0 .. rank-1: graphs and rules
hold axes normalised, `taso.rules_db.pattern`), and the negation of "every
mapped source output equals its target output" are unsatisfiable.
"""

from __future__ import annotations

from typing import Any

import z3

from taso.ops import OPS

from .terms import (
    App,
    Arith,
    Dim,
    IVar,
    Ok,
    Rank,
    Var,
    apps,
    axis_conditions,
    int_vars,
    rule_conditions,
    rule_terms,
    tensor_vars,
)

_STRING_BASE = 2**62


class Encoding:
    """The symbols of one Z3 context: built once per worker process."""

    def __init__(self) -> None:
        self.T = z3.DeclareSort("Tensor")
        self.ok = z3.Function("ok", self.T, z3.BoolSort())
        self.dim = z3.Function("dim", self.T, z3.IntSort(), z3.IntSort())
        self.rank = z3.Function("rank", self.T, z3.IntSort())
        self._fns: dict[tuple[str, int, int], z3.FuncDeclRef] = {}
        self._tuples: dict[int, z3.FuncDeclRef] = {}

    # ---- symbols -------------------------------------------------------------
    def fn(self, op: str, nin: int, out: int) -> z3.FuncDeclRef:
        key = (op, nin, out)
        if key not in self._fns:
            sig = [z3.IntSort()] * len(OPS[op].attrs) + [self.T] * nin + [self.T]
            self._fns[key] = z3.Function(f"{op}.{nin}.{out}", *sig)
        return self._fns[key]

    def tuple_fn(self, n: int) -> z3.FuncDeclRef:
        if n not in self._tuples:
            self._tuples[n] = z3.Function(f"tuple{n}", *([z3.IntSort()] * (n + 1)))
        return self._tuples[n]

    @staticmethod
    def leaf_code(v: Any) -> int:
        """The exact integer code of a non-tuple attribute value."""
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        text = v if isinstance(v, str) else f"{type(v).__name__}:{v!r}"
        return -_STRING_BASE - int.from_bytes(("s" + text).encode(), "big")

    # ---- terms ----------------------------------------------------------------
    def expr(self, t: Any, env: dict, lift: dict | None = None) -> z3.ExprRef:
        """The Z3 expression of a tensor or integer term. `env` maps ("t", name) and
        ("i", name) to Z3 expressions; `lift` (axioms only) collects the lifted
        attribute sizes."""
        if isinstance(t, Var):
            return env[("t", t.name)]
        if isinstance(t, App):
            params = [self.attr(v, env, lift) for _, v in t.attrs]
            args = [self.expr(a, env, lift) for a in t.args]
            return self.fn(t.op, len(t.args), t.out)(*params, *args)
        if isinstance(t, IVar):
            return env[("i", t.name)]
        if isinstance(t, Dim):
            return self.dim(self.expr(t.t, env, lift), self.expr(t.axis, env, lift))
        if isinstance(t, Rank):
            return self.rank(self.expr(t.t, env, lift))
        if isinstance(t, Arith):
            a, b = self.expr(t.a, env, lift), self.expr(t.b, env, lift)
            return a + b if t.op == "+" else a * b if t.op == "*" else a % b
        if isinstance(t, (bool, int)):
            return z3.IntVal(int(t))
        raise TypeError(f"cannot encode {t!r}")

    def attr(self, v: Any, env: dict, lift: dict | None) -> z3.ExprRef:
        if isinstance(v, tuple):
            return self.tuple_fn(len(v))(*[self.attr(u, env, lift) for u in v])
        if isinstance(v, (Dim, Rank, Arith)):
            if lift is None:
                return self.expr(v, env)
            if v not in lift:
                lift[v] = (z3.Int(f"L{len(lift)}"), self.expr(v, env, lift))
            return lift[v][0]
        if isinstance(v, IVar):
            return env[("i", v.name)]
        return z3.IntVal(self.leaf_code(v))

    def cond(self, c: Any, env: dict, lift: dict | None = None) -> z3.BoolRef:
        if isinstance(c, Ok):
            return self.ok(self.expr(c.t, env, lift))
        a, b = self.expr(c.a, env, lift), self.expr(c.b, env, lift)
        return {"==": a == b, "!=": a != b, ">=": a >= b}[c.op]

    # ---- axioms -----------------------------------------------------------------
    def axiom(self, ax) -> z3.BoolRef:
        """The universally quantified formula of an axiom (taso.verifier.axioms.Axiom)."""
        env: dict[tuple[str, str], z3.ExprRef] = {}
        for v in tensor_vars([ax.lhs, ax.rhs, *ax.when]):
            env[("t", v)] = z3.Const(f"T{v}", self.T)
        for v in ax.int_vars():
            env[("i", v)] = z3.Int(f"I{v}")
        lift: dict = {}
        lhs = self.expr(ax.lhs, env, lift)
        rhs = None if ax.rel == "ok" else self.expr(ax.rhs, env, lift)
        guards = [self.cond(c, env, lift) for c in ax.when]
        guards += [var == e for var, e in lift.values()]
        concl = self.ok(lhs) if ax.rel == "ok" else lhs >= rhs if ax.rel == ">=" else lhs == rhs
        body = z3.Implies(z3.And(guards), concl) if guards else concl
        bound = [*env.values(), *(var for var, _ in lift.values())]
        names = {str(b) for b in bound}
        cands = [[self.expr(t, env, lift) for t in group] for group in ax.trigger_groups()]
        pats = [z3.MultiPattern(*g) if len(g) > 1 else g[0] for g in cands
                if names <= set().union(*(_consts(e) for e in g))]
        if not pats:
            raise ValueError(f"axiom {ax.name}: no trigger covers all its variables")
        return z3.ForAll(bound, body, patterns=pats, qid=ax.name)

    # ---- rules ---------------------------------------------------------------------
    def rule(self, rule) -> tuple[list[z3.BoolRef], z3.BoolRef, set[str]]:
        """(hypotheses, negated goal, operator names used) of a rule."""
        src, dst, src_nodes, dst_nodes = rule_terms(rule)
        env: dict[tuple[str, str], z3.ExprRef] = {}
        for v in tensor_vars([*src_nodes, *dst_nodes, *src, *dst]):
            env[("t", v)] = z3.Const(v, self.T)
        for t in [*src_nodes, *dst_nodes]:
            for name in int_vars([t]):
                env.setdefault(("i", name), z3.Int(name))
        hyps = [self.ok(self.expr(t, env)) for t in [*src_nodes, *dst_nodes]]
        hyps += [self.ok(env[k]) for k in env if k[0] == "t"]
        for v, c in rule.vars.items():
            if c.get("rank") is not None and ("t", v) in env:
                hyps.append(self.rank(env[("t", v)]) == int(c["rank"]))
        hyps += [self.cond(c, env) for c in rule_conditions(rule)]
        hyps += [self.cond(c, env) for c in axis_conditions(rule)]
        goal = z3.Not(z3.And([self.expr(s, env) == self.expr(d, env)
                              for s, d in zip(src, dst)]))
        ops = {a.op for a in apps([*src_nodes, *dst_nodes])}
        return hyps, goal, ops


def _consts(e: z3.ExprRef) -> set[str]:
    """Names of the uninterpreted constants (and bound variables) in e."""
    out: set[str] = set()
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.add(str(x))
        stack.extend(x.children())
    return out

