"""ONNX import and export.

`load_onnx` turns a model into a `Graph`: graph inputs keep their names and
dtypes, initializers and Constant nodes become weights, each node goes to the
importer its operator registered (`taso.ops.base.onnx_importer`), and every
node without one (or whose importer declines) becomes an `opaque` node that
onnxruntime evaluates and no rule matches. `export_onnx` writes a Graph back
through each operator's `onnx` method. Errors in the model are `ModelError`s
with a one-line message.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from .errors import ModelError
from .ir import Graph, Node, Tensor
from .ops import ONNX_IMPORTERS, OPS, ShapeError, get_op
from .ops.base import Shape

MIN_OPSET = 13  # older models are converted up to this opset on load
DEFAULT_OPSET = 17
MIN_IR = 10  # the exported IR version: covers every tensor type onnxruntime reads

# Opaque operators never folded into weights: their value is not a function of
# their inputs.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial"}


# ---- dtypes ---------------------------------------------------------------------
def dtype_name(elem_type: int) -> str:
    """The IR's dtype string for an ONNX element type: the numpy name where numpy
    (or ml_dtypes) has one, "string" for strings."""
    if elem_type == TensorProto.STRING:
        return "string"
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()


_ELEM: dict[str, int] = {}
for _name, _v in TensorProto.DataType.items():
    if _v:
        _ELEM.setdefault(dtype_name(_v), _v)


def elem_type(dtype: str) -> int:
    try:
        return _ELEM[dtype]
    except KeyError:
        raise ModelError(f"dtype {dtype!r} has no ONNX element type") from None


def array_dtype(x: np.ndarray) -> str:
    return "string" if x.dtype == object or x.dtype.kind in "US" else str(x.dtype)


# ---- loading --------------------------------------------------------------------
def load_onnx(src: str | os.PathLike | bytes | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Load an ONNX model (a path, serialized bytes or a ModelProto) as a Graph.
    Symbolic input dimensions must be bound by `input_shapes`."""
    model = _read(src)
    _bind_inputs(model, input_shapes or {})
    model = _normalize(model)
    return _Loader(model).run()


def _read(src: Any) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(src)
        return m
    if isinstance(src, (bytes, bytearray)):
        what, data = "the given bytes", bytes(src)
    else:
        path = os.fspath(src)
        if not os.path.isfile(path):
            raise ModelError(f"no such model file: {path}")
        what = path
        with open(path, "rb") as f:
            data = f.read()
    try:
        m = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and friends
        raise ModelError(f"cannot parse {what} as an ONNX model "
                         f"(truncated or malformed): {_line(e)}") from None
    if not m.HasField("graph") or not m.graph.output:
        raise ModelError(f"{what} holds no graph with outputs (truncated or malformed?)")
    if not isinstance(src, (bytes, bytearray)) and any(
            t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(m, os.path.dirname(what))
        except Exception as e:
            raise ModelError(f"cannot read the external data of {what}: {_line(e)}") from None
    return m


def _line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _bind_inputs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Give every graph input a static shape, from the model or `input_shapes`."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in inits]
    unknown = set(input_shapes) - {vi.name for vi in inputs}
    if unknown:
        raise ModelError(f"input_shapes names {sorted(unknown)}, which are not graph inputs "
                         f"(inputs: {[vi.name for vi in inputs]})")
    for vi in inputs:
        name = vi.name
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ModelError(f"input {name!r} is a {kind or 'untyped value'}, not a tensor")
        tt = vi.type.tensor_type
        if tt.elem_type == TensorProto.UNDEFINED:
            raise ModelError(f"input {name!r} has no element type")
        hint = f"pass input_shapes={{{name!r}: [...]}}"
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        given = input_shapes.get(name)
        if given is None:
            if dims is None:
                raise ModelError(f"input {name!r} has no shape: {hint}")
            for k, d in enumerate(dims):
                if not d.HasField("dim_value"):
                    label = repr(d.dim_param) if d.dim_param else "unknown"
                    raise ModelError(f"input {name!r} dim {k} ({label}) is symbolic: {hint}")
            continue
        given = [int(d) for d in given]
        if dims is not None:
            if len(dims) != len(given):
                raise ModelError(f"input {name!r} has rank {len(dims)}, "
                                 f"input_shapes gives {given}")
            for k, (d, n) in enumerate(zip(dims, given)):
                if d.HasField("dim_value") and d.dim_value != n:
                    raise ModelError(f"input {name!r} dim {k} is {d.dim_value} in the model, "
                                     f"input_shapes gives {n}")
        if min(given, default=0) < 0:
            raise ModelError(f"input {name!r}: negative dimension in {given}")
        tt.shape.Clear()
        for n in given:
            tt.shape.dim.add().dim_value = n


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
            raise ModelError(f"cannot inline the model's local functions: {_line(e)}") from None
    v = _opset_of(model)
    if 0 < v < MIN_OPSET:
        try:
            converted = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception:
            return model  # unknown ops block conversion; importers read ctx.opset
        if _signature(converted.graph) == _signature(model.graph):
            return converted  # else the conversion changed what the model takes (Scan-8)
    return model


def _signature(g: onnx.GraphProto) -> list[tuple[str, Any]]:
    """What a graph takes (names and full types) and gives (names, element types)."""
    return ([(v.name, v.type.SerializeToString()) for v in g.input]
            + [(v.name, v.type.tensor_type.elem_type) for v in g.output])


def _node_label(node: onnx.NodeProto, k: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{k} ({node.op_type})"


def _subgraphs(attrs: Sequence[AttributeProto]) -> list[onnx.GraphProto]:
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
            for s in _subgraphs(n.attribute):
                visit(s, bound)
            free.update(i for i in n.input if i and i not in bound)
            bound |= set(n.output)
        free.update(o.name for o in g.output if o.name not in bound)

    for s in _subgraphs(attrs):
        visit(s, set())
    return sorted(free)


def _all_names(attrs: Sequence[AttributeProto]) -> set[str]:
    """Every tensor name used anywhere in the subgraphs of `attrs`."""
    names: set[str] = set()
    stack = _subgraphs(attrs)
    while stack:
        g = stack.pop()
        names.update(v.name for v in (*g.input, *g.output, *g.value_info))
        names.update(t.name for t in g.initializer)
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            stack.extend(_subgraphs(n.attribute))
    names.discard("")
    return names


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


def _random_feed(shape: Shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype == "string":
        return np.full(shape, "a", dtype=object)
    return rng.integers(1, 3, shape).astype(dtype)  # no zeros: they often empty a shape


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
    feeds = {k: _random_feed(s, d, rng) for k, (s, d) in inputs.items()}
    try:
        sess = ort.InferenceSession(m.SerializeToString(), _session_options(),
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
    def __init__(self, model: onnx.ModelProto):
        self.model = model
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
        for vi in graph.input:
            if vi.name in inits or vi.name in self.tensors:
                continue
            tt = vi.type.tensor_type
            shape = tuple(d.dim_value for d in tt.shape.dim)
            feeds[vi.name] = (shape, dtype_name(tt.elem_type))
            self.tensors[vi.name] = self.g.new_input(shape, vi.name, feeds[vi.name][1])
        for name, t in inits.items():
            try:
                data = numpy_helper.to_array(t)
            except Exception as e:
                raise ModelError(f"initializer {name!r} cannot be read: {_line(e)}") from None
            self.tensors[name] = self.weight(data, name)
        order = _topo_order(graph, set(self.tensors))
        self._fill_types(list(graph.node), feeds)
        for k in order:
            node = graph.node[k]
            self._index = k
            outs = self._import(node)
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
                   and self.types.get(o, (None, None))[1] in (None, *_ELEM)]
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
        if fn is None or any(t is not None and t.ref in self.dynamic for t in ctx.inputs):
            return self.opaque(ctx)
        try:
            outs = fn(ctx)
        except ShapeError:
            outs = None
        except Exception as e:  # an importer's bug or a model it cannot read
            raise ModelError(f"importing node {self.label(node)}: {type(e).__name__}: "
                             f"{_line(e)}") from e
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
            if dtype is not None and dtype not in _ELEM:
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


# ---- running opaque nodes -----------------------------------------------------------
_SESSIONS: dict[tuple, Any] = {}
_MAX_SESSIONS = 512


def _session_options():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # failures are exceptions; the log only repeats them
    return so


def _node_model(a: Mapping[str, Any], in_types: Sequence[tuple[Shape, str]]) -> onnx.ModelProto:
    """A model of the one ONNX node an opaque node stands for, inputs i0.., outputs o0.."""
    n_outer = len(a["outer"])
    n_explicit = len(in_types) - n_outer
    names = [f"__taso_i{k}" for k in range(n_explicit)] + list(a["outer"])
    explicit = iter(names[:n_explicit])
    ins = ["" if k in a["absent"] else next(explicit)
           for k in range(n_explicit + len(a["absent"]))]
    outs = ["" if dt == "" else f"__taso_o{k}" for k, dt in enumerate(a["out_dtypes"])]
    node = helper.make_node(a["onnx_type"], ins, outs, domain=a["domain"] or None)
    node.attribute.extend(AttributeProto.FromString(b) for b in a["onnx_attrs"])
    vi = [helper.make_tensor_value_info(n, elem_type(d), s) for n, (s, d) in zip(names, in_types)]
    # No output shapes: a data-dependent one may differ from the recorded one.
    vo = [helper.make_tensor_value_info(n, elem_type(d), None)
          for n, d in zip(outs, a["out_dtypes"]) if n]
    graph = helper.make_graph([node], "opaque", vi, vo)
    return _make_model(graph, {a["domain"]: a["opset"] or DEFAULT_OPSET})


def run_attrs(a: Mapping[str, Any], xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the ONNX node described by opaque attributes `a` in onnxruntime."""
    xs = [np.asarray(x) for x in xs]
    in_types = [(tuple(x.shape), array_dtype(x)) for x in xs]
    key = (tuple(sorted(a.items())), tuple(in_types))
    try:
        sess = _SESSIONS.get(key)
        if sess is None:
            sess = _session(_node_model(a, in_types))
            if len(_SESSIONS) >= _MAX_SESSIONS:
                _SESSIONS.pop(next(iter(_SESSIONS)))
            _SESSIONS[key] = sess
        vals = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
    except Exception:
        # Some nodes (a Scan whose body's shapes follow from its inputs' values)
        # run only with their inputs as constants.
        m = _node_model(a, in_types)
        m.graph.initializer.extend(numpy_helper.from_array(x, v.name)
                                   for x, v in zip(xs, m.graph.input))
        del m.graph.input[:]
        vals = _session(m).run(None, {})
    it = iter(vals)
    return [np.zeros((), np.float32) if dt == "" else np.asarray(next(it))
            for dt in a["out_dtypes"]]


def _session(m: onnx.ModelProto):
    import onnxruntime as ort

    return ort.InferenceSession(m.SerializeToString(), _session_options(),
                                providers=["CPUExecutionProvider"])


def run_opaque(node: Node, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate an opaque node on concrete inputs (onnxruntime, session cached)."""
    return run_attrs(node.a, xs)


# ---- export -------------------------------------------------------------------------
def _make_model(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> onnx.ModelProto:
    opsets = dict(opsets)
    opsets.setdefault("", DEFAULT_OPSET)
    ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    ir = max(helper.find_min_ir_version_for(ids, ignore_unknown=True), MIN_IR)
    return helper.make_model(graph, opset_imports=ids, ir_version=ir,
                             producer_name="taso")


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
    m = _node_model(a, in_types)
    try:
        c = onnx.version_converter.convert_version(m, em.opset)
        if _signature(c.graph) != _signature(m.graph):
            raise ValueError("the conversion changes its input or output types")
    except Exception as e:
        raise ModelError(f"cannot express {a['onnx_type']}-{a['opset']} at opset {em.opset} "
                         f"({_line(e)}); export at opset {a['opset']}") from None
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


def export_onnx(graph: Graph, opset: int | None = None) -> onnx.ModelProto:
    """Export a Graph as an ONNX model. `opset` defaults to 17, or to the opset its
    opaque nodes were imported at when that is newer."""
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
    if len(set(g.output_names)) != len(g.output_names):
        raise ModelError(f"graph output names repeat: {g.output_names}")
    reserved |= set(g.output_names) - reserved
    for n in g.nodes.values():
        if n.op == "opaque":
            attrs = [AttributeProto.FromString(b) for b in n.a["onnx_attrs"]]
            reserved |= _all_names(attrs) | set(n.a["outer"])
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
    for ref, name in zip(g.outputs, g.output_names):
        if names[ref] != name:
            em.node("Identity", [names[ref]], [name])
    inputs = [helper.make_tensor_value_info(n.name, elem_type(n.dtypes[0]), n.shapes[0])
              for n in g.inputs]
    outputs = [helper.make_tensor_value_info(name, elem_type(g.nodes[p].dtypes[i]),
                                             g.nodes[p].shapes[i])
               for (p, i), name in zip(g.outputs, g.output_names)]
    onnx_graph = helper.make_graph(em.nodes, "taso", inputs, outputs, em.initializers)
    return _make_model(onnx_graph, em.opsets)


__all__ = ["Emitter", "ImportContext", "export_onnx", "load_onnx", "run_opaque"]
