"""What a rule pattern's attributes mean against concrete graphs (part of the
definition in `pattern.py`, which names these too): attribute values from
variable bindings and tensor sizes, binding a source pattern's attributes to a
node's, the target's concrete attributes, and one side of a rule instantiated
as a graph."""

from __future__ import annotations

from typing import Any

from taso.ops import OPS, ShapeError
from taso.ops.base import freeze

from .rule import PNode, Ref, Rule


def ref_name(r: Ref) -> str:
    """A tensor reference as a message names it."""
    return repr(r) if isinstance(r, str) else f"node {r[0]}'s output {r[1]}"


# ---- attributes ----------------------------------------------------------------------
def attr_value(v: Any, env: dict, binds: dict) -> Any:
    """A pattern attribute's concrete value: attribute variables from `binds`,
    sizes from the shapes of the tensors in `env` (anything with `.shape`); a
    ShapeError where such a tensor has no such axis (the rule does not apply)."""
    if isinstance(v, str) and v.startswith("?"):
        return binds[v[1:]]
    if isinstance(v, dict) and "dim" in v:
        ref, axis = v["dim"]
        shape = env[ref if isinstance(ref, str) else tuple(ref)].shape
        if not 0 <= axis < len(shape):
            raise ShapeError(f"a size of axis {axis} of {ref_name(ref)}, of shape {shape}")
        return shape[axis]
    if isinstance(v, (list, tuple)):
        return tuple(attr_value(u, env, binds) for u in v)
    return v


def bind(pv: Any, av: Any, binds: dict) -> bool:
    """Bind the attribute variables in a pattern value to a node's value (or
    check a binding made earlier); False where they disagree."""
    if isinstance(pv, str) and pv.startswith("?"):
        name, av = pv[1:], freeze(av)
        if name in binds:
            return binds[name] == av
        binds[name] = av
        return True
    if isinstance(pv, (list, tuple)):
        if isinstance(av, (list, tuple)):
            return len(pv) == len(av) and all(bind(p, a, binds) for p, a in zip(pv, av))
        return not _has_vars(pv)  # a value of another form binds no variable of a list
    return True


def reads_dims(v: Any) -> bool:
    """Whether a pattern attribute value reads a size off a tensor ({"dim": ...})."""
    if isinstance(v, dict):
        return "dim" in v or any(reads_dims(u) for u in v.values())
    if isinstance(v, (list, tuple)):
        return any(reads_dims(u) for u in v)
    return False


def _has_vars(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return any(_has_vars(u) for u in v)
    return isinstance(v, str) and v.startswith("?")


def _sizes_known(v: Any, env: dict) -> bool:
    """Whether every size in a pattern value names a tensor of `env`."""
    if isinstance(v, dict) and "dim" in v:
        ref = v["dim"][0]
        return (ref if isinstance(ref, str) else tuple(ref)) in env
    if isinstance(v, (list, tuple)):
        return all(_sizes_known(u, env) for u in v)
    return True


_PATTERNS: dict[tuple, tuple[dict, tuple]] = {}


def source_attrs(op_name: str, pattern: dict) -> tuple[dict, tuple]:
    """A source node's attribute pattern with defaults filled in (an absent
    required attribute matches anything), and those of its values that are
    plain (no variable, size or string), compared as they are."""
    key = (op_name, repr(pattern))
    if key not in _PATTERNS:
        op = OPS[op_name]
        full = {k: pattern[k] if k in pattern else d for k, d in op.attrs.items()
                if k in pattern or d is not None}
        literal = tuple((k, freeze(v)) for k, v in full.items() if _plain(v))
        _PATTERNS[key] = (full, literal)
    return _PATTERNS[key]


def _plain(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_plain(u) for u in v)
    return not isinstance(v, (str, dict))


def bind_attrs(op_name: str, pattern: dict, actual: dict, in_shapes, env, binds,
               alone: bool = False) -> bool:
    """Does a node's attribute dict satisfy a source pattern's? Unspecified
    attributes must have their default (required ones match anything); "?x"
    binds or must equal its binding; the rest are compared after the operator
    resolves symbolic values (e.g. "same" pads) for these input shapes (a
    ShapeError where it cannot). `alone`: the node is judged on its own, `env`
    holding its operands only; a pattern that sizes by another tensor may
    match (True), which the check of the whole match decides."""
    op = OPS[op_name]
    full, literal = source_attrs(op_name, pattern)
    for k, v in literal:  # the cheap rejections first
        a = actual.get(k)
        if not isinstance(a, str) and freeze(a) != v:
            return False
    if len(literal) == len(full) and not any(isinstance(actual.get(k), str) for k in full):
        return True
    for k, pv in full.items():
        if not bind(pv, actual.get(k), binds):
            return False
    if alone and not all(_sizes_known(v, env) for v in full.values()):
        return True
    concrete = {k: attr_value(v, env, binds) for k, v in full.items()}
    want = op.resolve({**actual, **concrete}, in_shapes)
    have = op.resolve(dict(actual), in_shapes)
    return all(freeze(want[k]) == freeze(have[k]) for k in full)


def target_attrs(node: PNode, in_shapes: list[tuple[int, ...]], env: dict,
                 binds: dict) -> dict[str, Any]:
    """A target node's concrete attributes for these input shapes: variables and
    sizes substituted, symbolic values resolved, axes normalised."""
    op = OPS[node.op]
    a = dict(op.make_attrs(**{k: attr_value(v, env, binds) for k, v in node.attrs.items()}))
    return op.normalize(op.resolve(a, in_shapes), in_shapes)


# ---- instantiation -------------------------------------------------------------------
def instantiate(rule: Rule, side: str, shapes: dict[str, tuple[int, ...]],
                attr_values: dict[str, Any] | None = None, graph=None, sources=None):
    """Build one side of `rule` as a concrete `taso.Graph` over variables of the
    given shapes. Variables become graph inputs named after them (or the tensors
    in `sources`, for grafting into an existing `graph`). Attribute variables take
    `attr_values`. Returns (graph, {ref: Tensor}) with the mapped outputs marked in
    order."""
    from taso.ir import Graph

    g = graph if graph is not None else Graph()
    env: dict[Any, Any] = dict(sources or {})
    for v in rule.variables():
        if v not in env:
            env[v] = g.new_input(shapes[v], name=v)
    nodes = rule.src if side == "src" else rule.dst
    for i, n in enumerate(nodes):
        ins = [env[r] for r in n.inputs]
        attrs = {k: attr_value(v, env, attr_values or {}) for k, v in n.attrs.items()}
        outs = g.add_node(n.op, ins, **attrs)
        for k, t in enumerate(outs):
            env[(i, k)] = t
    for s, d in rule.outputs:
        g.mark_output(env[s if side == "src" else d])
    return g, env
