"""The bridge between taso graphs and rules and the compiled search core.

The core sees only integers: operator type ids, interned attribute ids and
interned shape ids. This module owns those tables and answers the core's two
questions, each once per distinct key (the core memoizes the answers):

- `infer(type, attr, in_shapes)`: a new node's output shapes and cost, or None
  when the operator rejects the shapes (the operator's own shape rule decides);
- `check(rule, attrs, out_shapes, var_shapes, var_weight_only)`: whether a
  structural match of a rule satisfies its attribute, shape and weight
  constraints, and if so the target side's concrete attribute ids (symbolic
  pattern attributes are resolved here, through `Op.resolve`).

"Does not apply" is an answer, given explicitly: a ShapeError from an
operator's shape rule, or a pattern's no (`rules_db.pattern`). Any other
exception is a bug in an operator or a rule, and it is raised as an
`EngineError` naming the operator or rule and the shapes, never read as "no
rule fires" (`ON_ERROR`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import weakref
from collections.abc import Iterable
from typing import Any

from taso.rules_db import pattern
from taso.rules_db.rule import Rule

from taso.ir import Graph, Node
from taso.ops import OPS, ShapeError

from . import _search
from .cost import CostModel

log = logging.getLogger("taso.optimizer")

# What an exception that is not an answer does in the core's questions: "raise"
# (an EngineError), or "skip": logged once per operator or rule and taken as
# "does not apply", to optimize past a broken operator (TASO_RULE_ERRORS=skip).
ON_ERROR = "skip" if os.environ.get("TASO_RULE_ERRORS", "") == "skip" else "raise"


class EngineError(RuntimeError):
    """An operator's shape rule or a rule's pattern failed with an exception
    that is not an answer (a bug): the message names the operator or rule and
    the shapes."""


# Kinds as the core knows them (optimizer/csrc/graph.h).
COMPUTE, INPUT, WEIGHT, OPAQUE, CONSTGEN = range(5)
_KIND = {"input": INPUT, "weight": WEIGHT, "opaque": OPAQUE}


def op_kind(name: str) -> int:
    if name in _KIND:
        return _KIND[name]
    return CONSTGEN if OPS[name].weight_only else COMPUTE


class _Shaped:
    """A shape posing as a tensor, for the rule schema's attribute resolution."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape


class Engine:
    """Rules compiled into a search core, with the tables the core's ids index."""

    def __init__(self, rules: Iterable[Rule], cost_model: CostModel):
        self.cost_model = cost_model
        self.type_names = sorted(OPS)
        self.type_id = {n: i for i, n in enumerate(self.type_names)}
        self.shapes: list[tuple[int, ...]] = []
        self._shape_id: dict[tuple[int, ...], int] = {}
        self.attrs: list[tuple[str, tuple]] = []
        self._attr_id: dict[tuple[str, tuple], int] = {}
        self._costs: dict[Any, float] = {}
        self._inferred: dict[tuple, tuple] = {}  # see from_core
        self._known: tuple | None = None  # see _computed_nodes
        self._skipped: set[tuple[str, str]] = set()  # failures logged (ON_ERROR "skip")
        # The core calls back through a weak reference: no cycle keeps either alive.
        me = weakref.ref(self)
        self.core = _search.Core([op_kind(n) for n in self.type_names],
                                 lambda *a: me()._infer(*a), lambda *a: me()._check(*a),
                                 lambda *a: me()._filter(*a),
                                 [OPS[n].commutative for n in self.type_names])
        self.core.byte_cost = cost_model.weight_byte_cost()
        self.rules: list[Rule] = []
        self._vars: list[list[str]] = []
        # Generated rules share source nodes (same op, operands, attributes and
        # ranks): the core asks the filter once per such class, not per rule.
        self._filter_class: dict[tuple, int] = {}
        for r in rules:
            self.add_rule(r)

    # ---- tables ----------------------------------------------------------------
    def shape_id(self, s: tuple[int, ...]) -> int:
        s = tuple(int(d) for d in s)
        i = self._shape_id.get(s)
        if i is None:
            i = self._shape_id[s] = len(self.shapes)
            self.shapes.append(s)
            self.core.add_shape_bytes(4.0 * math.prod(s))  # float32
        return i

    def attr_id(self, op: str, attrs: tuple) -> int:
        key = (op, attrs)
        i = self._attr_id.get(key)
        if i is None:
            i = self._attr_id[key] = len(self.attrs)
            self.attrs.append(key)
        return i

    def op_cost(self, op: str, attrs: dict, shapes: list[tuple[int, ...]]) -> float:
        """The cost model's answer, memoized per cost key."""
        key = OPS[op].cost_key(attrs, shapes) if op != "opaque" else \
            ("opaque", tuple(sorted(attrs.items())), tuple(shapes))
        c = self._costs.get(key)
        if c is None:
            try:
                c = float(self.cost_model.op_cost(op, attrs, shapes))
            except NotImplementedError as e:
                # A model that cannot run the operator (e.g. a measured model and
                # a helper without ONNX export): fine where it folds away, never
                # chosen where it would run.
                log.debug("no cost for %s%s: %s", op, shapes, e)
                c = float("inf")
            self._costs[key] = c
        return c

    # ---- the core's questions -----------------------------------------------------
    def _infer(self, type_id: int, attr: int, in_shapes: list[int]):
        op, attrs = self.attrs[attr]
        a = dict(attrs)
        shapes = [self.shapes[s] for s in in_shapes]
        try:
            outs = OPS[op].out_shapes(a, shapes)
        except ShapeError:
            return None  # the operator does not take these shapes
        except Exception as e:  # anything else is the shape rule's bug: named, not swallowed
            return self._failed(f"operator {op}", f"{op}{shapes} with {a}", e)
        return [self.shape_id(s) for s in outs], self.op_cost(op, a, shapes)

    def _filter(self, ri: int, p: int, attr: int, in_shapes: list[int]) -> bool:
        """Can a node with these attributes and input shapes be source node `p`
        of rule `ri`? Judged on the node alone: what refers to other tensors is
        left to `_check`."""
        rule = self.rules[ri]
        pn = rule.src[p]
        shapes = [self.shapes[s] for s in in_shapes]
        for r, s in zip(pn.inputs, shapes):
            rank = pattern.rank_of(rule, r) if isinstance(r, str) else None
            if rank is not None and len(s) != rank:
                return False
        env = {r: _Shaped(s) for r, s in zip(pn.inputs, shapes)}
        actual = dict(self.attrs[attr][1])
        try:
            return pattern.bind_attrs(pn.op, pn.attrs, actual, shapes, env, {}, alone=True)
        except ShapeError:
            return False  # the shapes make the pattern's attributes invalid
        except Exception as e:  # a bug in the rule or the operator: named, not swallowed
            self._failed(f"rule {rule.id}", f"rule {rule.id}, source node {p} ({pn.op} with "
                         f"{actual} on {shapes})", e)
            return False

    def _check(self, ri: int, attr_ids: list[int], outs: list[list[int]],
               var_shapes: list[int], var_wonly: list[int]):
        rule, names = self.rules[ri], self._vars[ri]
        env: dict[Any, _Shaped] = {}
        for v, s, w in zip(names, var_shapes, var_wonly):
            shape = self.shapes[s]
            if not pattern.var_fits(rule, v, shape, bool(w)):
                return None
            env[v] = _Shaped(shape)
        if not pattern.same_dims_hold(rule, {v: env[v].shape for v in names}):
            return None
        for i, o in enumerate(outs):
            for k, s in enumerate(o):
                env[(i, k)] = _Shaped(self.shapes[s])
        try:
            target = self._target(rule, names, attr_ids, env)
        except ShapeError:
            return None  # the target is not valid for these shapes
        except Exception as e:  # a bug in the rule or an operator: named, not swallowed
            shapes = {v: env[v].shape for v in names}
            self._failed(f"rule {rule.id}", f"rule {rule.id} at {shapes}", e)
            return None
        if target is None:
            return None
        ids, denv = target
        if any(env[s].shape != denv[d].shape for s, d in rule.outputs):
            return None
        return ids

    def _target(self, rule: Rule, names: list[str], attr_ids: list[int],
                env: dict[Any, _Shaped]) -> tuple[list[int], dict] | None:
        """Where the source's attributes bind (else None): the target side's
        attribute ids, and its tensors by reference."""
        binds: dict[str, Any] = {}
        for i, pn in enumerate(rule.src):
            actual = dict(self.attrs[attr_ids[i]][1])
            if not pattern.bind_attrs(pn.op, pn.attrs, actual,
                                      [env[r].shape for r in pn.inputs], env, binds):
                return None
        denv: dict[Any, _Shaped] = {v: env[v] for v in names}
        ids = []
        for j, pn in enumerate(rule.dst):
            op = OPS[pn.op]
            in_shapes = [denv[r].shape for r in pn.inputs]
            a = pattern.target_attrs(pn, in_shapes, denv, binds)
            for k, s in enumerate(op.out_shapes(a, in_shapes)):
                denv[(j, k)] = _Shaped(s)
            ids.append(self.attr_id(pn.op, op.make_attrs(**a)))
        return ids, denv

    def _failed(self, where: str, what: str, e: Exception) -> None:
        """An exception that is not an answer: raised as an EngineError, or with
        ON_ERROR "skip" logged once per `where` and taken as "does not apply"."""
        if ON_ERROR != "skip":
            raise EngineError(f"{what}: {type(e).__name__}: {e} (a bug in {where}; "
                              f"TASO_RULE_ERRORS=skip takes it as 'does not apply')") from e
        if (where, type(e).__name__) not in self._skipped:
            self._skipped.add((where, type(e).__name__))
            log.warning("%s: %s: %s; taken as 'does not apply' (TASO_RULE_ERRORS=skip)",
                        what, type(e).__name__, e)
        return None

    # ---- rules ------------------------------------------------------------------
    def add_rule(self, rule: Rule) -> None:
        """Compile a rule into the core; a malformed rule is a RuleError (never
        the core's to find out)."""
        rule = pattern.checked(rule)
        names = rule.variables()
        vidx = {v: i for i, v in enumerate(names)}

        def ref(r):
            return (-1 - vidx[r], 0) if isinstance(r, str) else (int(r[0]), int(r[1]))

        def side(nodes):
            return [(self.type_id[n.op], [ref(r) for r in n.inputs]) for n in nodes]

        syms = [(perm, [vidx[sigma.get(v, v)] for v in names])
                for perm, sigma in symmetries(rule)]
        # What _filter reads of a source node: its operator, operand names,
        # attribute pattern and the operands' rank constraints.
        filters = [self._filter_class.setdefault(
            (n.op, tuple(map(str, n.inputs)), repr(sorted(n.attrs.items())),
             tuple(rule.vars.get(r, {}).get("rank") if isinstance(r, str) else None
                   for r in n.inputs)), len(self._filter_class)) for n in rule.src]
        self.core.add_rule(len(names), side(rule.src), side(rule.dst),
                           [(ref(s), ref(d)) for s, d in rule.outputs], syms, filters)
        self.rules.append(rule)
        self._vars.append(names)

    # ---- graphs -------------------------------------------------------------------
    def _computed_nodes(self, g: Graph) -> dict[tuple, tuple[int, tuple]]:
        """`_node_key` -> (node id, inputs) of g's computed nodes; kept for the
        last graph asked about, which the joined pass asks about per candidate."""
        if self._known is None or self._known[0] is not g or self._known[1] != len(g.nodes):
            index = {_node_key((n.op, n.attrs), list(n.inputs)): (n.id, tuple(n.inputs))
                     for n in g.nodes.values() if n.op not in ("input", "weight", "opaque")}
            self._known = (g, len(g.nodes), index)
        return self._known[2]

    def to_core(self, g: Graph, pinned: Iterable[int] = ()):
        """The core's copy of `g`. Sources and opaque nodes carry their node id
        (+1) as identity, so no two are ever merged. `pinned`: ids of the weights
        that the rest of the model reads too (`g` is a piece of it); the core
        counts their bytes whatever `g`'s rewrites do (see `Core.rank`)."""
        self.core.set_pinned([p + 1 for p in pinned])
        nodes, index = [], {}
        for n in g.topo_order():
            salt = n.id + 1 if op_kind(n.op) in (INPUT, WEIGHT, OPAQUE) else 0
            nodes.append((self.type_id[n.op], self.attr_id(n.op, n.attrs), salt,
                          [(index[p], i) for p, i in n.inputs]))
            index[n.id] = len(nodes) - 1
        return self.core.build(nodes, [(index[p], i) for p, i in g.outputs])

    def from_core(self, cg, original: Graph) -> Graph:
        """A taso Graph for the core graph `cg`, whose sources are `original`'s.
        Every graph input is kept, in the original order, used or not. A node
        that `original` has (the same operator, attributes and inputs) keeps
        its operands in `original`'s order: the core orders a commutative
        node's operands its own way, and an add is priced as part of its
        first operand's fused chain (`fusable_chains`), so a rewrite would
        otherwise move adds between chains all over the graph."""
        g = Graph()
        by_salt = {n.id + 1: n for n in original.nodes.values()
                   if op_kind(n.op) in (INPUT, WEIGHT, OPAQUE)}
        index = self._computed_nodes(original)
        copied: dict[int, int] = {}
        for n in original.inputs:
            copied[n.id] = _copy_source(g, n, [])
        ids: list[int] = []
        was: list[int | None] = []  # per core node: the node of `original` it is
        for _type, a, salt, ins in cg.nodes:
            refs = [(ids[p], i) for p, i in ins]
            if salt:
                src = by_salt[salt]
                nid = copied[src.id] if src.id in copied else \
                    _copy_source(g, src, [g.tensor(r) for r in refs])
                ids.append(nid)
                was.append(src.id)
                continue
            old = [(was[p], i) for p, i in ins]
            hit = None if any(w is None for w, _ in old) else \
                index.get(_node_key(self.attrs[a], old))
            was.append(None if hit is None else hit[0])
            if hit is not None and list(hit[1]) != old:
                refs.reverse()  # a commutative pair, read in the original's order
            # Most nodes are the same from one candidate to the next: what
            # add_node infers for an attribute id and input shapes is kept.
            key = (a, tuple((g.nodes[p].shapes[i], g.nodes[p].dtypes[i]) for p, i in refs))
            known = self._inferred.get(key)
            if known is None:
                op, attrs = self.attrs[a]
                n = g.nodes[g.add_node(op, [g.tensor(r) for r in refs], **dict(attrs))[0].node]
                self._inferred[key] = (n.op, n.attrs, n.shapes, n.dtypes)
                ids.append(n.id)
            else:
                op, attrs, shapes, dtypes = known
                ids.append(g.append_inferred(op, attrs, refs, shapes, dtypes))
        for (p, i), name in zip(cg.outputs, original.output_names):
            g.mark_output(g.tensor((ids[p], i)), name)
        return g


def _node_key(op_attrs: tuple[str, tuple], inputs: list[tuple[int, int]]) -> tuple:
    """What identifies a computed node: its operator, attributes and inputs, in
    either order where its two operands commute."""
    op = op_attrs[0]
    ins = tuple(sorted(inputs)) if op in OPS and OPS[op].commutative and len(inputs) == 2 \
        else tuple(inputs)
    return op_attrs, ins


def symmetries(rule: Rule) -> list[tuple[list[int], dict[str, str]]]:
    """Permutations of the source nodes that, with a renaming of variables,
    leave the source pattern, its constraints and its mapped outputs unchanged
    (two convs sharing an input; two dense layers sharing one): a match and its
    image then rewrite to mirror images, and the search needs one of them."""
    src = rule.src
    ops = [n.op for n in src]
    if len(set(ops)) == len(ops):  # a node can only map to one of its own operator
        return []
    if len(src) > 5 or any(pattern.reads_dims(n.attrs) for n in src):
        return []
    mapped = {tuple(s) for s, _ in rule.outputs}
    out = []
    for perm in itertools.permutations(range(len(src))):
        if list(perm) == list(range(len(src))):
            continue
        sigma = _renaming(src, perm)
        if sigma is None or sorted(sigma.values()) != sorted(sigma):
            continue
        if any(_renamed(rule.vars.get(v, {}), sigma) != rule.vars.get(w, {})
               for v, w in sigma.items()):
            continue
        if {(perm[p], k) for p, k in mapped} != mapped:
            continue
        out.append((list(perm), sigma))
    return out


def _renamed(constraints: dict, sigma: dict[str, str]) -> dict:
    """A variable's constraints with the variables they name renamed by sigma."""
    if "same_dim" not in constraints:
        return constraints
    return {**constraints,
            "same_dim": [[a, sigma.get(u, u), b] for a, u, b in constraints["same_dim"]]}


def _renaming(src, perm) -> dict[str, str] | None:
    """The variable renaming under which node i's image is node perm[i], if any."""
    sigma: dict[str, str] = {}
    for i, node in enumerate(src):
        img = src[perm[i]]
        if img.op != node.op or img.attrs != node.attrs or len(img.inputs) != len(node.inputs):
            return None
        for x, y in zip(node.inputs, img.inputs):
            if isinstance(x, str) and isinstance(y, str):
                if sigma.setdefault(x, y) != y:
                    return None
            elif isinstance(x, str) or isinstance(y, str) or (perm[x[0]], x[1]) != tuple(y):
                return None
    return sigma


def _copy_source(g: Graph, n: Node, inputs) -> int:
    return g.add_node(n.op, inputs, name=n.name, data=n.data, **dict(n.attrs))[0].node
