"""How much of a reference rule set a candidate set rediscovers.

A reference rule is found when a candidate rule equals it up to variable
renaming, node order and direction (`canonical`), or when it is composed of
candidate rules: rewriting its source with candidate rules (either direction,
a few steps) reaches its target. `coverage_report` says which candidate rules
each found rule is made of.

A refuted candidate finds nothing, and a direct match must ask no more of the
variables' sizes than the reference does (its `same_dim` constraints, in
canonical names, among the reference's): a generated rule refuted for lack of
TASO's constraint is not TASO's rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from taso.ops import OPS, ShapeError

from .canonical import _norm_attrs, canonical
from .pattern import checked, same_dims_hold, var_fits
from .rule import PNode, Rule, RuleSet

# A host graph: nodes (id, op, attrs, inputs) in topological order, and its outputs.
HNode = tuple[int, str, tuple, tuple]


@dataclass
class CoverageReport:
    total: int
    direct: dict[str, str] = field(default_factory=dict)  # reference id -> candidate id
    composed: dict[str, list[str]] = field(default_factory=dict)  # id -> candidate ids
    missing: list[str] = field(default_factory=list)

    @property
    def found(self) -> int:
        return len(self.direct) + len(self.composed)


def coverage(candidate: RuleSet | Iterable[Rule], reference: RuleSet | Iterable[Rule],
             depth: int = 2) -> tuple[int, int, list[str]]:
    """(found, total, ids of the reference rules not found)."""
    r = coverage_report(candidate, reference, depth)
    return r.found, r.total, r.missing


def coverage_report(candidate: RuleSet | Iterable[Rule], reference: RuleSet | Iterable[Rule],
                    depth: int = 2) -> CoverageReport:
    cands = [c for c in candidate if c.status != "refuted"]
    refs = list(reference)
    keys: dict[Any, list[tuple[str, frozenset]]] = {}
    for c in cands:
        k, order, _ = canonical(c)
        keys.setdefault(k, []).append((c.id, _equalities(c, order)))
    rep = CoverageReport(len(refs))
    rewriter = _Rewriter(cands)
    for r in refs:
        k, order, _ = canonical(r)
        asked = _equalities(r, order)
        match = next((cid for cid, eqs in keys.get(k, ()) if eqs <= asked), None)
        if match is not None:
            rep.direct[r.id] = match
            continue
        path = rewriter.connect(r, depth)
        if path is None:
            rep.missing.append(r.id)
        else:
            rep.composed[r.id] = path
    return rep


def _equalities(rule: Rule, order: list[str]) -> frozenset:
    """A rule's same_dim constraints with its variables named by their place
    in `order` (canonical), each equality in one orientation."""
    at = {v: i for i, v in enumerate(order)}
    return frozenset(tuple(sorted([(at[v], a), (at[u], b)]))
                     for v, a, u, b in checked(rule).same_dims())


# ---- a small rewriter over rule sides ---------------------------------------------
class _Host:
    """One side of a rule as a graph whose leaves are the rule's variables."""

    def __init__(self, nodes: list[HNode], outputs: list[Any], var_shapes: dict[str, tuple],
                 weights: frozenset[str] = frozenset()):
        self.nodes = nodes
        self.outputs = outputs
        self.var_shapes = var_shapes
        self.weights = weights  # host variables that are weights
        self.shapes = _shapes(nodes, var_shapes)

    def key(self) -> tuple:
        """Node-order-free form with the variables' own names."""
        h: dict[int, int] = {}

        def ref(r):
            return ("v", r) if isinstance(r, str) else hash((h[r[0]], r[1]))

        def attr(v):
            if isinstance(v, tuple) and v[:1] == ("<dim>",):
                return ("<dim>", ref(v[1]), v[2])
            return tuple(attr(u) for u in v) if isinstance(v, tuple) else v

        for nid, op, attrs, ins in self.nodes:
            h[nid] = hash((op, tuple((k, attr(v)) for k, v in attrs),
                           tuple(ref(r) for r in ins)))
        return tuple(sorted(h.values())), tuple(ref(r) for r in self.outputs)


def _host(nodes: list[PNode], outputs: list[Any], var_shapes: dict[str, tuple],
          weights: frozenset[str] = frozenset()) -> _Host:
    def ref(r):
        return r if isinstance(r, str) else (int(r[0]), int(r[1]))

    def attr(v):
        if isinstance(v, tuple) and v[:1] == ("<dim>",):
            return ("<dim>", ref(v[1]), v[2])
        return tuple(attr(u) for u in v) if isinstance(v, tuple) else v

    hn = [(i, n.op, tuple((k, attr(v)) for k, v in _norm_attrs(n.op, n.attrs)),
           tuple(ref(r) for r in n.inputs)) for i, n in enumerate(nodes)]
    return _Host(hn, [ref(r) for r in outputs], var_shapes, weights)


def _resolve(v: Any, shapes: dict[Any, tuple]) -> Any:
    if isinstance(v, tuple) and v[:1] == ("<dim>",):
        return shapes[v[1]][v[2]]
    return tuple(_resolve(u, shapes) for u in v) if isinstance(v, tuple) else v


def _shapes(nodes: list[HNode], var_shapes: dict[str, tuple]) -> dict[Any, tuple] | None:
    """Every tensor's shape, or None when the side does not type-check."""
    shapes: dict[Any, tuple] = dict(var_shapes)
    try:
        for nid, op, attrs, ins in nodes:
            a = {k: _resolve(v, shapes) for k, v in attrs}
            for o, s in enumerate(OPS[op].out_shapes(a, [shapes[r] for r in ins])):
                shapes[(nid, o)] = s
    except (ShapeError, KeyError, TypeError, IndexError):
        return None
    return shapes


_GUESS = {0: (), 2: (3, 3), 4: (2, 2, 3, 3)}


def _var_shapes(rule: Rule) -> dict[str, tuple] | None:
    """Shapes for the rule's variables under which both sides type-check: the
    declared rank where there is one, else the first guess that works."""
    names = rule.variables()
    free = [v for v in names if rule.vars.get(v, {}).get("rank") is None]
    for guess in _GUESS.values():
        shapes = {v: _GUESS.get(rule.vars.get(v, {}).get("rank"), guess) for v in names}
        ok = all(_shapes(_host(side, [], shapes).nodes, shapes) is not None
                 for side in (rule.src, rule.dst))
        if ok:
            return shapes
        if not free:
            break
    return None


class _Pattern:
    """One direction of a candidate rule, ready to match."""

    def __init__(self, rule: Rule, reverse: bool):
        self.rule = rule = checked(rule)
        src, dst = (rule.dst, rule.src) if reverse else (rule.src, rule.dst)
        outs = [(d, s) for s, d in rule.outputs] if reverse else list(rule.outputs)
        self.lhs = _host(src, [s for s, _ in outs], {}).nodes
        self.rhs = _host(dst, [d for _, d in outs], {}).nodes
        self.outs = [(_r(s), _r(d)) for s, d in outs]
        self.ops = sorted(n[1] for n in self.lhs)


def _r(r):
    return r if isinstance(r, str) else (int(r[0]), int(r[1]))


class _Rewriter:
    def __init__(self, rules: list[Rule]):
        self.patterns = [_Pattern(r, rev) for r in rules for rev in (False, True)
                         if (r.dst if rev else r.src)]

    def connect(self, ref: Rule, depth: int) -> list[str] | None:
        """Candidate rule ids whose applications turn ref's source into its target."""
        ref = checked(ref)
        shapes = _var_shapes(ref)
        if shapes is None:
            return None
        weights = frozenset(v for v, c in ref.vars.items() if c.get("weight"))
        src = _host(ref.src, [s for s, _ in ref.outputs], shapes, weights)
        dst = _host(ref.dst, [d for _, d in ref.outputs], shapes, weights)
        goal = dst.key()
        fwd: dict[tuple, tuple[_Host, list[str]]] = {src.key(): (src, [])}
        bwd: dict[tuple, tuple[_Host, list[str]]] = {goal: (dst, [])}
        for step in range(depth):
            grow, other = (fwd, bwd) if step % 2 == 0 else (bwd, fwd)
            for _, (h, path) in list(grow.items()):
                for p in self.patterns:
                    for h2 in self._apply_all(p, h):
                        k = h2.key()
                        if k in grow:
                            continue
                        grow[k] = (h2, path + [p.rule.id])
                        if k in other:
                            a, b = (grow[k][1], other[k][1]) if grow is fwd else \
                                (other[k][1], grow[k][1])
                            return a + b[::-1]
        return None

    def _apply_all(self, p: _Pattern, h: _Host) -> list[_Host]:
        host_ops = sorted(n[1] for n in h.nodes)
        if not _sub_multiset(p.ops, host_ops) or h.shapes is None:
            return []
        out = []
        for binding, nodemap in _matches(p, h):
            shapes = {v: h.shapes[r] for v, r in binding.items() if not v.startswith("?")}
            if not same_dims_hold(p.rule, shapes):
                continue
            g = _rewrite(p, h, binding, nodemap)
            if g is not None and g.shapes is not None:
                out.append(g)
        return out


def _sub_multiset(a: list[str], b: list[str]) -> bool:
    b = list(b)
    for x in a:
        if x not in b:
            return False
        b.remove(x)
    return True


def _matches(p: _Pattern, h: _Host):
    """Bindings of the pattern's variables and nodes to the host's tensors and nodes."""
    lhs = p.lhs

    def attr_ok(pv, hv, binding, nodemap) -> bool:
        if isinstance(pv, str) and pv.startswith("?"):
            return binding.setdefault(pv, hv) == hv
        if isinstance(pv, tuple) and pv[:1] == ("<dim>",):
            return isinstance(hv, tuple) and hv[:1] == ("<dim>",) and hv[2] == pv[2] and \
                _map(pv[1], binding, nodemap) == hv[1]
        if isinstance(pv, tuple) and isinstance(hv, tuple) and len(pv) == len(hv):
            return all(attr_ok(a, b, binding, nodemap) for a, b in zip(pv, hv))
        return pv == hv

    def go(i, binding, nodemap):
        if i == len(lhs):
            yield dict(binding), dict(nodemap)
            return
        pid, op, attrs, ins = lhs[i]
        for hid, hop, hattrs, hins in h.nodes:
            if hop != op or hid in nodemap.values() or len(hins) != len(ins):
                continue
            b, m = dict(binding), dict(nodemap)
            m[pid] = hid
            ok = True
            for pr, hr in zip(ins, hins):
                if isinstance(pr, str):
                    if b.setdefault(pr, hr) != hr or not _rank_ok(p, pr, hr, h):
                        ok = False
                        break
                elif isinstance(hr, str) or (m.get(pr[0]), pr[1]) != hr:
                    ok = False
                    break
            if ok and all(attr_ok(pv, hv, b, m) for (_, pv), (_, hv) in zip(attrs, hattrs)):
                yield from go(i + 1, b, m)

    yield from go(0, {}, {})


def _rank_ok(p: _Pattern, var: str, hr: Any, h: _Host) -> bool:
    """A variable's own constraints, as the optimizer reads them (a host tensor
    counts as a weight where the reference rule declares it one)."""
    if h.shapes is None:
        return True
    return var_fits(p.rule, var, h.shapes[hr], isinstance(hr, str) and hr in h.weights)


def _map(r: Any, binding: dict, nodemap: dict) -> Any:
    return binding.get(r) if isinstance(r, str) else (nodemap.get(r[0]), r[1])


def _rewrite(p: _Pattern, h: _Host, binding: dict, nodemap: dict) -> _Host | None:
    matched = set(nodemap.values())
    exposed = {_map(s, binding, nodemap) for s, _ in p.outs}
    # Inner tensors of the match must not be read outside it.
    for nid, _, _attrs, ins in h.nodes:
        if nid in matched:
            continue
        for r in ins:
            if not isinstance(r, str) and r[0] in matched and r not in exposed:
                return None
    for r in h.outputs:
        if not isinstance(r, str) and r[0] in matched and r not in exposed:
            return None
    next_id = max([n[0] for n in h.nodes], default=-1) + 1
    new: dict[int, int] = {}
    env = dict(binding)
    added: list[HNode] = []

    def sub(v):
        if isinstance(v, str) and v.startswith("?"):
            return binding[v]
        if isinstance(v, tuple) and v[:1] == ("<dim>",):
            return ("<dim>", rref(v[1]), v[2])
        return tuple(sub(u) for u in v) if isinstance(v, tuple) else v

    def rref(r):
        return env[r] if isinstance(r, str) else (new[r[0]], r[1])

    for pid, op, attrs, ins in p.rhs:
        new[pid] = next_id
        next_id += 1
        added.append((new[pid], op, tuple((k, sub(v)) for k, v in attrs),
                      tuple(rref(r) for r in ins)))
    redirect = {_map(s, binding, nodemap): rref(d) for s, d in p.outs}

    def red(r):
        return redirect.get(r, r)

    def red_attr(v):
        if isinstance(v, tuple) and v[:1] == ("<dim>",):
            return ("<dim>", red(v[1]), v[2])
        return tuple(red_attr(u) for u in v) if isinstance(v, tuple) else v

    kept = [(nid, op, tuple((k, red_attr(v)) for k, v in attrs), tuple(red(r) for r in ins))
            for nid, op, attrs, ins in h.nodes if nid not in matched]
    nodes = _normalize(added + kept, [red(r) for r in h.outputs])
    if nodes is None:
        return None
    nodes, outputs = nodes
    return _Host(nodes, outputs, h.var_shapes, h.weights)


def _normalize(nodes: list[HNode], outputs: list[Any]):
    """Topological order, live nodes only, identical nodes merged."""
    by_id = {n[0]: n for n in nodes}
    order: list[int] = []
    state: dict[int, int] = {}

    def deps(n):
        out = [r[0] for r in n[3] if not isinstance(r, str)]

        def walk(v):
            if isinstance(v, tuple) and v[:1] == ("<dim>",):
                if not isinstance(v[1], str):
                    out.append(v[1][0])
            elif isinstance(v, tuple):
                for u in v:
                    walk(u)
        for _, v in n[2]:
            walk(v)
        return out

    def visit(nid) -> bool:
        if state.get(nid) == 2:
            return True
        if state.get(nid) == 1 or nid not in by_id:
            return False  # a cycle, or a reference to a removed node
        state[nid] = 1
        if not all(visit(d) for d in deps(by_id[nid])):
            return False
        state[nid] = 2
        order.append(nid)
        return True

    for r in outputs:
        if not isinstance(r, str) and not visit(r[0]):
            return None
    seen: dict[tuple, int] = {}
    alias: dict[int, int] = {}
    result: list[HNode] = []

    def al(r):
        return r if isinstance(r, str) else (alias.get(r[0], r[0]), r[1])

    def al_attr(v):
        if isinstance(v, tuple) and v[:1] == ("<dim>",):
            return ("<dim>", al(v[1]), v[2])
        return tuple(al_attr(u) for u in v) if isinstance(v, tuple) else v

    for nid in order:
        _, op, attrs, ins = by_id[nid]
        key = (op, tuple((k, al_attr(v)) for k, v in attrs), tuple(al(r) for r in ins))
        if key in seen:
            alias[nid] = seen[key]
            continue
        seen[key] = nid
        result.append((nid, *key))
    return result, [al(r) for r in outputs]
