"""Canonical form of a rule: equal for two rules exactly when they are the same
up to renaming variables, reordering nodes and (optionally) swapping sides.

Each node is named by a structural hash of its operator, its attributes (with
defaults filled in, so a missing key equals its default) and its inputs (a
`taso.stablehash`, the same in every process, so that keys computed by
different workers compare);
variables are leaves. Variables are first told apart by a renaming-invariant
signature (how they are used); only variables that tie are permuted, and the
smallest key over those permutations is the canonical one. Variable constraints
(rank, weight) are not part of the form: a rule found over matrices and over 4-D
tensors is one rule.
"""

from __future__ import annotations

from itertools import permutations, product
from typing import Any

from taso.ops import OPS
from taso.stablehash import stable_hash

from .rule import Rule

Key = tuple


def _norm_attrs(op: str, attrs: dict[str, Any]) -> tuple:
    defaults = OPS[op].attrs if op in OPS else {}
    keys = list(defaults) + sorted(k for k in attrs if k not in defaults)
    return tuple((k, _freeze(attrs.get(k, defaults.get(k)))) for k in keys)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict) and "dim" in v:
        ref, axis = v["dim"]
        return ("<dim>", _ref(ref), int(axis))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(u) for u in v)
    return v


def _ref(r: Any) -> Any:
    return r if isinstance(r, str) else (int(r[0]), int(r[1]))


class _Side:
    """One side in a form ready for hashing: node i is (op, attrs, inputs)."""

    def __init__(self, nodes: list[tuple[str, tuple, tuple]]):
        self.nodes = nodes

    def hashes(self, leaf: dict[str, Any]) -> list[int]:
        """Structural hash of each node, variables hashed as `leaf[name]`."""
        h: list[int] = []

        def ref(r):
            return leaf[r] if isinstance(r, str) else stable_hash((h[r[0]], r[1]))

        def attr(v):
            if isinstance(v, tuple) and v[:1] == ("<dim>",):
                return ("<dim>", ref(v[1]), v[2])
            if isinstance(v, tuple):
                return tuple(attr(u) for u in v)
            return v

        for op, attrs, ins in self.nodes:
            h.append(stable_hash((op, tuple((k, attr(v)) for k, v in attrs),
                                  tuple(ref(r) for r in ins))))
        return h

    def out_hash(self, h: list[int], leaf: dict[str, Any], r: Any) -> int:
        return leaf[r] if isinstance(r, str) else stable_hash((h[r[0]], r[1]))


def _sides(rule: Rule) -> tuple[_Side, _Side]:
    def side(nodes):
        return _Side([(n.op, _norm_attrs(n.op, n.attrs), tuple(_ref(r) for r in n.inputs))
                      for n in nodes])
    return side(rule.src), side(rule.dst)


def _key(src: _Side, dst: _Side, outputs: list, leaf: dict[str, Any]) -> Key:
    hs, hd = src.hashes(leaf), dst.hashes(leaf)
    outs = sorted((src.out_hash(hs, leaf, s), dst.out_hash(hd, leaf, d)) for s, d in outputs)
    return (tuple(sorted(hs)), tuple(sorted(hd)), tuple(outs))


def _variables(src: _Side, dst: _Side, outputs: list) -> list[str]:
    seen: list[str] = []
    for side in (src, dst):
        for _, _attrs, ins in side.nodes:
            for r in ins:
                if isinstance(r, str) and r not in seen:
                    seen.append(r)
    for s, d in outputs:
        for r in (s, d):
            if isinstance(r, str) and r not in seen:
                seen.append(r)
    return seen


def _oriented(src: _Side, dst: _Side, outputs: list) -> tuple[Key, list[str]]:
    names = _variables(src, dst, outputs)
    # Renaming-invariant signature: the (variable-blind) hashes of the nodes that
    # read each variable, at which input position, on which side; and where it is
    # an output.
    blind = {v: "<v>" for v in names}
    sig: dict[str, list] = {v: [] for v in names}
    for side_id, side in enumerate((src, dst)):
        h = side.hashes(blind)
        for i, (_, _, ins) in enumerate(side.nodes):
            for pos, r in enumerate(ins):
                if isinstance(r, str):
                    sig[r].append((side_id, h[i], pos))
    for _k, (s, d) in enumerate(sorted(outputs, key=repr)):
        for side_id, r in ((0, s), (1, d)):
            if isinstance(r, str):
                sig[r].append((side_id, "out"))
    sigs = {v: stable_hash(tuple(sorted(sig[v], key=repr))) for v in names}
    groups: dict[int, list[str]] = {}
    for v in names:
        groups.setdefault(sigs[v], []).append(v)
    ordered = [groups[s] for s in sorted(groups)]
    best: tuple[Key, list[str]] | None = None
    for choice in product(*(permutations(g) for g in ordered)):
        order = [v for g in choice for v in g]
        leaf = {v: ("<var>", i) for i, v in enumerate(order)}
        key = _key(src, dst, outputs, leaf)
        if best is None or key < best[0]:
            best = (key, order)
    assert best is not None or not names
    if best is None:
        return _key(src, dst, outputs, {}), []
    return best


def canonical(rule: Rule, either_direction: bool = True) -> tuple[Key, list[str], bool]:
    """(key, variables in canonical order, whether the key reads the rule reversed).
    Two rules have equal keys iff they are equal up to variable renaming and node
    order (and, with `either_direction`, up to swapping source and target)."""
    src, dst = _sides(rule)
    outs = [(_ref(s), _ref(d)) for s, d in rule.outputs]
    fwd = _oriented(src, dst, outs)
    if not either_direction:
        return fwd[0], fwd[1], False
    rev = _oriented(dst, src, [(d, s) for s, d in outs])
    return (rev[0], rev[1], True) if rev[0] < fwd[0] else (fwd[0], fwd[1], False)


def canonical_key(rule: Rule, either_direction: bool = True) -> Key:
    return canonical(rule, either_direction)[0]


def side_key(nodes: list, outputs: list) -> Key:
    """Canonical form of one side with its variables named as they are (no
    renaming): node order does not matter, the order of `outputs` does."""
    side = _Side([(n.op, _norm_attrs(n.op, n.attrs), tuple(_ref(r) for r in n.inputs))
                  for n in nodes])
    leaf = _Leaves()
    h = side.hashes(leaf)
    return (tuple(sorted(h)), tuple(side.out_hash(h, leaf, _ref(r)) for r in outputs))


class _Leaves(dict):
    """Variables hashed by their own names."""

    def __missing__(self, name: str) -> Any:
        return ("<var>", name)
