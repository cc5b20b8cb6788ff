"""The graph IR: a DAG of nodes, each an operator applied to earlier nodes' outputs.

Nodes are appended in a topological order (an input must exist before its
consumer), so insertion order is always a valid evaluation order. A `Tensor` is
a handle to one output of one node. Graph inputs (`input` nodes) are activations;
`weight` nodes carry data. The builder API is the operator registry itself:
`g.conv2d(...)` calls `OPS["conv2d"].build(g, ...)`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ops import OPS, ShapeError, get_op
from .ops.base import Attrs, Shape


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
                   if n.id in live and n.op not in ("input", "weight"))

    def node_hashes(self) -> dict[int, bytes]:
        """Structural (Merkle) hash of every node: sources by name, others by
        operator, attributes and their inputs' hashes."""
        h: dict[int, bytes] = {}
        for n in self.topo_order():
            m = hashlib.blake2b(digest_size=16)
            m.update(repr((n.op, n.attrs)).encode())
            if n.op in ("input", "weight"):
                m.update(repr((n.name, n.shapes)).encode())
            for p, i in n.inputs:
                m.update(h[p])
                m.update(i.to_bytes(2, "little"))
            h[n.id] = m.digest()
        return h

    def hash(self) -> str:
        """Canonical hash: independent of node order and node ids, dependent on
        structure, attributes, source names and the ordered outputs."""
        h = self.node_hashes()
        m = hashlib.blake2b(digest_size=16)
        for nid, i in self.outputs:
            m.update(h[nid])
            m.update(i.to_bytes(2, "little"))
        return m.hexdigest()

    # ---- evaluation -----------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray],
            apply: Callable[[Node, list[np.ndarray]], list[np.ndarray]],
            weight_value: Callable[[Node], np.ndarray]) -> list[np.ndarray]:
        """Evaluate the live nodes with a semantics given by `apply`."""
        live = self.live()
        vals: dict[int, list[np.ndarray]] = {}
        for n in self.topo_order():
            if n.id not in live:
                continue
            if n.op == "input":
                if n.name in feeds:
                    vals[n.id] = [feeds[n.name]]
                elif n.data is not None:  # an overridable initializer: its default
                    vals[n.id] = [n.data]
                else:
                    raise KeyError(f"no value fed for input {n.name!r}")
            elif n.op == "weight":
                vals[n.id] = [weight_value(n)]
            else:
                vals[n.id] = apply(n, [vals[p][i] for p, i in n.inputs])
        return [vals[nid][i] for nid, i in self.outputs]

    def evaluate(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
                 seed: int = 0) -> list[np.ndarray]:
        """Run the float32 numpy reference; returns the outputs in order. `inputs`
        maps input names to arrays (or lists them in input order); missing inputs
        get seeded random values (see `random_inputs`)."""
        feeds = self.feeds(inputs, seed)

        def apply(n: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
            if n.op == "opaque":
                from .onnx_io import run_opaque
                return run_opaque(n, xs)
            return get_op(n.op).run_ref(n.a, xs)

        return self.run(feeds, apply, lambda n: n.data)

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
        g.outputs = [(remap[p], i) for p, i in self.outputs]
        g.output_names = list(self.output_names)
        g.dim_params = dict(self.dim_params)
        g.output_dim_params = dict(self.output_dim_params)
        return g

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for n in self.nodes.values():
            if n.op not in ("input", "weight"):
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


def iter_ops(g: Graph) -> Iterable[Node]:
    return (n for n in g.topo_order() if n.op not in ("input", "weight"))


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
