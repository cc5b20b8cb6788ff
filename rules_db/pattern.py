"""What a rule pattern means: the one definition that the optimizer's matcher,
the search core's inputs, the Z3 encoder, the refuter and coverage all read.

`rule.py` holds a rule as data; this module gives it its meaning:

- `checked` (and `parse.parse_rule`, for JSON): a rule is well-formed when every operator is known
  and given as many inputs as it takes, every reference names an existing
  output of an earlier node of its side, every variable and attribute variable
  the target reads is bound by the source, constraints name the rule's own
  variables, at least one output is mapped and its tags are known (`TAGS`).
  Anything else is a `RuleError` naming the rule and the problem.
- Axes are normalised once, here: a negative axis (in a `same_dim` constraint,
  a `{"dim": [ref, axis]}` size or an operator's axis attribute) counts from the
  end of a tensor whose rank the rule declares, and becomes non-negative; where
  the rank is unknown it is refused. Graphs hold their axes non-negative too
  (`Op.normalize` at `Graph.add_node`), so an axis variable "?a" is only ever
  bound to 0 .. rank-1, which is what the proof assumes (`axis_variables`).
- Constraints (`var_fits`, `same_dims_hold`), attribute binding against a
  node (`bind_attrs`), the target's concrete attributes (`target_attrs`) and
  instantiation of a side as a graph (`instantiate`) are in `binding.py`, part
  of this definition and re-exported here. Whether a rule applies is answered,
  never raised: False, or a ShapeError where the shapes at hand make a size or
  an operator invalid; any other exception is a bug.

Attribute values in patterns are concrete, or symbolic:
  "?name"                  an attribute variable, bound where the source matches
                           and reused on the target side;
  {"dim": [ref, axis]}     the size of a tensor's axis on the same side;
  "same" / "valid"         padding modes, resolved by the operator (conv, pool).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from taso.ops import OPS, ShapeError
from taso.ops.base import freeze

from .binding import (  # noqa: F401  (part of what a pattern means, named here too)
    attr_value,
    bind,
    bind_attrs,
    instantiate,
    reads_dims,
    ref_name,
    source_attrs,
    target_attrs,
)
from .rule import PNode, Ref, Rule

CONSTRAINTS = ("rank", "weight", "same_dim")
# A rule's roles in the search beyond being searched with (the search reads
# them from the rules it is given). A proof does not cover them: they say where
# a proved rule is tried, not what it means.
TAGS = {
    # Also tried on the joined graph, one match at a time: its matches lie in
    # different pieces (a recurrent layer's steps).
    "across_pieces": "its matches span the pieces of a partitioned graph",
    # Also tried on the joined graph where the device fuses: its gain shows in
    # a fusion-aware cost only (a sum of node costs sees the nodes it adds).
    "fused_gain": "its gain shows only in a cost that knows what the device fuses",
}
MAX_RANK = 8
_SOURCES = ("input", "weight", "opaque")  # graph nodes, never pattern nodes


class RuleError(ValueError):
    """A rule that is not well-formed: the message names the rule and the problem."""

    def __init__(self, rule_id: Any, problem: str):
        self.rule_id, self.problem = rule_id, problem
        super().__init__(f"rule {rule_id}: {problem}")


# ---- well-formedness and normalisation ------------------------------------------------
def checked(rule: Rule) -> Rule:
    """`rule` if it is well-formed with normalised axes, else a normalised copy;
    a RuleError names what is wrong."""
    rid = rule.id
    if not rule.src:
        raise RuleError(rid, "the source side is empty")
    if not rule.outputs:
        raise RuleError(rid, "no output is mapped (a rule must say what it replaces)")
    ranks = _declared_ranks(rule)
    bound = {r for n in rule.src for r in n.inputs if isinstance(r, str)}
    src_outs = _check_side(rule, "src", rule.src, bound)
    dst_outs = _check_side(rule, "dst", rule.dst, bound)
    src_ivars = _attr_vars(rule.src)
    missing = sorted(_attr_vars(rule.dst) - src_ivars)
    if missing:
        raise RuleError(rid, f"the target uses attribute variable(s) "
                        f"{', '.join('?' + m for m in missing)} that the source does not bind")
    seen: set[Any] = set()
    for s, d in rule.outputs:
        if isinstance(s, str):
            raise RuleError(rid, f"source output {s!r} is a variable, not a node's output")
        if tuple(s) not in src_outs:
            raise RuleError(rid, f"source output {list(s)} names no output of the source")
        if tuple(s) in seen:
            raise RuleError(rid, f"source output {list(s)} is mapped twice")
        seen.add(tuple(s))
        if isinstance(d, str):
            if d not in bound:
                raise RuleError(rid, f"target output {d!r} is a variable the source does "
                                "not bind")
        elif tuple(d) not in dst_outs:
            raise RuleError(rid, f"target output {list(d)} names no output of the target")
    _check_tags(rule)
    variables = bound
    new_vars = {}
    for v, c in rule.vars.items():
        if v not in variables:
            raise RuleError(rid, f"constraints name {v!r}, which is not a variable of the rule")
        new_vars[v] = _check_constraints(rule, v, c, ranks, variables)
    src = [_normalized_node(rule, n, ranks) for n in rule.src]
    dst = [_normalized_node(rule, n, ranks) for n in rule.dst]
    if src == rule.src and dst == rule.dst and new_vars == rule.vars:
        return rule
    return replace(rule, src=src, dst=dst, vars=new_vars)


def _check_tags(rule: Rule) -> None:
    if not isinstance(rule.tags, (list, tuple)):
        raise RuleError(rule.id, f"tags must be a list of names, got {rule.tags!r}")
    for t in rule.tags:
        if t not in TAGS:
            raise RuleError(rule.id, f"unknown tag {t!r} (known: {', '.join(sorted(TAGS))})")
    if len(set(rule.tags)) != len(rule.tags):
        raise RuleError(rule.id, f"a tag is given twice: {list(rule.tags)}")


def _declared_ranks(rule: Rule) -> dict[str, int]:
    out = {}
    for v, c in rule.vars.items():
        r = c.get("rank") if isinstance(c, dict) else None
        if r is not None:
            if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r <= MAX_RANK:
                raise RuleError(rule.id, f"rank of {v!r} must be an integer 0..{MAX_RANK} or "
                                f"null, got {r!r}")
            out[v] = r
    return out


def _attr_vars(nodes: list[PNode]) -> set[str]:
    out: set[str] = set()

    def visit(v):
        if isinstance(v, str) and v.startswith("?"):
            out.add(v[1:])
        elif isinstance(v, (list, tuple)):
            for u in v:
                visit(u)
    for n in nodes:
        for v in n.attrs.values():
            visit(v)
    return out


def _check_side(rule: Rule, side: str, nodes: list[PNode],
                bound: set[str]) -> set[tuple[int, int]]:
    """The (node, output) pairs a side defines; errors for anything malformed.
    `bound`: the variables the source's inputs bind (all a side may read, but
    the source's own inputs)."""
    rid = rule.id
    outs: set[tuple[int, int]] = set()

    def check_ref(r: Any, i: int, what: str) -> None:
        if isinstance(r, str):
            if r not in bound and (side == "dst" or what != "input"):
                where = "the target" if side == "dst" else "a source size"
                raise RuleError(rid, f"{where} reads variable {r!r}, which the source's "
                                "inputs do not bind")
            return
        if not (isinstance(r, tuple) and len(r) == 2):
            raise RuleError(rid, f"{side} node {i}: {what} {r!r} is not a reference")
        if not 0 <= r[0] < i:
            raise RuleError(rid, f"{side} node {i}: {what} {list(r)} names no earlier node")
        if r not in outs:
            raise RuleError(rid, f"{side} node {i}: {what} {list(r)}: node {r[0]} has no "
                            f"output {r[1]}")

    for i, n in enumerate(nodes):
        op = OPS.get(n.op)
        if op is None:
            raise RuleError(rid, f"{side} node {i}: unknown operator {n.op!r}")
        if n.op in _SOURCES:
            raise RuleError(rid, f"{side} node {i}: {n.op!r} cannot be a pattern node")
        try:
            op.check_arity(len(n.inputs))
        except ShapeError as e:
            raise RuleError(rid, f"{side} node {i}: {e}") from None
        unknown = sorted(set(n.attrs) - set(op.attrs))
        if unknown:
            raise RuleError(rid, f"{side} node {i}: {n.op} has no attribute(s) {unknown}")
        if side == "dst":
            absent = [k for k, d in op.attrs.items() if d is None and k not in n.attrs]
            if absent:
                raise RuleError(rid, f"target node {i}: {n.op} needs attribute(s) {absent}")
        for r in n.inputs:
            check_ref(r, i, "input")
        for k, v in n.attrs.items():
            _check_value(rule, side, i, k, v, check_ref)
        try:
            count = op.num_outputs(_probe(n.attrs))
        except (TypeError, ValueError, KeyError):
            count = None
        if not isinstance(count, int) or count < 1:
            raise RuleError(rid, f"{side} node {i}: cannot tell how many outputs {n.op} "
                            f"has with {n.attrs}")
        outs.update((i, k) for k in range(count))
    return outs


def _check_value(rule: Rule, side: str, i: int, key: str, v: Any, check_ref) -> None:
    if isinstance(v, dict):
        if set(v) != {"dim"} or not isinstance(v["dim"], (list, tuple)) or len(v["dim"]) != 2:
            raise RuleError(rule.id, f"{side} node {i}: attribute {key} {v!r} is not "
                            '{"dim": [reference, axis]}')
        ref, axis = v["dim"]
        check_ref(ref, i, "size reference")
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise RuleError(rule.id, f"{side} node {i}: the axis of {v!r} is not an integer")
    elif isinstance(v, (list, tuple)):
        for u in v:
            _check_value(rule, side, i, key, u, check_ref)
    elif isinstance(v, str) and v.startswith("?") and not v[1:].isidentifier():
        raise RuleError(rule.id, f"{side} node {i}: {v!r} is not an attribute variable name")
    elif v is not None and not isinstance(v, (bool, int, float, str)):
        raise RuleError(rule.id, f"{side} node {i}: attribute {key} has a value of type "
                        f"{type(v).__name__}")


def _probe(attrs: dict) -> dict:
    """Attributes good enough to ask an operator its number of outputs: a split
    counts its sizes, whatever they are."""
    return {k: (0 if isinstance(v, dict) or isinstance(v, str) and v.startswith("?") else v)
            for k, v in attrs.items()}


def _check_constraints(rule: Rule, v: str, c: dict, ranks: dict[str, int],
                       variables: set[str]) -> dict:
    unknown = sorted(set(c) - set(CONSTRAINTS))
    if unknown:
        raise RuleError(rule.id, f"variable {v!r}: unknown constraint(s) {unknown}")
    if "weight" in c and not isinstance(c["weight"], bool):
        raise RuleError(rule.id, f"variable {v!r}: 'weight' must be true or false")
    if "same_dim" not in c:
        return c
    sd = c["same_dim"]
    if not isinstance(sd, (list, tuple)):
        raise RuleError(rule.id, f"variable {v!r}: 'same_dim' must be a list")
    out = []
    for item in sd:
        if not (isinstance(item, (list, tuple)) and len(item) == 3 and
                isinstance(item[1], str) and all(isinstance(x, int) and not isinstance(x, bool)
                                                 for x in (item[0], item[2]))):
            raise RuleError(rule.id, f"variable {v!r}: same_dim entry {item!r} is not "
                            "[axis, variable, axis]")
        a, u, b = item
        if u not in variables:
            raise RuleError(rule.id, f"variable {v!r}: same_dim names {u!r}, which is not a "
                            "variable of the rule")
        out.append([_axis_of(rule, v, a, ranks, "same_dim"), u,
                    _axis_of(rule, u, b, ranks, "same_dim")])
    return {**c, "same_dim": out}


def _axis_of(rule: Rule, ref: Ref, axis: int, ranks: dict[str, int], what: str) -> int:
    """A size's axis, non-negative: counted from the end of a variable whose rank
    the rule declares; refused for another tensor."""
    rank = ranks.get(ref) if isinstance(ref, str) else None
    if rank is not None and not -rank <= axis < rank:
        raise RuleError(rule.id, f"{what}: axis {axis} is out of range for {ref!r} of rank "
                        f"{rank}")
    if axis >= 0:
        return axis
    if rank is None:
        raise RuleError(rule.id, f"{what}: axis {axis} counts from the end of "
                        f"{ref_name(ref)}, whose rank the rule does not declare")
    return axis + rank




def _normalized_node(rule: Rule, n: PNode, ranks: dict[str, int]) -> PNode:
    op = OPS[n.op]
    attrs = {k: _normalized_dims(rule, v, ranks) for k, v in n.attrs.items()}
    for k in op.axes:
        v = attrs.get(k)
        lits = [u for u in (v if isinstance(v, (list, tuple)) else (v,))
                if isinstance(u, int) and not isinstance(u, bool)]
        if not any(u < 0 for u in lits):
            continue
        x = n.inputs[0] if n.inputs else None
        rank = ranks.get(x) if isinstance(x, str) else None
        if rank is None:
            raise RuleError(rule.id, f"{n.op} {k} {v!r} counts from the end of "
                            f"{ref_name(x) if x is not None else 'a tensor'}, whose rank the "
                            "rule does not declare")
        try:
            attrs[k] = freeze(op.normalize({**attrs, k: v}, [(1,) * rank])[k])
        except ShapeError as e:
            raise RuleError(rule.id, str(e)) from None
        if isinstance(v, list):
            attrs[k] = list(attrs[k])
    return n if attrs == n.attrs else PNode(n.op, list(n.inputs), attrs)


def _normalized_dims(rule: Rule, v: Any, ranks: dict[str, int]) -> Any:
    if isinstance(v, dict) and "dim" in v:
        ref, axis = v["dim"]
        return {"dim": (ref, _axis_of(rule, ref, axis, ranks, "size"))}
    if isinstance(v, (list, tuple)):
        return type(v)(_normalized_dims(rule, u, ranks) for u in v)
    return v


# ---- constraints ---------------------------------------------------------------------
def rank_of(rule: Rule, var: str) -> int | None:
    return rule.vars.get(var, {}).get("rank")


def var_fits(rule: Rule, var: str, shape: tuple[int, ...], weight_only: bool) -> bool:
    """Do a variable's own constraints (rank, weight-only) hold for a tensor?"""
    c = rule.vars.get(var, {})
    if c.get("weight") and not weight_only:
        return False
    r = c.get("rank")
    return r is None or len(shape) == r


def same_dims(rule: Rule) -> list[tuple[str, int, str, int]]:
    """The "same_dim" constraints, as (variable, axis, other variable, other axis);
    axes non-negative (`checked`)."""
    return rule.same_dims()


def same_dims_hold(rule: Rule, shapes: dict[str, tuple[int, ...]]) -> bool:
    for v, a, u, b in rule.same_dims():
        sv, su = shapes[v], shapes[u]
        if a >= len(sv) or b >= len(su) or sv[a] != su[b]:
            return False
    return True


def axis_variables(rule: Rule) -> list[tuple[str, str, str, Ref, int]]:
    """Where an attribute variable stands for an axis: (side, variable name, kind,
    the node's first input, node index). The optimizer binds such a variable
    only to a non-negative axis in range, the proof's hypothesis."""
    out = []
    for side, nodes in (("src", rule.src), ("dst", rule.dst)):
        for i, n in enumerate(nodes):
            for k, kind in OPS[n.op].axes.items():
                v = n.attrs.get(k)
                for u in (v if isinstance(v, (list, tuple)) else (v,)):
                    if isinstance(u, str) and u.startswith("?") and n.inputs:
                        out.append((side, u[1:], kind, n.inputs[0], i))
    return out
