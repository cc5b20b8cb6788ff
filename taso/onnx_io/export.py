"""Export: a Graph written back as ONNX through each operator's `onnx` method."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.version_converter
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ..cli import first_line
from ..errors import ModelError
from ..files import atomic_path
from ..ir import Graph
from ..ops import OPS
from ..ops.base import Shape
from .common import (
    DEFAULT_OPSET,
    MIN_OPSET,
    all_names,
    elem_type,
    make_model,
    signature,
)
from .opaque import node_model


class Emitter:
    """Collects the ONNX nodes and initializers the operators emit, handing out
    unique tensor names."""

    def __init__(self, opset: int, reserved: set[str]):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.opsets: dict[str, int] = {"": opset}
        self._used = set(reserved)
        self._count: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}
        self._outer: dict[str, str] = {}

    def fresh(self, hint: str) -> str:
        """A tensor name no other tensor has, derived from `hint`."""
        base = re.sub(r"[^A-Za-z0-9_./:-]", "_", hint) or "t"
        if base not in self._used:
            self._used.add(base)
            return base
        k = self._count.get(base, 0)
        while f"{base}_{k}" in self._used:
            k += 1
        self._count[base] = k + 1
        self._used.add(f"{base}_{k}")
        return f"{base}_{k}"

    def tmp(self, hint: str = "t") -> str:
        return self.fresh(hint)

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        """An initializer holding `array`; small equal constants are shared."""
        array = np.asarray(array)
        key = None
        if array.size <= 64:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in self._consts:
                return self._consts[key]
        name = self.fresh(hint)
        self.initializer(array, name)
        if key is not None:
            self._consts[key] = name
        return name

    def initializer(self, array: np.ndarray, name: str) -> None:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
             domain: str = "", **attrs: Any) -> onnx.NodeProto:
        n = helper.make_node(op_type, list(inputs), list(outputs), domain=domain or None)
        for k, v in attrs.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)) and not v:  # e.g. the perm of a 0-d transpose
                n.attribute.append(helper.make_attribute(k, [], attr_type=AttributeProto.INTS))
            else:
                n.attribute.append(helper.make_attribute(k, v))
        self.nodes.append(n)
        return n

    def bind_outer(self, name: str, value: str) -> None:
        """Make the tensor a subgraph reads as `name` from the enclosing scope hold
        `value`."""
        if name == value:
            return
        if name in self._outer:
            if self._outer[name] != value:
                raise ModelError(f"two tensors would both be named {name!r} for subgraphs")
            return
        self._outer[name] = value
        self.node("Identity", [value], [name])


def emit_opaque(a: Mapping[str, Any], em: Emitter, ins: list[str], outs: list[str],
                in_types: Sequence[tuple[Shape, str]]) -> None:
    """Emit the ONNX node an opaque node stands for, converted to the emitter's
    opset if its operator changed in between."""
    n_outer = len(a["outer"])
    explicit = ins[:len(ins) - n_outer]
    for name, value in zip(a["outer"], ins[len(ins) - n_outer:]):
        em.bind_outer(name, value)
    it = iter(explicit)
    names = ["" if k in a["absent"] else next(it)
             for k in range(len(explicit) + len(a["absent"]))]
    outs = ["" if dt == "" else o for o, dt in zip(outs, a["out_dtypes"])]
    domain, v = a["domain"], a["opset"]
    if domain == "" and v and v != em.opset and _schema_changed(a["onnx_type"], v, em.opset):
        _emit_converted(a, em, names, outs, in_types)
        return
    n = em.node(a["onnx_type"], names, outs, domain=domain)
    n.attribute.extend(AttributeProto.FromString(b) for b in a["onnx_attrs"])
    if domain:
        em.opsets[domain] = max(em.opsets.get(domain, 0), v or 1)


def _schema_changed(op_type: str, a: int, b: int) -> bool:
    try:
        return (onnx.defs.get_schema(op_type, a).since_version
                != onnx.defs.get_schema(op_type, b).since_version)
    except Exception:
        return False


def _emit_converted(a, em: Emitter, ins: list[str], outs: list[str], in_types) -> None:
    m = node_model(a, in_types)
    try:
        c = onnx.version_converter.convert_version(m, em.opset)
        if signature(c.graph) != signature(m.graph):
            raise ValueError("the conversion changes its input or output types")
    except Exception as e:
        raise ModelError(f"cannot express {a['onnx_type']}-{a['opset']} at opset {em.opset} "
                         f"({first_line(e)}); export at opset {a['opset']}") from None
    # Rename the one-node model's names onto the emitter's.
    ren = {f"__taso_i{k}": n for k, n in enumerate([i for i in ins if i])}
    ren.update({n: n for n in a["outer"]})
    ren.update({f"__taso_o{k}": o for k, o in enumerate(outs) if o})
    ren[""] = ""
    for t in c.graph.initializer:
        ren[t.name] = em.fresh(t.name)
        t.name = ren[t.name]
        em.initializers.append(t)
    for n in c.graph.node:
        for o in n.output:
            if o not in ren:
                ren[o] = em.fresh(o)
        n.input[:] = [ren[i] for i in n.input]
        n.output[:] = [ren[o] for o in n.output]
        em.nodes.append(n)


def export_onnx(graph: Graph, path: str | os.PathLike | None = None, *,
                opset: int | None = None) -> onnx.ModelProto:
    """Export a Graph as an ONNX model, and write it to `path` when one is given.
    `opset` defaults to 17, or to the opset its opaque nodes were imported at
    when that is newer."""
    if not isinstance(graph, Graph):
        raise ModelError(f"export_onnx takes a taso Graph, got {type(graph).__name__}")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ModelError(f"export_onnx: path must be a file path, got {path!r} "
                         "(the opset is a keyword: opset=17)")
    if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int)):
        raise ModelError(f"export_onnx: opset must be an integer, got {opset!r}")
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and not MIN_OPSET <= opset <= newest:
        raise ModelError(f"export_onnx: opset {opset} is outside what taso writes "
                         f"({MIN_OPSET}..{newest}, the newest this onnx knows)")
    model = _export(graph, opset)
    if path is not None:
        save_model(model, path)
    return model


# protobuf cannot serialize a message past 2 GiB; bigger models keep their weights apart.
_PROTOBUF_LIMIT = 2**31 - 2**20


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write `model` to `path` atomically: a failed or interrupted write leaves
    whatever was there before. Models past protobuf's 2 GiB limit write their
    weights to `<name>.data` beside it, which is written in place (the model
    names that file, so it cannot be moved into place after)."""
    path = os.fspath(path)
    name = os.path.basename(os.path.abspath(path))
    try:
        with atomic_path(path) as tmp:
            if model.ByteSize() > _PROTOBUF_LIMIT:
                onnx.save(model, tmp, save_as_external_data=True, location=name + ".data")
            else:
                with open(tmp, "wb") as f:
                    f.write(model.SerializeToString())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot write {path}: {first_line(e)}") from None


def _export(graph: Graph, opset: int | None) -> onnx.ModelProto:
    g = graph.pruned()
    if opset is None:
        opset = max([DEFAULT_OPSET] + [n.a["opset"] for n in g.nodes.values()
                                       if n.op == "opaque" and n.a["domain"] == ""])
    names: dict[tuple[int, int], str] = {}
    reserved: set[str] = set()
    for n in g.inputs:
        if n.name in reserved:
            raise ModelError(f"two graph inputs are named {n.name!r}")
        reserved.add(n.name)
        names[(n.id, 0)] = n.name
    # A name may be listed twice only for the same value (ONNX allows that).
    named: dict[str, tuple[int, int]] = {}
    for ref, name in zip(g.outputs, g.output_names):
        if named.setdefault(name, ref) != ref:
            raise ModelError(f"two different graph outputs are named {name!r}")
    reserved |= set(g.output_names) - reserved
    for n in g.nodes.values():
        if n.op == "opaque":
            attrs = [AttributeProto.FromString(b) for b in n.a["onnx_attrs"]]
            reserved |= all_names(attrs) | set(n.a["outer"])
    out_name = {}
    for ref, name in zip(g.outputs, g.output_names):
        if ref not in out_name and g.nodes[ref[0]].op not in ("input", "weight"):
            out_name[ref] = name
    em = Emitter(opset, reserved)
    for n in g.topo_order():
        if n.op == "input":
            continue
        if n.op == "weight":
            names[(n.id, 0)] = em.fresh(n.name or "w")
            em.initializer(n.data, names[(n.id, 0)])
            continue
        ins = [names[r] for r in n.inputs]
        outs = [out_name.get((n.id, i)) or em.tmp(n.name or n.op) for i in range(len(n.shapes))]
        in_shapes = [g.nodes[p].shapes[i] for p, i in n.inputs]
        if n.op == "opaque":
            in_types = [(g.nodes[p].shapes[i], g.nodes[p].dtypes[i]) for p, i in n.inputs]
            emit_opaque(n.a, em, ins, outs, in_types)
        else:
            OPS[n.op].onnx(n.a, em, ins, outs, in_shapes)
        for i, o in enumerate(outs):
            names[(n.id, i)] = o
    for name, ref in named.items():
        if names[ref] != name:
            em.node("Identity", [names[ref]], [name])
    for n in g.inputs:  # an overridable initializer: an input with a default
        if n.data is not None:
            em.initializer(n.data, n.name)
    inputs = [helper.make_tensor_value_info(n.name, elem_type(n.dtypes[0]),
                                            _dims(n.shapes[0], g.dim_params.get(n.name)))
              for n in g.inputs]
    outputs = [helper.make_tensor_value_info(name, elem_type(g.nodes[p].dtypes[i]),
                                             _dims(g.nodes[p].shapes[i],
                                                   g.output_dim_params.get(name)))
               for (p, i), name in zip(g.outputs, g.output_names)]
    onnx_graph = helper.make_graph(em.nodes, "taso", inputs, outputs, em.initializers)
    return make_model(onnx_graph, em.opsets)


def _dims(shape: Shape, params: Sequence[str | None] | None) -> list[int | str | None]:
    """A value's dims as ONNX declares them: the symbolic name where the graph
    keeps one (`Graph.dim_params`), the bound value elsewhere; an axis whose
    size varies with no name of its own is left unnamed ("")."""
    if params is None or len(params) != len(shape):
        return list(shape)
    return [d if p is None else (p or None) for d, p in zip(shape, params)]
