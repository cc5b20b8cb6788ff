"""Reading a model: the file parsed and checked, its inputs bound to static
shapes, functions inlined and old opsets converted, and its nodes put in a
dependency order. Every problem is a `ModelError` with a one-line message."""

from __future__ import annotations

import heapq
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.external_data_helper
import onnx.inliner
import onnx.version_converter
from onnx import TensorProto

from ..cli import first_line
from ..errors import ModelError
from .common import MIN_OPSET, outer_names, signature


def read_model(src: Any) -> onnx.ModelProto:
    """A copy of the model at `src` (a path, serialized bytes or a ModelProto),
    external data included; ModelError names what is wrong with it."""
    if isinstance(src, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(src)
        return m
    if isinstance(src, (bytes, bytearray)):
        what, data = "the given bytes", bytes(src)
    elif isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if not os.path.isfile(path):
            raise ModelError(f"no such model file: {path}")
        what = path
        with open(path, "rb") as f:
            data = f.read()
    else:
        raise ModelError("expected a model path, serialized bytes or an onnx.ModelProto, "
                         f"got {type(src).__name__}")
    try:
        m = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and friends
        raise ModelError(f"cannot parse {what} as an ONNX model "
                         f"(truncated or malformed): {first_line(e)}") from None
    if not m.HasField("graph") or not m.graph.output:
        raise ModelError(f"{what} holds no graph with outputs (truncated or malformed?)")
    if not isinstance(src, (bytes, bytearray)) and any(
            t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(m, os.path.dirname(what))
        except Exception as e:
            raise ModelError(f"cannot read the external data of {what}: {first_line(e)}") from None
    return m


def bind_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Give every graph input a static shape, from the model or `input_shapes`.
    A named dimension (dim_param) bound through one input binds it in every
    input that shares the name; two different values for it are refused."""
    if not isinstance(input_shapes, Mapping):
        raise ModelError("input_shapes must map input names to shapes, "
                         f"got {type(input_shapes).__name__}")
    g = model.graph
    seen: set[str] = set()
    for vi in g.input:  # before any shape is read: which "x" would a shape bind?
        if vi.name in seen:
            raise ModelError(f"two graph inputs are named {vi.name!r}")
        seen.add(vi.name)
    inits = {t.name for t in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in inits]
    unknown = set(input_shapes) - {vi.name for vi in inputs}
    if unknown:
        raise ModelError(f"input_shapes names {', '.join(sorted(map(repr, unknown)))}, which "
                         f"are not graph inputs (inputs: {[vi.name for vi in inputs]})")
    given = {name: shape_value(name, shape) for name, shape in input_shapes.items()}
    bound: dict[str, tuple[int, str]] = {}  # dim_param -> (value, the input that bound it)
    for vi in inputs:
        _check_tensor_input(vi)
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        shape = given.get(vi.name)
        if shape is None or dims is None:
            continue
        if len(dims) != len(shape):
            raise ModelError(f"input {vi.name!r} has rank {len(dims)}, "
                             f"input_shapes gives {shape}")
        for k, (d, n) in enumerate(zip(dims, shape)):
            if d.HasField("dim_value") and d.dim_value != n:
                raise ModelError(f"input {vi.name!r} dim {k} is {d.dim_value} in the model, "
                                 f"input_shapes gives {n}")
            if d.dim_param:
                old = bound.setdefault(d.dim_param, (n, vi.name))
                if old[0] != n:
                    raise ModelError(f"dimension {d.dim_param!r} is {old[0]} in input "
                                     f"{old[1]!r} but {n} in input {vi.name!r} (input_shapes)")
    for vi in inputs:
        name, tt = vi.name, vi.type.tensor_type
        shape = given.get(name)
        if shape is None:
            hint = (f"pass input_shapes={{{name!r}: [...]}} "
                    f"(taso-opt: --input-shape {name}=D0,D1,...)")
            if not tt.HasField("shape"):
                raise ModelError(f"input {name!r} has no shape: {hint}")
            shape = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif d.dim_param in bound:
                    shape.append(bound[d.dim_param][0])
                else:
                    label = repr(d.dim_param) if d.dim_param else "unknown"
                    raise ModelError(f"input {name!r} dim {k} ({label}) is symbolic: {hint}")
        tt.shape.Clear()
        for n in shape:
            tt.shape.dim.add().dim_value = n


def shape_value(name: str, shape: Any) -> list[int]:
    """`shape` as a list of non-negative ints, or a ModelError naming the input."""
    bad = ModelError(f"input_shapes[{name!r}] must be a sequence of non-negative ints, "
                     f"got {shape!r}")
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)) \
            or isinstance(shape, np.ndarray) and shape.ndim != 1:
        raise bad
    out = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise bad
        out.append(int(d))
    return out


def _check_tensor_input(vi: onnx.ValueInfoProto) -> None:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ModelError(f"input {vi.name!r} is a {kind or 'untyped value'}, not a tensor")
    if vi.type.tensor_type.elem_type == TensorProto.UNDEFINED:
        raise ModelError(f"input {vi.name!r} has no element type")
    for k, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value < 0:
            raise ModelError(f"input {vi.name!r} dim {k} is {d.dim_value}: a dimension cannot "
                             f"be negative")


def opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    for o in model.opset_import:
        if (o.domain or "") in ((domain,) if domain else ("", "ai.onnx")):
            return o.version
    return 0


def normalize(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inline model-local functions and bring old opsets up to MIN_OPSET, so the
    importers see one form of each operator."""
    if model.ir_version < 4:
        # IR 4 only dropped the rule that initializers be listed as inputs; without
        # it, inference and conversion ignore initializers that are not.
        model.ir_version = 4
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise ModelError("cannot inline the model's local functions: "
                             f"{first_line(e)}") from None
    v = opset_of(model)
    if 0 < v < MIN_OPSET:
        try:
            converted = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception:
            return model  # unknown ops block conversion; importers read ctx.opset
        if signature(converted.graph) == signature(model.graph):
            return converted  # else the conversion changed what the model takes (Scan-8)
    return model


def node_label(node: onnx.NodeProto, k: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{k} ({node.op_type})"


def topo_order(graph: onnx.GraphProto, defined: set[str]) -> list[int]:
    """The node indices in a dependency order; ModelError on an undefined tensor, a tensor
    produced twice, or a cycle."""
    producer: dict[str, int] = {}
    for k, n in enumerate(graph.node):
        for o in n.output:
            if not o:
                continue
            if o in producer or o in defined:
                raise ModelError(f"tensor {o!r} is defined twice (by node "
                                 f"{node_label(n, k)})")
            producer[o] = k
    deps: list[set[int]] = []
    for k, n in enumerate(graph.node):
        d = set()
        for i in (*n.input, *outer_names(n.attribute)):
            if not i or i in defined:
                continue
            if i not in producer:
                raise ModelError(f"node {node_label(n, k)} reads {i!r}, which is not a graph "
                                 f"input, an initializer or any node's output")
            d.add(producer[i])
        deps.append(d)
    for o in graph.output:
        if o.name not in producer and o.name not in defined:
            raise ModelError(f"graph output {o.name!r} is not produced by any node, input "
                             f"or initializer")
    users: list[list[int]] = [[] for _ in graph.node]
    missing = [len(d) for d in deps]
    for k, d in enumerate(deps):
        for p in d:
            users[p].append(k)
    ready = [k for k, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)  # the file's order wherever the dependencies allow it
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(graph.node):
        stuck = min(k for k, m in enumerate(missing) if m > 0)
        raise ModelError(f"the graph has a cycle through node "
                         f"{node_label(graph.node[stuck], stuck)}")
    return order
