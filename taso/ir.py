"""The graph IR: a DAG of nodes, each an operator applied to earlier nodes' outputs.

Nodes are appended in a topological order (an input must exist before its
consumer), so insertion order is always a valid evaluation order. A `Tensor` is
a handle to one output of one node. Graph inputs (`input` nodes) are activations;
`weight` nodes carry data. The builder API is the operator registry itself:
`g.conv2d(...)` calls `OPS["conv2d"].build(g, ...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ops import OPS, ShapeError, get_op
from .ops.base import Attrs, Shape
from .stablehash import ints_hash, node_hash, output_hash

SOURCES = ("input", "weight")  # nodes that compute nothing: fed, or carrying data


@dataclass(frozen=True)
class Tensor:
    """Output `index` of node `node` in `graph`."""

    graph: Graph = field(repr=False, compare=False)
    node: int
    index: int = 0

    @property
    def shape(self) -> Shape:
        return self.graph.nodes[self.node].shapes[self.index]

    @property
    def dtype(self) -> str:
        return self.graph.nodes[self.node].dtypes[self.index]

    @property
    def op(self) -> str:
        return self.graph.nodes[self.node].op

    @property
    def ref(self) -> tuple[int, int]:
        return (self.node, self.index)


@dataclass
class Node:
    id: int
    op: str
    attrs: Attrs
    inputs: tuple[tuple[int, int], ...]  # (producer node id, output index)
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    name: str | None = None  # inputs, weights and ONNX node names
    data: np.ndarray | None = None  # weights only

    @property
    def a(self) -> dict[str, Any]:
        return dict(self.attrs)


class Graph:
    def __init__(self, seed: int = 0):
        self.nodes: dict[int, Node] = {}
        self.outputs: list[tuple[int, int]] = []
        self.output_names: list[str] = []
        self._next = 0
        self._rng = np.random.default_rng(seed)
        # Symbolic dimensions the graph stands for (load_onnx of a model with
        # dim_params): input name -> per axis the dim_param or None, and the
        # same for outputs by name. The shapes themselves are those of one
        # binding; export_onnx writes these names back.
        self.dim_params: dict[str, tuple[str | None, ...]] = {}
        self.output_dim_params: dict[str, tuple[str | None, ...]] = {}

    # ---- construction ----------------------------------------------------------
    def add_node(self, op: str, inputs: Sequence[Tensor], name: str | None = None,
                 data: np.ndarray | None = None, **attrs: Any) -> list[Tensor]:
        """Append `op` applied to `inputs`; returns its output tensors. Shape errors
        name the operator and the input shapes."""
        o = get_op(op)
        for t in inputs:
            if not isinstance(t, Tensor) or t.graph is not self:
                raise ShapeError(f"{op}: inputs must be tensors of this graph, got {t!r}")
        attr_tuple = o.make_attrs(**attrs)
        shapes = [t.shape for t in inputs]
        if o.axes:  # axes held non-negative: one meaning for rules and proofs
            attr_tuple = o.make_attrs(**o.normalize(dict(attr_tuple), shapes))
        try:
            out = o.out_shapes(dict(attr_tuple), shapes)
        except (ZeroDivisionError, OverflowError, TypeError) as e:  # a stride of 0, a bad type
            raise ShapeError(f"{op}: attributes {dict(attr_tuple)} do not apply to input "
                             f"shapes {shapes}: {e}") from None
        for s in out:
            if any(d < 0 for d in s):
                raise ShapeError(f"{op}: negative output dimension {s} from input shapes "
                                 f"{shapes}")
        dtypes = self._dtypes(o, dict(attr_tuple), [t.dtype for t in inputs], len(out))
        nid = self._next
        self._next += 1
        self.nodes[nid] = Node(nid, op, attr_tuple, tuple(t.ref for t in inputs),
                               tuple(out), dtypes, name, data)
        return [Tensor(self, nid, i) for i in range(len(out))]

    def append_inferred(self, op: str, attrs: Attrs, inputs: Sequence[tuple[int, int]],
                        shapes: tuple[Shape, ...], dtypes: tuple[str, ...]) -> int:
        """Append a node whose attributes, output shapes and dtypes are known
        from an `add_node` of the same operator, attributes and input shapes
        (a rebuild of a rewritten graph); returns its id."""
        nid = self._next
        self._next += 1
        self.nodes[nid] = Node(nid, op, attrs, tuple(inputs), shapes, dtypes)
        return nid

    @staticmethod
    def _dtypes(o, a, in_dtypes, n) -> tuple[str, ...]:
        if "out_dtypes" in a:
            return tuple(a["out_dtypes"])
        if "dtype" in a:
            return (a["dtype"],) * n
        return (in_dtypes[0] if in_dtypes else "float32",) * n

    def new_input(self, dims: Sequence[int], name: str | None = None,
                  dtype: str = "float32", default: np.ndarray | None = None) -> Tensor:
        """An activation fed at run time. With `default` it is an overridable
        initializer: ONNX lists it among the inputs and initializers, a run
        that does not feed it reads the default, and no rewrite folds it."""
        dims = _dims(dims, "new_input")
        name = name or f"input{len(self.inputs)}"
        if default is not None:
            default = np.asarray(default)
            if tuple(default.shape) != dims:
                raise ShapeError(f"input {name!r}: default of shape {default.shape} != dims "
                                 f"{dims}")
        return self.add_node("input", [], name=name, shape=dims, dtype=dtype, data=default)[0]

    def new_weight(self, dims: Sequence[int], data: np.ndarray | None = None,
                   name: str | None = None, scale: float | None = None) -> Tensor:
        """A weight with the given data, or random data (He-style scale by fan-in
        unless `scale` is given) so activations stay O(1) through deep models."""
        dims = _dims(dims, "new_weight")
        if data is None:
            fan_in = int(np.prod(dims[1:])) if len(dims) > 1 else 1
            s = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
            data = (self._rng.standard_normal(dims) * s).astype(np.float32)
        data = np.asarray(data)
        if data.dtype == np.float64:
            data = data.astype(np.float32)
        if tuple(data.shape) != dims:
            raise ShapeError(f"weight: data shape {data.shape} != dims {dims}")
        name = name or f"w{sum(n.op == 'weight' for n in self.nodes.values())}"
        return self.add_node("weight", [], name=name, data=data, shape=dims,
                             dtype=str(data.dtype))[0]

    def mark_output(self, t: Tensor, name: str | None = None) -> Tensor:
        if not isinstance(t, Tensor) or t.graph is not self or t.node not in self.nodes \
                or not 0 <= t.index < len(self.nodes[t.node].shapes):
            raise ShapeError(f"mark_output: {t!r} is not a tensor of this graph")
        self.outputs.append(t.ref)
        self.output_names.append(name or f"output{len(self.outputs) - 1}")
        return t

    def tensor(self, ref: tuple[int, int]) -> Tensor:
        return Tensor(self, *ref)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # The builder API: g.<op>(...) is that operator's `build`.
        op = OPS.get(name)
        if op is None or name.startswith("_"):
            raise AttributeError(f"Graph has no attribute or operator {name!r}")
        return lambda *args, **kw: op.build(self, *args, **kw)

    # ---- queries --------------------------------------------------------------
    @property
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.op == "input"]

    @property
    def weights(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.op == "weight"]

    def topo_order(self) -> list[Node]:
        """Nodes in evaluation order (insertion order is topological by construction)."""
        return list(self.nodes.values())

    def live(self) -> set[int]:
        """Ids of nodes some output depends on (plus every graph input)."""
        seen = {n.id for n in self.inputs}
        stack = [nid for nid, _ in self.outputs]
        while stack:
            nid = stack.pop()
            if nid in seen and self.nodes[nid].op != "input":
                continue
            seen.add(nid)
            stack.extend(p for p, _ in self.nodes[nid].inputs if p not in seen)
        return seen

    def consumers(self) -> dict[int, list[int]]:
        uses: dict[int, list[int]] = {nid: [] for nid in self.nodes}
        for n in self.nodes.values():
            for p, _ in n.inputs:
                uses[p].append(n.id)
        return uses

    def num_ops(self) -> int:
        """Operator nodes that compute something (sources excluded)."""
        live = self.live()
        return sum(1 for n in self.nodes.values()
                   if n.id in live and n.op not in SOURCES)

    def node_hashes(self) -> dict[int, int]:
        """Structural (Merkle) hash of every node (`taso.stablehash.node_hash`):
        sources by name and shape, others by operator, attributes and their
        input tensors' hashes."""
        h: dict[int, int] = {}
        for n in self.topo_order():
            label = (n.attrs, n.name, n.shapes) if n.op in SOURCES else n.attrs
            h[n.id] = node_hash(n.op, label, [output_hash(h[p], i) for p, i in n.inputs])
        return h

    def hash(self) -> str:
        """Canonical hash: independent of node order and node ids, dependent on
        structure, attributes, source names and the ordered outputs; the same
        in every process."""
        h = self.node_hashes()
        return f"{ints_hash([output_hash(h[p], i) for p, i in self.outputs]):016x}"

    def constant_nodes(self, opaque: bool = False) -> set[int]:
        """Ids of the nodes whose value is known before the model runs (see
        `is_constant`)."""
        const: set[int] = set()
        for n in self.topo_order():
            if is_constant(n, const, opaque):
                const.add(n.id)
        return const

    # ---- evaluation -----------------------------------------------------------
    def values(self, want: Iterable[int], feeds: Mapping[str, np.ndarray] | None = None,
               apply: Apply | None = None, weight_value: Callable[[Node], Any] | None = None,
               memo: dict[int, list[Any]] | None = None) -> dict[int, list[Any]]:
        """The outputs of the nodes `want` and of every node they read, by node
        id: inputs from `feeds` (else their default), weights by `weight_value`
        (default: their data), every other node by `apply` (default: the numpy
        reference, `run_node`). `memo` holds values already known and receives
        the new ones. The one graph evaluator: every semantics plugs in here."""
        apply = apply or run_node
        vals = {} if memo is None else memo
        need: set[int] = set()
        stack = [nid for nid in want if nid not in vals]
        while stack:
            nid = stack.pop()
            if nid not in need:
                need.add(nid)
                stack.extend(p for p, _ in self.nodes[nid].inputs if p not in vals)
        for nid in sorted(need):  # ids grow in evaluation order (insertion order)
            n = self.nodes[nid]
            if n.op == "input":
                vals[nid] = [self._fed(n, feeds or {})]
            elif n.op == "weight":
                vals[nid] = [n.data if weight_value is None else weight_value(n)]
            else:
                vals[nid] = apply(n, [vals[p][i] for p, i in n.inputs])
        return vals

    @staticmethod
    def _fed(n: Node, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        if n.name in feeds:
            return feeds[n.name]
        if n.data is not None:  # an overridable initializer: its default
            return n.data
        raise KeyError(f"no value fed for input {n.name!r}")

    def run(self, feeds: Mapping[str, np.ndarray], apply: Apply | None = None,
            weight_value: Callable[[Node], Any] | None = None) -> list[Any]:
        """The outputs, in order, with a semantics given by `apply` (see `values`).
        Every graph input must be fed or have a default."""
        for n in self.inputs:
            self._fed(n, feeds)
        vals = self.values([nid for nid, _ in self.outputs], feeds, apply, weight_value)
        return [vals[nid][i] for nid, i in self.outputs]

    def evaluate(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
                 seed: int = 0) -> list[np.ndarray]:
        """Run the float32 numpy reference; returns the outputs in order. `inputs`
        maps input names to arrays (or lists them in input order); missing inputs
        get seeded random values (see `random_inputs`)."""
        return self.run(self.feeds(inputs, seed))

    def feeds(self, inputs=None, seed: int = 0) -> dict[str, np.ndarray]:
        if inputs is None:
            return self.random_inputs(seed)
        if isinstance(inputs, Mapping):
            return dict(inputs)
        return {n.name: x for n, x in zip(self.inputs, inputs)}

    def random_inputs(self, seed: int = 0, overridable: bool = False) -> dict[str, np.ndarray]:
        """Seeded standard-normal float inputs (small non-negative ints for int
        inputs), keyed by input name. An overridable initializer gets its
        default, or with `overridable` a random value too where it is a float
        (an integer one is usually a shape or an index, which only its
        default keeps valid)."""
        rng = np.random.default_rng(seed)
        out = {}
        for n in self.inputs:
            x = random_array(n.shapes[0], n.dtypes[0], rng)
            if n.data is not None and not (overridable and n.dtypes[0].startswith("float")):
                x = n.data
            out[n.name] = x
        return out

    @property
    def overridable(self) -> list[Node]:
        """Inputs with a default value (ONNX initializers listed as inputs)."""
        return [n for n in self.inputs if n.data is not None]

    # ---- editing ----------------------------------------------------------------
    def pruned(self) -> Graph:
        """A copy without dead nodes, ids renumbered in order."""
        live = self.live()
        g = Graph()
        remap: dict[int, int] = {}
        for n in self.topo_order():
            if n.id not in live:
                continue
            remap[n.id] = g._next
            g.nodes[g._next] = Node(g._next, n.op, n.attrs,
                                    tuple((remap[p], i) for p, i in n.inputs),
                                    n.shapes, n.dtypes, n.name, n.data)
            g._next += 1
        return self._with_io(g, [(remap[p], i) for p, i in self.outputs])

    def deduplicated(self) -> Graph:
        """A copy in which nodes that compute the same value (the same operator
        and attributes on the same inputs) are one, their consumers reading the
        first: the graph as a runtime's common-subexpression elimination leaves
        it (onnxruntime's, at every optimization level). Ids are kept; a node
        that is a graph output or opaque (an ONNX operator taso does not know,
        perhaps a random one) stays itself."""
        outputs = {p for p, _ in self.outputs}
        first: dict[tuple, int] = {}
        same: dict[int, int] = {}
        g = Graph()
        for n in self.topo_order():
            inputs = tuple((same.get(p, p), i) for p, i in n.inputs)
            key = (n.op, n.attrs, inputs)
            computed = n.op not in SOURCES
            if computed and n.op != "opaque" and n.id not in outputs and key in first:
                same[n.id] = first[key]
                continue
            if computed:
                first.setdefault(key, n.id)
            g.nodes[n.id] = n if inputs == n.inputs else \
                Node(n.id, n.op, n.attrs, inputs, n.shapes, n.dtypes, n.name, n.data)
        g._next = self._next
        return self._with_io(g, list(self.outputs))

    def _with_io(self, g: Graph, outputs: list[tuple[int, int]]) -> Graph:
        """`g` given `outputs` and this graph's output names and symbolic dims."""
        g.outputs = outputs
        g.output_names = list(self.output_names)
        g.dim_params = dict(self.dim_params)
        g.output_dim_params = dict(self.output_dim_params)
        return g

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for n in self.nodes.values():
            if n.op not in SOURCES:
                counts[n.op] = counts.get(n.op, 0) + 1
        body = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        return f"Graph({len(self.inputs)} inputs, {len(self.weights)} weights, " \
               f"{sum(counts.values())} ops [{body}], {len(self.outputs)} outputs)"

    __repr__ = summary


def _dims(dims: Sequence[int], what: str) -> tuple[int, ...]:
    """`dims` as a tuple of non-negative ints, or a ShapeError naming them."""
    try:
        out = tuple(dims)
    except TypeError:
        raise ShapeError(f"{what}: dims must be a sequence of ints, got {dims!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
               and d >= 0 for d in out):
        raise ShapeError(f"{what}: dims must be non-negative ints, got {dims!r}")
    return tuple(int(d) for d in out)


def new_graph(seed: int = 0) -> Graph:
    """An empty graph for the builder API; `seed` fixes random weights."""
    return Graph(seed)


Apply = Callable[[Node, list[Any]], list[Any]]


def run_node(n: Node, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One node's outputs by the float32 numpy reference (an opaque node's in
    onnxruntime, see `taso.onnx_io.opaque`)."""
    return get_op(n.op).run_ref(n.a, xs)


def is_constant(n: Node, const: set[int], opaque: bool = False) -> bool:
    """Whether node `n`'s value is known before the model runs, given the ids
    `const` of the constant nodes before it: a weight, a constant generator (an
    operator with `weight_only`), or a node computed from constants alone.
    Opaque nodes count only with `opaque`, and never one that draws random
    values: the loader evaluates them, while elsewhere an unknown operator is
    never folded (the loader already folded those worth folding)."""
    if n.op in SOURCES:
        return n.op == "weight"
    if n.op == "opaque" and not (opaque and get_op(n.op).pure(n.a)):
        return False
    if not n.inputs:
        return get_op(n.op).weight_only or n.op == "opaque"
    return all(p in const for p, _ in n.inputs)


def iter_ops(g: Graph) -> Iterable[Node]:
    return (n for n in g.topo_order() if n.op not in SOURCES)


def random_array(shape: Shape, dtype: str, rng: np.random.Generator,
                 int_low: int = 0) -> np.ndarray:
    """The random tensor every check feeds: standard normal floats, random
    bools, ints in {int_low, int_low + 1} (0 and 1 stay valid indices; a low
    of 1 keeps a value read as a size from emptying a shape), strings "a"."""
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype == "string":
        return np.full(shape, "a", dtype=object)
    return rng.integers(int_low, int_low + 2, shape).astype(dtype)
