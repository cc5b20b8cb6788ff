"""Loading: an ONNX model read, checked and turned into a `Graph`.

Graph inputs keep their names and dtypes, initializers and Constant nodes
become weights, each node goes to the importer its operator registered
(`taso.ops.base.onnx_importer`), and every node without one (or whose importer
declines) becomes an `opaque` node that onnxruntime evaluates and no rule
matches. Errors in the model are `ModelError`s with a one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..cli import first_line
from ..errors import ModelError
from ..ir import Graph, Node, Tensor, is_constant, run_node
from ..ops import ONNX_IMPORTERS, ShapeError, get_op
from ..ops.base import Shape
from .common import ELEM_TYPES, array_dtype, dtype_name, outer_names
from .importer import SOURCE_IMPORTERS, ImportContext, strip
from .opaque import Opaque, run_attrs
from .read import bind_inputs, node_label, normalize, read_model, shape_value, topo_order
from .symbolic import bindings, input_shapes_at, symbolic_axes
from .types import measure_types, value_types


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
    given = {k: shape_value(k, v) for k, v in (input_shapes or {}).items()}
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
    bind_inputs(m, shapes)
    m = normalize(m)
    loader = _Loader(m, freeze, forced)
    return loader.run(), loader.made


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
        self.types = value_types(model)
        # Values whose shape only a run could tell (data-dependent, or beyond
        # shape inference), and the nodes computing from them: such nodes stay
        # opaque, so no static shape is baked into what they compute.
        self.measured: set[str] = set()
        self.dynamic: set[tuple[int, int]] = set()
        self._index = -1  # of the node being imported, for messages
        self._values: dict[int, list[np.ndarray | None]] = {}  # of constant nodes
        self._const: set[int] = set()  # ids of the constant nodes among the first
        self._classified = 0  # ... this many

    def opset(self, domain: str) -> int:
        return self.opsets.get("" if domain == "ai.onnx" else domain, 0)

    def run(self) -> Graph:
        graph = self.model.graph
        inits = {t.name: t for t in graph.initializer}
        for t in graph.sparse_initializer:
            raise ModelError(f"sparse initializer {t.values.name!r} is not supported")
        feeds: dict[str, tuple[Shape, str]] = {}
        for vi in graph.input:  # their names are distinct (bind_inputs)
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
        order = topo_order(graph, set(self.tensors))
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
            for name, st in measure_types(self.model, missing, feeds).items():
                self.types[name] = st
                self.measured.add(name)

    def label(self, node: onnx.NodeProto) -> str:
        return node_label(node, self._index)

    def weight(self, data: np.ndarray, name: str) -> Tensor:
        return self.g.add_node("weight", [], name=name, data=data, shape=data.shape,
                               dtype=array_dtype(data))[0]

    def _import(self, node: onnx.NodeProto) -> list[Tensor]:
        ctx = ImportContext(self, node)
        self._check_arity(ctx)
        onnx_domain = node.domain in ("", "ai.onnx")
        fn = SOURCE_IMPORTERS.get(node.op_type) if onnx_domain else None
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
        names = strip(node.output)
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
        outs = strip(node.output)
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
        if (not inputs or not Opaque.pure(attrs) or "" in attrs["out_dtypes"]
                or any(self.g.nodes[t.node].op != "weight" for t in inputs)):
            return None
        size_in = sum(int(np.prod(t.shape)) for t in inputs)
        if sum(int(np.prod(s)) for s in attrs["out_shapes"]) > size_in:
            return None
        full = dict(get_op("opaque").make_attrs(**attrs))
        try:
            vals = run_attrs(full, [self.g.nodes[t.node].data for t in inputs])
        except Exception:
            return None
        return [self.weight(np.asarray(v), name) for v, name in zip(vals, outs)]

    # ---- values known before run time --------------------------------------------------
    def value(self, t: Tensor) -> np.ndarray | None:
        """The value of a constant tensor (`taso.ir.is_constant`, opaque nodes
        included; evaluated once), else None."""
        n = self.g.nodes[t.node]
        if n.op == "weight":
            return n.data
        for k in range(self._classified, self.g._next):  # the nodes added since
            if k in self.g.nodes and is_constant(self.g.nodes[k], self._const, opaque=True):
                self._const.add(k)
        self._classified = self.g._next
        if t.node not in self._const:
            return None
        return self.g.values([t.node], apply=_value_or_none, memo=self._values)[t.node][t.index]


def _value_or_none(n: Node, xs: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """A node's outputs, or None for each where an input is unknown or the
    evaluation fails (the importer then treats the value as unknown)."""
    if any(x is None for x in xs):
        return [None] * len(n.shapes)
    try:
        return run_node(n, xs)
    except Exception:
        return [None] * len(n.shapes)


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
