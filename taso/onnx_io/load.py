"""Loading: an ONNX model read, checked and turned into a `Graph`.

Graph inputs keep their names and dtypes, initializers and Constant nodes
become weights, each node goes to the importer its operator registered
(`taso.ops.base.onnx_importer`), and every node without one (or whose importer
declines) becomes an `opaque` node that onnxruntime evaluates and no rule
matches. Errors in the model are `ModelError`s with a one-line message.
"""

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
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ..errors import ModelError
from ..ir import Graph, Node, Tensor, random_array
from ..ops import ONNX_IMPORTERS, OPS, ShapeError, get_op
from ..ops.base import Shape
from .common import (
    ELEM_TYPES,
    MIN_OPSET,
    array_dtype,
    dtype_name,
    first_line,
    outer_names,
    signature,
)
from .opaque import run_attrs, run_opaque, session_options
from .symbolic import bindings, input_shapes_at, symbolic_axes

# Opaque operators never folded into weights: their value is not a function of
# their inputs.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial"}


def load_onnx(src: str | os.PathLike | bytes | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None, *,
              freeze_initializers: bool = False, static: bool = False) -> Graph:
    """Load an ONNX model (a path, serialized bytes or a ModelProto) as a Graph.

    Symbolic input dims need no binding: the graph's shapes are those of one
    representative binding (`input_shapes` where it binds a dim, else 1 for a
    batch-like dim and 32 for another; `Graph.notes` says which), and the
    graph stays valid for every value (see `taso.onnx_io.symbolic`), which
    `export_onnx` writes back as the model's dim names; `static` binds them
    for good instead. A model whose graph would hold at one binding only is
    a ModelError unless `static`.
    An initializer that is also a graph input (an overridable default) stays
    an input with that default unless `freeze_initializers`, which makes it a
    weight like any other."""
    model = read_model(src)
    if input_shapes is not None and not isinstance(input_shapes, Mapping):
        raise ModelError("input_shapes must map input names to shapes, "
                         f"got {type(input_shapes).__name__}")
    given = {k: _shape_value(k, v) for k, v in (input_shapes or {}).items()}
    axes = symbolic_axes(model)
    if not axes:
        return _load(model, given, freeze_initializers, set())[0]
    values, notes = bindings(model, axes, given)
    first = input_shapes_at(model, axes, given, values)
    at = ", ".join(f"{p}={v}" for p, v in sorted(values.items()))
    if static:
        g = _load(model, first, freeze_initializers, set())[0]
        g.notes = [f"symbolic dims bound for good at {at} (static)"]
        return g
    again = {p: 2 * v + 1 for p, v in values.items()}
    second = input_shapes_at(model, axes, given, again)
    at2 = ", ".join(f"{p}={v}" for p, v in sorted(again.items()))
    forced: set[int] = set()
    for _ in range(6):
        g, sig = _load(model, first, freeze_initializers, forced)
        try:
            g2, sig2 = _load(model, second, freeze_initializers, forced)
        except (ModelError, ShapeError) as e:
            raise ModelError(f"the model loads at {at} but not at {at2} ({first_line(e)}); "
                             f"pass static=True (taso-opt --static) to optimize it at {at} "
                             f"only") from None
        moved = {k for k in set(sig) | set(sig2) if sig.get(k) != sig2.get(k)} - forced
        if not moved:
            break
        forced |= moved
    else:
        raise ModelError(f"the model's import keeps depending on the value of its symbolic "
                         f"dims; pass static=True (taso-opt --static) to optimize it at {at}")
    by_name = {vi.name: vi for vi in model.graph.input}
    g.dim_params = {name: tuple(dict(ax).get(k) for k in
                                range(len(by_name[name].type.tensor_type.shape.dim)))
                    for name, ax in axes.items()}
    declared = {o.name: o.type.tensor_type.shape.dim for o in model.graph.output}
    for (p, i), (p2, i2), name in zip(g.outputs, g2.outputs, g.output_names):
        s1, s2 = g.nodes[p].shapes[i], g2.nodes[p2].shapes[i2]
        if s1 != s2 and len(s1) == len(s2):
            dims = declared.get(name, [])
            g.output_dim_params[name] = tuple(
                None if a == b else
                (dims[k].dim_param if k < len(dims) and dims[k].dim_param else
                 next((q for q, v in values.items() if v == a and again[q] == b), ""))
                for k, (a, b) in enumerate(zip(s1, s2)))
    g.notes = notes
    if forced:
        g.notes.append(f"{len(forced)} node(s) depend on the symbolic dims' values and stay "
                       f"as the model wrote them")
    return g


def _load(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], freeze: bool,
          forced: set[int]) -> tuple[Graph, dict[int, tuple]]:
    """The graph of `model` with its inputs bound to `shapes`, and what each
    ONNX node became (by its index), to compare between bindings."""
    m = read_model(model)
    _bind_inputs(m, shapes)
    m = _normalize(m)
    loader = _Loader(m, freeze, forced)
    return loader.run(), loader.made


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


def _bind_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
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
    given = {name: _shape_value(name, shape) for name, shape in input_shapes.items()}
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


def _shape_value(name: str, shape: Any) -> list[int]:
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


def _opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    for o in model.opset_import:
        if (o.domain or "") in ((domain,) if domain else ("", "ai.onnx")):
            return o.version
    return 0


def _normalize(model: onnx.ModelProto) -> onnx.ModelProto:
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
    v = _opset_of(model)
    if 0 < v < MIN_OPSET:
        try:
            converted = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception:
            return model  # unknown ops block conversion; importers read ctx.opset
        if signature(converted.graph) == signature(model.graph):
            return converted  # else the conversion changed what the model takes (Scan-8)
    return model


def _node_label(node: onnx.NodeProto, k: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{k} ({node.op_type})"


def _topo_order(graph: onnx.GraphProto, defined: set[str]) -> list[int]:
    """The node indices in a dependency order; ModelError on an undefined tensor, a tensor
    produced twice, or a cycle."""
    producer: dict[str, int] = {}
    for k, n in enumerate(graph.node):
        for o in n.output:
            if not o:
                continue
            if o in producer or o in defined:
                raise ModelError(f"tensor {o!r} is defined twice (by node "
                                 f"{_node_label(n, k)})")
            producer[o] = k
    deps: list[set[int]] = []
    for k, n in enumerate(graph.node):
        d = set()
        for i in (*n.input, *outer_names(n.attribute)):
            if not i or i in defined:
                continue
            if i not in producer:
                raise ModelError(f"node {_node_label(n, k)} reads {i!r}, which is not a graph "
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
                         f"{_node_label(graph.node[stuck], stuck)}")
    return order


def _value_types(model: onnx.ModelProto) -> dict[str, tuple[Shape | None, str | None]]:
    """(static shape or None, dtype or None) of every value ONNX shape inference
    (with data propagation) or the model's own value_info knows."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inferred = model
    out: dict[str, tuple[Shape | None, str | None]] = {}
    for vi in (*model.graph.value_info, *inferred.graph.value_info,
               *inferred.graph.input, *inferred.graph.output):
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            if vi.name not in out and t.WhichOneof("value"):
                out[vi.name] = (None, t.WhichOneof("value"))
            continue
        tt = t.tensor_type
        dtype = dtype_name(tt.elem_type) if tt.elem_type else None
        shape = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(d.dim_value for d in tt.shape.dim)
        old = out.get(vi.name, (None, None))
        out[vi.name] = (shape if shape is not None else old[0], dtype or old[1])
    return out


def _measure_types(model: onnx.ModelProto, names: list[str],
                   inputs: dict[str, tuple[Shape, str]]) -> dict[str, tuple[Shape, str]]:
    """Shapes and dtypes of `names`, by running the model in onnxruntime on random
    inputs (for values shape inference could not pin down); {} if it cannot run."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.add().name = n
    rng = np.random.default_rng(0)
    feeds = {k: random_array(s, d, rng, int_low=1) for k, (s, d) in inputs.items()}
    try:
        sess = ort.InferenceSession(m.SerializeToString(), session_options(),
                                    providers=["CPUExecutionProvider"])
        vals = sess.run(names, feeds)
    except Exception:
        return {}
    return {n: (tuple(v.shape), array_dtype(np.asarray(v))) for n, v in zip(names, vals)}


class ImportContext:
    """What an importer sees of one ONNX node (see `taso.ops.base.onnx_importer`)."""

    def __init__(self, loader: _Loader, node: onnx.NodeProto):
        self._loader = loader
        self.g: Graph = loader.g
        self.node = node
        self.opset: int = loader.opset(node.domain)
        self.inputs: list[Tensor | None] = [loader.tensors[n] if n else None
                                            for n in _strip(node.input)]
        self._attrs = {a.name: a for a in node.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute as a plain Python value (or numpy array for a tensor)."""
        a = self._attrs.get(name)
        return default if a is None else attr_value(a)

    def const(self, i: int) -> np.ndarray | None:
        """Input i's value if it is known before run time, else None."""
        t = self.inputs[i] if i < len(self.inputs) else None
        return None if t is None else self._loader.value(t)

    def opaque(self) -> list[Tensor]:
        """An opaque node for this ONNX node: the fallback of every importer."""
        return self._loader.opaque(self)

    def weight(self, data: np.ndarray, name: str | None = None) -> Tensor:
        """A weight holding `data` (named after the node's first output by default)."""
        return self._loader.weight(np.asarray(data), name or self.node.output[0])

    def out_shape(self, i: int = 0) -> Shape | None:
        """Output i's static shape as ONNX infers it, if known."""
        return self._loader.types.get(self.node.output[i], (None, None))[0]


def attr_value(a: AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if a.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(v)
    if a.type == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in v]
    if a.type == AttributeProto.STRING:
        return _decode(v)
    if a.type == AttributeProto.STRINGS:
        return [_decode(s) for s in v]
    if a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(v)
    return v


def _decode(b: bytes) -> str | bytes:
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b


def _strip(names: Sequence[str]) -> list[str]:
    """Drop trailing empty names (omitted optional inputs or outputs)."""
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


class _Loader:
    def __init__(self, model: onnx.ModelProto, freeze_initializers: bool = False,
                 forced: set[int] = frozenset()):
        self.model = model
        self.freeze = freeze_initializers
        # ONNX nodes (by index) imported as opaque whatever their importer
        # could do: their import depends on the value of a symbolic dim.
        self.forced = forced
        # What each ONNX node became: its new IR nodes' operators, attributes
        # (less an opaque node's output shapes), dtypes and constant data.
        self.made: dict[int, tuple] = {}
        self.g = Graph()
        self.tensors: dict[str, Tensor] = {}
        self.opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version
                       for o in model.opset_import}
        self.types = _value_types(model)
        # Values whose shape only a run could tell (data-dependent, or beyond
        # shape inference), and the nodes computing from them: such nodes stay
        # opaque, so no static shape is baked into what they compute.
        self.measured: set[str] = set()
        self.dynamic: set[tuple[int, int]] = set()
        self._index = -1  # of the node being imported, for messages
        self._values: dict[tuple[int, int], np.ndarray | None] = {}
        self._weight_only: dict[int, bool] = {}

    def opset(self, domain: str) -> int:
        return self.opsets.get("" if domain == "ai.onnx" else domain, 0)

    def run(self) -> Graph:
        graph = self.model.graph
        inits = {t.name: t for t in graph.initializer}
        for t in graph.sparse_initializer:
            raise ModelError(f"sparse initializer {t.values.name!r} is not supported")
        feeds: dict[str, tuple[Shape, str]] = {}
        for vi in graph.input:  # their names are distinct (_bind_inputs)
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            shape = tuple(d.dim_value for d in tt.shape.dim)
            feeds[vi.name] = (shape, dtype_name(tt.elem_type))
            self.tensors[vi.name] = self.g.new_input(shape, vi.name, feeds[vi.name][1])
        listed = {vi.name for vi in graph.input}
        for name, t in inits.items():
            try:
                data = numpy_helper.to_array(t)
            except Exception as e:
                raise ModelError(f"initializer {name!r} cannot be read: {first_line(e)}") from None
            if name in listed and not self.freeze:
                # An overridable default: a caller may feed another value.
                self.tensors[name] = self.g.new_input(data.shape, name, array_dtype(data),
                                                      default=data)
            else:
                self.tensors[name] = self.weight(data, name)
        order = _topo_order(graph, set(self.tensors))
        self._fill_types(list(graph.node), feeds)
        for k in order:
            node = graph.node[k]
            self._index = k
            first = self.g._next
            outs = self._import(node)
            self.made[k] = tuple(_made(self.g.nodes[i]) for i in range(first, self.g._next)
                                 if i in self.g.nodes)
            for name, t in zip(node.output, outs):
                if name:
                    self.tensors[name] = t
        for o in graph.output:
            self.g.mark_output(self.tensors[o.name], o.name)
        return self.g.pruned()

    def _fill_types(self, nodes: list[onnx.NodeProto], feeds: dict) -> None:
        """Measure in onnxruntime the values whose static shape inference missed."""
        missing = [o for n in nodes for o in n.output
                   if o and self.types.get(o, (None, None))[0] is None
                   and self.types.get(o, (None, None))[1] in (None, *ELEM_TYPES)]
        if missing:
            for name, st in _measure_types(self.model, missing, feeds).items():
                self.types[name] = st
                self.measured.add(name)

    def label(self, node: onnx.NodeProto) -> str:
        return _node_label(node, self._index)

    def weight(self, data: np.ndarray, name: str) -> Tensor:
        return self.g.add_node("weight", [], name=name, data=data, shape=data.shape,
                               dtype=array_dtype(data))[0]

    def _import(self, node: onnx.NodeProto) -> list[Tensor]:
        ctx = ImportContext(self, node)
        self._check_arity(ctx)
        onnx_domain = node.domain in ("", "ai.onnx")
        fn = _SOURCES.get(node.op_type) if onnx_domain else None
        if fn is None:
            # The operators are float32 operators: other dtypes stay opaque.
            fn = ONNX_IMPORTERS.get(node.op_type) if onnx_domain else None
            if ctx.inputs and ctx.inputs[0] is not None and ctx.inputs[0].dtype != "float32":
                fn = None
        if self._index in self.forced:
            return self.opaque(ctx)
        if fn is None or any(t is not None and t.ref in self.dynamic for t in ctx.inputs):
            return self.opaque(ctx)
        try:
            outs = fn(ctx)
        except ShapeError:
            outs = None
        except Exception as e:  # an importer's bug or a model it cannot read
            raise ModelError(f"importing node {self.label(node)}: {type(e).__name__}: "
                             f"{first_line(e)}") from e
        if outs is None:
            return self.opaque(ctx)
        outs = list(outs)
        names = _strip(node.output)
        if len(outs) != len(names):
            raise ModelError(f"the {node.op_type} importer returned {len(outs)} outputs for "
                             f"{len(names)}")
        for name, t in zip(names, outs):
            want = self.types.get(name, (None, None))
            if name and want[0] is not None and want[0] != t.shape:
                raise ModelError(f"the {node.op_type} importer built {name!r} with shape "
                                 f"{t.shape}, ONNX infers {want[0]}")
        return outs

    def _check_arity(self, ctx: ImportContext) -> None:
        node = ctx.node
        try:
            s = onnx.defs.get_schema(node.op_type, max(ctx.opset, 1), node.domain)
        except Exception:
            return  # an operator ONNX does not know: opaque, never an error
        n = len(ctx.inputs)
        if n < s.min_input or n > s.max_input:
            raise ModelError(f"node {self.label(node)} has {n} inputs; {node.op_type}-"
                             f"{s.since_version} takes {s.min_input} to {s.max_input}")

    # ---- opaque nodes -----------------------------------------------------------------
    def opaque(self, ctx: ImportContext) -> list[Tensor]:
        node = ctx.node
        outs = _strip(node.output)
        shapes, dtypes = [], []
        for k, name in enumerate(outs):
            if not name:
                shapes.append(())
                dtypes.append("")  # an omitted optional output
                continue
            shape, dtype = self.types.get(name, (None, None))
            if dtype is not None and dtype not in ELEM_TYPES:
                raise ModelError(f"{name!r} (output {k} of node {self.label(node)}) is a "
                                 f"{dtype}, not a tensor")
            if shape is None or dtype is None:
                raise ModelError(f"cannot determine the shape of {name!r} (output {k} of node "
                                 f"{self.label(node)}): ONNX cannot infer it and "
                                 f"onnxruntime cannot run the model on random inputs")
            shapes.append(shape)
            dtypes.append(dtype)
        outer = outer_names(node.attribute)
        inputs = [t for t in ctx.inputs if t is not None] + [self.tensors[n] for n in outer]
        attrs = dict(onnx_type=node.op_type, domain=node.domain if node.domain != "ai.onnx"
                     else "", onnx_attrs=tuple(a.SerializeToString() for a in
                                               sorted(node.attribute, key=lambda a: a.name)),
                     out_shapes=tuple(shapes), out_dtypes=tuple(dtypes), opset=ctx.opset,
                     absent=tuple(k for k, t in enumerate(ctx.inputs) if t is None),
                     outer=tuple(outer))
        dynamic_in = any(t.ref in self.dynamic for t in inputs)
        dynamic = [dynamic_in or o in self.measured for o in outs]
        folded = None if any(dynamic) else self._fold(attrs, inputs, outs)
        if folded is not None:
            return folded
        ts = self.g.add_node("opaque", inputs, name=node.name or None, **attrs)
        self.dynamic.update(t.ref for t, d in zip(ts, dynamic) if d)
        return ts

    def _fold(self, attrs: dict, inputs: list[Tensor], outs: list[str]) -> list[Tensor] | None:
        """Evaluate an opaque node on weights into weights, when that does not grow
        the model (shape arithmetic, casts; not ConstantOfShape or Range)."""
        if (not inputs or attrs["onnx_type"] in RANDOM_OPS or "" in attrs["out_dtypes"]
                or any(self.g.nodes[t.node].op != "weight" for t in inputs)):
            return None
        size_in = sum(int(np.prod(t.shape)) for t in inputs)
        if sum(int(np.prod(s)) for s in attrs["out_shapes"]) > size_in:
            return None
        full = dict(OPS["opaque"].make_attrs(**attrs))
        try:
            vals = run_attrs(full, [self.g.nodes[t.node].data for t in inputs])
        except Exception:
            return None
        return [self.weight(np.asarray(v), name) for v, name in zip(vals, outs)]

    # ---- values known before run time --------------------------------------------------
    def _is_weight_only(self, nid: int) -> bool:
        if nid not in self._weight_only:
            for k in sorted(set(self.g.nodes) - set(self._weight_only)):
                n = self.g.nodes[k]
                self._weight_only[k] = n.op == "weight" or (
                    n.op != "input" and all(self._weight_only[p] for p, _ in n.inputs))
        return self._weight_only[nid]

    def value(self, t: Tensor) -> np.ndarray | None:
        """The value of a weight-only tensor (evaluated once), else None."""
        n = self.g.nodes[t.node]
        if n.op == "weight":
            return n.data
        if not self._is_weight_only(t.node):
            return None
        if t.ref not in self._values:
            try:
                vals = self._evaluate(n)
            except Exception:
                vals = [None] * len(n.shapes)
            for i, v in enumerate(vals):
                self._values[(n.id, i)] = v
        return self._values[t.ref]

    def _evaluate(self, n: Node) -> list[np.ndarray]:
        xs = []
        for p, i in n.inputs:
            v = self.value(Tensor(self.g, p, i))
            if v is None:
                raise ValueError("input not known")
            xs.append(v)
        if n.op == "opaque":
            return run_opaque(n, xs)
        return get_op(n.op).run_ref(n.a, xs)


def _made(n: Node) -> tuple:
    """What an imported node is, apart from its shapes at this binding."""
    attrs = tuple((k, v) for k, v in n.attrs if not (n.op == "opaque" and k == "out_shapes"))
    if n.op in ("weight", "input"):
        attrs = ()
    data = None
    if n.data is not None:
        data = (n.data.dtype.str, n.data.shape, n.data.tobytes() if n.data.dtype != object
                else repr(n.data.tolist()))
    return (n.op, attrs, n.dtypes, data)


# ---- nodes whose value is known at load time: they become weights -------------------
def _import_constant(ctx: ImportContext) -> list[Tensor] | None:
    kinds = {"value": None, "value_float": np.float32, "value_floats": np.float32,
             "value_int": np.int64, "value_ints": np.int64, "value_string": object,
             "value_strings": object}
    for k, dtype in kinds.items():
        v = ctx.attr(k)
        if v is not None:
            return [ctx.weight(np.asarray(v, dtype=dtype))]
    return None  # sparse_value: opaque


def _import_shape(ctx: ImportContext) -> list[Tensor]:
    shape = ctx.inputs[0].shape
    r = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", r)
    start, end = (min(max(k + r if k < 0 else k, 0), r) for k in (start, end))
    return [ctx.weight(np.array(shape[start:end], np.int64))]


def _import_size(ctx: ImportContext) -> list[Tensor]:
    return [ctx.weight(np.array(int(np.prod(ctx.inputs[0].shape)), np.int64))]


_SOURCES = {"Constant": _import_constant, "Shape": _import_shape, "Size": _import_size}
