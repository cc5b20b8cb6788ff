"""RepGen enumeration of small graphs over the input family.

A graph is a tuple of nodes ``(op, attrs, inputs)`` whose inputs are tensor ids:
``0 .. I-1`` the family tensors, then each node's outputs in node order. Its
outputs are its sinks (node outputs nothing consumes); two graphs are
candidates for a rule when their sinks have the same fingerprints.

Round k extends by one node only the representative of each class of round
k-1 (RepGen, as in Quartz). A class here is keyed by the fingerprints of *all*
of a graph's tensors and of its sinks, not the sinks alone: a new node may read
an inner tensor (``t = a @ b; t + t @ c``), so the representative must hold
every value the others do.

Shape of the search (TASO's): at most `max_outputs` sinks with distinct values;
connected, except that two independent single operators may stand side by side
(the source of "two matmuls sharing an input = one matmul and a split").
"""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from taso.executor import Executor, SerialExecutor
from taso.ops import OPS
from taso.ops.base import register
from taso.stablehash import ints_hash, node_hash, output_hash

from .family import GenConfig, Instance, operator_instances
from .fingerprint import Digest, Fingerprints
from .store import ClassStore, GraphT, Member


@dataclass
class RoundStats:
    round: int
    reps_in: int
    graphs: int
    classes: int
    seconds: float


@dataclass
class Enumeration:
    cfg: GenConfig
    classes: ClassStore = field(default_factory=ClassStore)
    rounds: list[RoundStats] = field(default_factory=list)

    @property
    def graphs(self) -> int:
        return sum(r.graphs for r in self.rounds)


# ---- per-process context --------------------------------------------------------
@dataclass(frozen=True)
class TaskContext:
    """What every generator task carries: the configuration, and where each of
    its operators is defined, so that a worker started from scratch (spawn, a Ray
    node) registers the same operators the parent had, including ones added
    after `taso.ops` was imported."""

    cfg: GenConfig
    registry: tuple[tuple[str, str, str], ...]  # (operator, module, class name)

    @classmethod
    def of(cls, cfg: GenConfig) -> TaskContext:
        return cls(cfg, tuple((n, type(OPS[n]).__module__, type(OPS[n]).__qualname__)
                              for n in cfg.ops))


def ensure_registered(registry: tuple[tuple[str, str, str], ...]) -> None:
    """Register the operators a task names that this process lacks: importing
    their module registers them; a class registered by hand is registered here."""
    for name, module, qualname in registry:
        if name in OPS:
            continue
        obj: Any = importlib.import_module(module)
        if name not in OPS:
            for part in qualname.split("."):
                obj = getattr(obj, part)
            register(obj)
        if name not in OPS:
            raise RuntimeError(f"operator {name!r} is not registered by {module}.{qualname}")


_CTX: dict[str, Any] = {}


def init_worker(cfg: GenConfig | TaskContext) -> None:
    """Set this process up for `cfg` (again only if it changed: the evaluator's
    memo is worth keeping from one task to the next)."""
    ctx = cfg if isinstance(cfg, TaskContext) else TaskContext.of(cfg)
    if _CTX.get("ctx") == ctx:
        return
    ensure_registered(ctx.registry)
    _CTX.clear()
    _CTX.update(ctx=ctx, cfg=ctx.cfg, ev=Fingerprints(ctx.cfg.family, ctx.cfg.seed),
                inst=operator_instances(ctx.cfg))


def _context() -> tuple[GenConfig, Fingerprints, list[Instance]]:
    return _CTX["cfg"], _CTX["ev"], _CTX["inst"]


@dataclass
class Tensors:
    """The tensor table of one graph: values, shapes, producers, consumers."""

    vals: list[Digest]
    shapes: list[tuple]
    producer: list[int]  # node index, -1 for family tensors
    consumed: set[int]
    comp: list[int]  # component id of each node
    merkle: list[int]  # structural hash of each tensor
    node_merkle: list[int]  # structural hash of each node

    @property
    def n_comps(self) -> int:
        return len(set(self.comp))


def analyze(graph: GraphT, ev: Fingerprints) -> Tensors:
    vals = list(ev.inputs)
    shapes = [ev.shape(d) for d in vals]
    producer = [-1] * len(vals)
    merkle = list(range(len(vals)))
    node_merkle: list[int] = []
    consumed: set[int] = set()
    parent = list(range(len(graph)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for j, (op, attrs, ins) in enumerate(graph):
        consumed.update(ins)
        for t in ins:
            if producer[t] >= 0:
                parent[find(producer[t])] = find(j)
        outs = ev.apply(op, attrs, tuple(vals[t] for t in ins))
        h = node_hash(op, attrs, (merkle[t] for t in ins))
        node_merkle.append(h)
        for o, d in enumerate(outs):
            vals.append(d)
            shapes.append(ev.shape(d))
            producer.append(j)
            merkle.append(output_hash(h, o))
    return Tensors(vals, shapes, producer, consumed, [find(j) for j in range(len(graph))],
                   merkle, node_merkle)


def sinks_of(graph: GraphT, tt: Tensors, n_inputs: int) -> tuple[int, ...]:
    return tuple(t for t in range(n_inputs, len(tt.vals)) if t not in tt.consumed)


# ---- extension ---------------------------------------------------------------------
def _full_attrs(op: str, a: dict) -> tuple:
    return tuple((k, a[k] if k in a else d) for k, d in OPS[op].attrs.items())


def _candidates(graph: GraphT, tt: Tensors, ev: Fingerprints, inst: list[Instance],
                need: list[set[int]]) -> Iterable[tuple[str, tuple, tuple[int, ...]]]:
    """Every node (op, attrs, inputs) that type-checks on the graph's tensors and
    reads at least one tensor of each set in `need`."""
    by_shape: dict[tuple, list[int]] = {}
    for t, s in enumerate(tt.shapes):
        by_shape.setdefault(s, []).append(t)
    shapes = list(by_shape)
    if not need:
        for ins in inst:
            if ins.arity == 0:
                yield ins.op, _full_attrs(ins.op, dict(ins.attrs)), ()
    for ins in inst:
        if ins.arity == 0:
            continue
        for sh, attrs in _combos(ins, tuple(shapes), ev):
            for ts in itertools.product(*(by_shape[s] for s in sh)):
                if all(any(t in n for t in ts) for n in need):
                    yield ins.op, attrs, ts
    if len(need) < 2:
        yield from (c for c in _splits(graph, tt) if all(c[2][0] in n for n in need))


_TYPED: dict[tuple, tuple | None] = {}
_COMBOS: dict[tuple, list[tuple[tuple, tuple]]] = {}


def _combos(ins: Instance, shapes: tuple, ev: Fingerprints) -> list[tuple[tuple, tuple]]:
    """(operand shapes, node attributes) for every way `ins` type-checks on
    tensors of `shapes`, in a fixed order (memoized: a round's graphs share few
    sets of shapes, and a layer norm's three operands make many tuples)."""
    key = (ins, shapes)
    out = _COMBOS.get(key)
    if out is None:
        out = []
        for sh in itertools.product(shapes, repeat=ins.arity):
            attrs = _typed(ins, sh, ev)
            if attrs is not None:
                out.append((sh, attrs))
        _COMBOS[key] = out
    return out


def _typed(ins: Instance, shapes: tuple, ev: Fingerprints) -> tuple | None:
    """The node attributes of `ins` on operands of these shapes, or None where it
    does not apply (memoized: the same few shapes recur in every graph)."""
    key = (ins, shapes)
    try:
        return _TYPED[key]
    except KeyError:
        pass
    a = ins.concrete(shapes)
    attrs = None if a is None else _full_attrs(ins.op, a)
    if attrs is not None and ev.out_shapes(ins.op, attrs, shapes) is None:
        attrs = None
    _TYPED[key] = attrs
    return attrs


def _splits(graph: GraphT, tt: Tensors) -> Iterable[tuple[str, tuple, tuple[int, ...]]]:
    """Split a tensor back into the parts of a concat it is computed from (or is)."""
    if not any(op == "concat" for op, _, _ in graph):
        return
    anc: list[set[int]] = []  # ancestor nodes (and self) of each node
    for j, (_, _, ins) in enumerate(graph):
        s = {j}
        for t in ins:
            if tt.producer[t] >= 0:
                s |= anc[tt.producer[t]]
        anc.append(s)
    seen = set()
    for t in range(len(tt.producer)):
        j = tt.producer[t]
        if j < 0:
            continue
        for c in sorted(anc[j]):
            op, attrs, cins = graph[c]
            if op != "concat":
                continue
            cax = dict(attrs)["axis"]
            sizes = tuple(tt.shapes[p][cax] for p in cins)
            for ax, d in enumerate(tt.shapes[t]):
                if d == sum(sizes) and (t, ax, sizes) not in seen:
                    seen.add((t, ax, sizes))
                    yield "split", (("axis", ax), ("sizes", sizes)), (t,)


def extend(graph: GraphT) -> list[tuple]:
    """All valid one-node extensions of `graph`, each as
    (graph, sinks, sink values, node-output values, structural key, class key,
    redundant)."""
    cfg, ev, inst = _context()
    n_in = len(cfg.family)
    tt = analyze(graph, ev)
    k = len(graph)
    nodes = set(graph)
    sinks = set(sinks_of(graph, tt, n_in))
    all_vals = set(tt.vals)
    const = _constant_tensors(graph, tt, n_in)
    base_merkle = tt.node_merkle
    out = []
    # What a new node must read: a tensor of each component when there are two
    # (to join them), some node output once there is a node (to stay connected,
    # unless beside a single operator), a sink when the sinks are at the limit.
    comp_tensors: dict[int, set[int]] = {}
    for t in range(n_in, len(tt.vals)):
        comp_tensors.setdefault(tt.comp[tt.producer[t]], set()).add(t)
    need = list(comp_tensors.values()) if len(comp_tensors) > 1 else \
        [set(range(n_in, len(tt.vals)))] if k > 1 else []
    if len(sinks) >= cfg.max_outputs:
        need.append(sinks)
    for node in _candidates(graph, tt, ev, inst, need):
        if node in nodes:
            continue
        op, attrs, ins = node
        if ins and all(t in const for t in ins):
            continue  # computes a constant: folded before any model runs
        comps = {tt.comp[tt.producer[t]] for t in ins if tt.producer[t] >= 0}
        if comps:
            if tt.n_comps - len(comps) + 1 != 1:
                continue
        elif k > 1:
            continue  # a new independent operator: only beside a single one
        new_vals = ev.apply(op, attrs, tuple(tt.vals[t] for t in ins))
        if len(set(new_vals)) < len(new_vals):
            continue
        new_sinks = sorted(sinks - set(ins)) + list(range(len(tt.vals),
                                                          len(tt.vals) + len(new_vals)))
        if len(new_sinks) > cfg.max_outputs:
            continue
        vals = tt.vals + list(new_vals)
        sink_vals = tuple(vals[t] for t in new_sinks)
        if len(set(sink_vals)) < len(sink_vals):
            continue
        redundant = any(v in all_vals for v in new_vals)
        g2 = graph + (node,)
        h = node_hash(op, attrs, (tt.merkle[t] for t in ins))
        struct = ints_hash(sorted(base_merkle + [h]))
        new = vals[n_in:]
        ext = ints_hash((len(new), *sorted(new), *sorted(sink_vals)))
        out.append((g2, tuple(new_sinks), sink_vals, tuple(vals[n_in:]), struct, ext,
                    redundant))
    return out


def _constant_tensors(graph: GraphT, tt: Tensors, n_in: int) -> set[int]:
    """Node outputs that depend on no family tensor."""
    const: set[int] = set()
    for t in range(n_in, len(tt.vals)):
        _, _, ins = graph[tt.producer[t]]
        if all(u in const for u in ins):
            const.add(t)
    return const


def extend_chunk(ctx: TaskContext, graphs: list[GraphT]) -> list[tuple]:
    """Task: every extension of each of `graphs`."""
    init_worker(ctx)
    _context()[1].trim()
    res = []
    for g in graphs:
        res.extend(extend(g))
    return res


# ---- the rounds ---------------------------------------------------------------------
def _chunks(items: list, n: int) -> list[list]:
    return [items[i:i + n] for i in range(0, len(items), n)]


def enumerate_graphs(cfg: GenConfig, executor: Executor | None = None,
                     progress: Callable[[RoundStats, int, int], None] | None = None,
                     store: ClassStore | None = None) -> Enumeration:
    """Run `cfg.max_ops` RepGen rounds; returns every graph grouped by the
    fingerprints of its sinks (in `store`, by default in memory)."""
    own = executor is None
    ex = executor or SerialExecutor()
    ctx = TaskContext.of(cfg)
    result = Enumeration(cfg, store if store is not None else ClassStore())
    reps: list[GraphT] = [()]
    try:
        for k in range(1, cfg.max_ops + 1):
            t0 = time.perf_counter()
            stats = RoundStats(k, len(reps), 0, 0, 0.0)
            chunk = max(1, min(256, len(reps) // (8 * max(1, ex.workers)) + 1))
            next_reps: dict[int, GraphT] = {}
            seen: set[int] = set()
            done = 0
            for batch_in, res in zip(_chunks(reps, chunk),
                                     ex.map(extend_chunk, _chunks(reps, chunk), ctx)):
                for g2, sinks, sink_vals, vals, struct, ext, redundant in res:
                    if struct in seen:
                        continue
                    seen.add(struct)
                    stats.graphs += 1
                    key = tuple(sorted(sink_vals))
                    result.classes.add(key, Member(g2, sinks, sink_vals, vals))
                    if not redundant and k < cfg.max_ops and ext not in next_reps:
                        next_reps[ext] = g2
                done += len(batch_in)
                if progress:
                    stats.seconds = time.perf_counter() - t0
                    stats.classes = len(next_reps)
                    progress(stats, done, len(reps))
            stats.classes = len(next_reps)
            stats.seconds = time.perf_counter() - t0
            result.rounds.append(stats)
            reps = list(next_reps.values())
    finally:
        if own:
            ex.close()
    return result
