"""What loading, running and exporting ONNX share: opsets, dtypes, model
building and the names subgraphs read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

from ..errors import ModelError

MIN_OPSET = 13  # older models are converted up to this opset on load
DEFAULT_OPSET = 17
MIN_IR = 10  # the exported IR version: covers every tensor type onnxruntime reads


def dtype_name(elem_type: int) -> str:
    """The IR's dtype string for an ONNX element type: the numpy name where numpy
    (or ml_dtypes) has one, "string" for strings."""
    if elem_type == TensorProto.STRING:
        return "string"
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()


# The ONNX element type of each IR dtype string.
ELEM_TYPES: dict[str, int] = {}
for _name, _v in TensorProto.DataType.items():
    if _v:
        ELEM_TYPES.setdefault(dtype_name(_v), _v)


def elem_type(dtype: str) -> int:
    try:
        return ELEM_TYPES[dtype]
    except KeyError:
        raise ModelError(f"dtype {dtype!r} has no ONNX element type") from None


def array_dtype(x: np.ndarray) -> str:
    return "string" if x.dtype == object or x.dtype.kind in "US" else str(x.dtype)


def signature(g: onnx.GraphProto) -> list[tuple[str, Any]]:
    """What a graph takes (names and full types) and gives (names, element types)."""
    return ([(v.name, v.type.SerializeToString()) for v in g.input]
            + [(v.name, v.type.tensor_type.elem_type) for v in g.output])


def make_model(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> onnx.ModelProto:
    opsets = dict(opsets)
    opsets.setdefault("", DEFAULT_OPSET)
    ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    ir = max(helper.find_min_ir_version_for(ids, ignore_unknown=True), MIN_IR)
    return helper.make_model(graph, opset_imports=ids, ir_version=ir,
                             producer_name="taso")


def subgraphs(attrs: Sequence[AttributeProto]) -> list[onnx.GraphProto]:
    out = []
    for a in attrs:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def outer_names(attrs: Sequence[AttributeProto]) -> list[str]:
    """Names that the subgraphs in `attrs` read from the enclosing scope, sorted."""
    free: set[str] = set()

    def visit(g: onnx.GraphProto, bound: set[str]) -> None:
        bound = bound | {v.name for v in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            for s in subgraphs(n.attribute):
                visit(s, bound)
            free.update(i for i in n.input if i and i not in bound)
            bound |= set(n.output)
        free.update(o.name for o in g.output if o.name not in bound)

    for s in subgraphs(attrs):
        visit(s, set())
    return sorted(free)


def all_names(attrs: Sequence[AttributeProto]) -> set[str]:
    """Every tensor name used anywhere in the subgraphs of `attrs`."""
    names: set[str] = set()
    stack = subgraphs(attrs)
    while stack:
        g = stack.pop()
        names.update(v.name for v in (*g.input, *g.output, *g.value_info))
        names.update(t.name for t in g.initializer)
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            stack.extend(subgraphs(n.attribute))
    names.discard("")
    return names
