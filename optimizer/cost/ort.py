"""The `ort` cost model: costs measured on this CPU in onnxruntime.

Each distinct cost key (operator, attributes, input shapes, and which inputs are
constants) is exported as a one-node ONNX model through the operator's own
`Op.onnx`, run in onnxruntime with the settings the optimized model will run
under (ORT_ENABLE_ALL, sequential, a stated number of intra-op threads), warmed
up and timed over repeats (by the thread's CPU time when one thread runs it, see
`clock_for`); the cost is the median less the fixed cost of one session run,
measured once. Which inputs are constants matters on a CPU:
onnxruntime pre-packs constant MatMul operands and re-lays convolutions with
constant kernels into its blocked format, and folds nodes whose inputs are all
constant. Results persist in a `CostCache`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx

from taso.ir import Graph
from taso.onnx_io import export_onnx
from taso.ops import OPS
from taso.runtime import (
    VERSION,
    Runner,
    Verdict,
    balanced_order,
    benchmark_options,
    clock_for,
    compare_interleaved,
    default_threads,
    median_ms,
    profile_events,
    session,
    time_interleaved,
)

from . import register_cost_model
from .cache import CostCache
from .calibrate import REFERENCES, Reading
from .layout import layout_changes, reorder_program
from .measured import (
    Link,
    MeasuredCostModel,
    Timed,
    const_value,
    is_const_kind,
    kind_value,
    link_source,
    unit_links,
)
from .memory import output_bytes, traffic_bytes
from .sampling import Column, time_columns

Shape = tuple[int, ...]
log = logging.getLogger("taso.optimizer")


@cache
def cpu_name() -> str:
    """The CPU as the cost cache tells devices apart: its model name, and its
    family and model numbers with the last-level cache size where known, since
    a VM may name two generations alike ("AMD EPYC" for a Zen 4 and a Zen 5,
    whose convolutions differ 2.5x)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    details = [f"family {fields['cpu family']}, model {fields['model']}"] \
        if "cpu family" in fields and "model" in fields else []
    if cache_sizes():
        details.append(f"{max(cache_sizes()) >> 20} MiB LLC")
    return f"{name} ({', '.join(details)})" if details else name


@cache
def cache_sizes() -> tuple[int, ...]:
    """Bytes of each of the first CPU's caches (sysfs); none where unreadable."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        unit = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
        sizes.append(int(text.rstrip("KM")) * unit)
    return tuple(sizes)


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache, or 32 MiB when it cannot be read."""
    return max(cache_sizes(), default=32 * 2**20)


# Within the last level, more traffic between two runs of a weight than this
# many L2s changed no timing measured: ResNet-50's convolutions timed within 10%
# at 4 to 256 MiB, where 256 MiB took 256 copies a program; BERT's 9.4 MB
# product weights need a few copies' worth (at 8 MiB, one copy, its chains
# timed 10-15% fast and the model was predicted 14% low; at 32 MiB, 1% low).
CORE_CACHES = 16


@cache
def core_cache_bytes() -> int:
    """Size of the largest cache below the last level (a core's own L2), or
    1 MiB when it cannot be read."""
    below = [s for s in cache_sizes() if s < last_level_cache_bytes()]
    return max(below, default=2**20)


def reuse_mib(traffic: int) -> int:
    """The bytes a model touches between two runs of one of its nodes, in MiB,
    as costs are keyed by it and weights' copies are timed with: `traffic` (a
    run's, see `traffic_bytes`) up to CORE_CACHES times a core's own (L2)
    cache where it fits the last level; beyond the last level, twice its
    size (the weights come from memory). Rounded to a power of two so that
    keys stay few."""
    if traffic >= last_level_cache_bytes():
        traffic = 2 * last_level_cache_bytes()
    else:
        traffic = min(traffic, CORE_CACHES * core_cache_bytes())
    mib = traffic / 2**20
    return 2 ** max(0, round(math.log2(max(mib, 1.0))))


def const_bytes(links: Sequence[Link]) -> int:
    """Bytes of the constant inputs of a chain (float32)."""
    return sum(4 * int(np.prod(shape)) for _, _, ins in links
               for kind, shape, _ in ins if is_const_kind(kind))


def weight_copies(const_bytes: int, out_bytes: int, reuse_bytes: int, limit: int = 256) -> int:
    """How many copies of a node with `const_bytes` of constant inputs and
    `out_bytes` of outputs to time side by side, so that between two runs of
    one copy the others read and write `reuse_bytes`, as the rest of a model
    does between two runs of the node."""
    if const_bytes == 0:
        return 1
    return max(1, min(limit, -(-reuse_bytes // (const_bytes + out_bytes))))


def chain_graph(links: Sequence[Link], copies: int = 1) -> Graph:
    """A graph computing the chain `links` `copies` times side by side: the
    copies share their activation inputs (graph inputs) and each has its own
    constants (weights); each copy's last output is a graph output. Weights are
    positive, so that a normalization's variance is (and named here: naming
    hundreds of them by count is quadratic)."""
    g = Graph(seed=0)
    rng = np.random.default_rng(0)
    shared: dict[tuple[int, int], Any] = {}
    drawn: dict[tuple[int, int], np.ndarray] = {}
    fixed: dict[tuple[int, int], np.ndarray] = {}
    for k, (_, _, ins) in enumerate(links):
        for i, (kind, shape, dtype) in enumerate(ins):
            if kind == "x":
                shared[(k, i)] = g.new_input(shape, dtype=dtype)
            elif link_source(kind, k) is None:  # a constant; a kind that says its value
                # (a scalar, an index) is the same in every copy
                given = const_value(kind) is not None or kind_value(kind) is not None
                (fixed if given else drawn)[(k, i)] = const_data(kind, shape, dtype, rng)

    def weight(c: int, k: int, i: int) -> np.ndarray:
        # Drawing each copy's weights took ResNet-50's first run 0.5 s: copies
        # copy one draw, each made unlike the others in its first element, lest
        # onnxruntime share equal constants and merge the copies.
        if (k, i) in fixed:
            return fixed[(k, i)]
        data = drawn[(k, i)]
        if copies == 1 or data.size == 0:
            return data
        data = data.copy()
        data.flat[0] = 0.5 + 0.5 * c / copies
        return data

    for c in range(copies):
        made: list[Any] = []  # each link's output
        for k, (op, attrs, ins) in enumerate(links):
            args = [made[j] if (j := link_source(kind, k)) is not None else
                    shared[(k, i)] if kind == "x" else
                    g.new_weight(shape, data=weight(c, k, i), name=f"w{c}_{k}_{i}")
                    for i, (kind, shape, dtype) in enumerate(ins)]
            outs = g.add_node(op, args, **attrs)
            made.append(outs[0])
        for t in outs:
            g.mark_output(t)
    return g


def const_data(kind: str, shape: Shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """A constant input of `kind` (const_kind): its value where the kind says
    one, else uniform in [0.5, 1)."""
    if const_value(kind) is not None:
        return np.full(shape, const_value(kind), dtype)
    if kind_value(kind) is not None:
        return kind_value(kind)
    return rng.uniform(0.5, 1.0, shape).astype(dtype)


def one_node_graph(op: str, attrs: dict[str, Any], shapes: Sequence[Shape],
                   consts: Sequence[bool], dtypes: Sequence[str] | None = None,
                   copies: int = 1) -> Graph:
    """`chain_graph` of the one node `op`."""
    dtypes = list(dtypes or ["float32"] * len(shapes))
    ins = tuple(("w" if c else "x", s, d) for s, c, d in zip(shapes, consts, dtypes))
    return chain_graph([(op, attrs, ins)], copies)


CONVS = ("conv2d", "conv2d_bias")


def onnxruntime_program(links: Sequence[Link]) -> list[Link]:
    """The chain `links` as onnxruntime runs it: a batch normalization of
    constant parameters after a convolution folded into its kernel and bias,
    and a ReLU after a convolution fused into it (its activation). taso's own
    folds (fusion-conv-batchnorm, fusion-conv2d_bias-relu) then price exactly
    what they replace: timed apart, ResNeXt-50's folds alone were kept or not
    by the noise between two timings of one program."""
    if any(kind.startswith("@") for _, _, ins in links for kind, _, _ in ins):
        return list(links)  # a diamond: indices would shift
    out: list[Link] = []
    for op, a, ins in links:
        head = out[-1] if out and out[-1][0] in CONVS and ins and ins[0][0] == "prev" \
            and dict(out[-1][1]).get("activation", "none") == "none" else None
        if head is not None and op == "batchnorm" and \
                all(is_const_kind(kind) for kind, _, _ in ins[1:]):
            hop, ha, hins = head
            x, w = hins[0], hins[1]
            bias = hins[2] if hop == "conv2d_bias" else ("w", (w[1][0],), w[2])
            out[-1] = ("conv2d_bias", ha, (x, w, bias))
        elif head is not None and op == "relu":
            out[-1] = (head[0], {**dict(head[1]), "activation": "relu"}, head[2])
        else:
            out.append((op, a, ins))
    return out


PER_NODE_CHAIN = 33  # ReLUs in the program that tells a node's share of a run
REL = 0.03  # a key is timed until the interval around its median is within 3% of it
CHUNK = 12  # keys timed side by side in one batch (each holds its weights' copies)
CHUNK_BYTES = 2**30  # and the weights' copies of one batch, at most (more: a batch alone)
# Runs whose profile gives a program's share of layout changes: five, as the
# predictions were made with (`layout_share`). The share falls over a
# session's first runs (a SqueezeNet stem: 0.79, 0.80, 0.55, 0.53, 0.49).
PROFILED_RUNS = 5


class Program(NamedTuple):
    """A unit's program, ready to time: its runner, how many copies of the unit
    it runs, and the share of its kernel time in layout changes."""

    run: Runner
    copies: int
    share: float


def blocked(links: Sequence[Link]) -> bool:
    """Whether onnxruntime may run a link of the chain in its blocked layout
    (and put layout changes around it): any with an NCHW input. Not only the
    operators marked `blocked_layout`: SqueezeNet's max pools were 63-75%
    layout changes as programs of their own."""
    return any(len(shape) == 4 for _, _, ins in links for _, shape, _ in ins)


def layout_fraction(events: list[dict[str, Any]]) -> float:
    """The fraction of kernel time in onnxruntime's profile `events` spent in
    layout changes (its Reorder nodes)."""
    layout = total = 0.0
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            total += e["dur"]
            if e.get("args", {}).get("op_name", "").startswith("Reorder"):
                layout += e["dur"]
    return layout / total if total else 0.0


@register_cost_model("ort")
class OrtCostModel(MeasuredCostModel):
    """Costs in milliseconds, measured in onnxruntime on this CPU.

    threads: intra-op threads of every timed session (default `default_threads()`).
    warmup, repeats, min_seconds: timing of one key (see `time_runs`).
    cold_weights: time nodes with constant inputs as parallel copies, each with
    its own constants and outputs, that touch between two runs of one copy as
    much as the model does between two runs of the node (`weight_copies`,
    `reuse_mib`; the model is the one `price_within` names), so that its
    weights stay cached, or not, as they would in the model; the cost is one
    copy's share.
    exclude_layout: leave out the time of the layout changes onnxruntime puts
    around a lone convolution (see `layout_share`).
    cache: a `CostCache`, a path to one, None for the default path, or False to
    keep measurements in memory only."""

    name = "ort"
    fuses = True
    # NasNet-A's stem feeds one batch normalization to five identical relus;
    # onnxruntime runs one (fused into the convolution), and a search that
    # merged them was predicted 8% faster and measured the same.
    merges = True

    def __init__(self, threads: int | None = None, warmup: int = 3, repeats: int = 10,
                 min_seconds: float = 0.02, cold_weights: bool = True,
                 exclude_layout: bool = True,
                 cache: CostCache | str | os.PathLike | bool | None = None):
        super().__init__(cache)
        self._refs: dict[str, Program] | None = None
        self.threads = threads or default_threads()
        self.timing = dict(warmup=warmup, repeats=repeats, min_seconds=min_seconds,
                           clock=clock_for(self.threads))
        self.cold_weights = cold_weights
        self.exclude_layout = exclude_layout
        self.context = self.model_context(None)
        self.device = (f"{cpu_name()}; {self.threads} thread(s); onnxruntime {VERSION}; "
                       + ("cold" if cold_weights else "warm") + " weights"
                       + ("; layout changes excluded" if exclude_layout else ""))

    def program_links(self, links):
        return onnxruntime_program(links)

    def model_context(self, graph: Graph | None) -> tuple:
        """How much the model touches between two runs of a node (`reuse_mib`),
        where weights are timed cold; twice the last-level cache if no model
        was said."""
        if not self.cold_weights:
            return ()
        traffic = 2 * last_level_cache_bytes() if graph is None else traffic_bytes(graph)
        return (("reuse_mib", reuse_mib(traffic)),)

    def copies(self, links: Sequence[Link]) -> int:
        """How many copies of the chain `links` its program runs (`weight_copies`)."""
        if not self.cold_weights:
            return 1
        op, attrs, ins = links[-1]
        out_bytes = output_bytes(op, attrs, [shape for _, shape, _ in ins])
        reuse = dict(self.context).get("reuse_mib", 0) << 20
        return weight_copies(const_bytes(links), out_bytes, reuse)

    def time_chain(self, links) -> float:
        copies = self.copies(links)
        ms = self.time_graph(chain_graph(links, copies))
        return (ms - self.overhead_ms) / copies + self.overhead_ms  # one copy's share

    # ---- batches: many keys side by side, beside the reference programs -------------
    def program(self, links: Sequence[Link], copies: int = 1, layout: bool = True) -> Program:
        """The chain `links` (`copies` of it) as a session ready to time. Where
        it may change layouts, its first PROFILED_RUNS runs are profiled for
        their share (then profiling ends: the timed runs are not profiled)."""
        g = chain_graph(links, copies)
        model, feeds = export_onnx(g), g.random_inputs(seed=0)
        if not (layout and self.exclude_layout and blocked(links)):
            return Program(Runner(session(model, benchmark_options(self.threads)), feeds),
                           copies, 0.0)
        with tempfile.TemporaryDirectory() as tmp:
            so = benchmark_options(self.threads)
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tmp, "p")
            sess = session(model, so)
            run = Runner(sess, feeds)  # its first run
            for _ in range(PROFILED_RUNS - 1):
                run()
            with open(sess.end_profiling()) as f:
                share = layout_fraction(json.load(f))
        return Program(run, copies, share)

    def _references(self) -> dict[str, Program]:
        if self._refs is None:
            self._refs = {name: self.program(links, layout=False)
                          for name, links in REFERENCES.items()}
        return self._refs

    def reference_reading(self) -> Reading:
        refs = self._references()
        samples = time_columns({n: Column(p.run, rel=REL) for n, p in refs.items()},
                               self.timing["clock"])
        return {n: samples[n].median for n in refs}

    def time_units(self, whats, tick=lambda: None):
        """The units timed side by side, a batch at a time (`_chunks`),
        round by round beside the reference programs (sampling.py): each key's
        timing records the reading of its batch. Each key is still timed
        alone: one program per key, run on its own between the others (never
        two at once), with the copies that make its weights as cold as in the
        model; the rounds only interleave the keys in time."""
        overhead = self.overhead_ms
        refs = self._references()
        out: list[Timed | Exception | None] = [None] * len(whats)
        for chunk in self._chunks(whats):
            progs: dict[int, Program] = {}
            for i in chunk:
                try:
                    links = unit_links(whats[i])
                    progs[i] = self.program(links, self.copies(links))
                except Exception as e:  # a node the device cannot run alone
                    out[i] = e
                    tick()
            columns: dict[Any, Column] = {("ref", n): Column(p.run) for n, p in refs.items()}
            # Each round starts with an untimed run: the neighbours' programs ran
            # in between and evicted this one's weights (NasRNN's 512x512
            # products timed 2x their cost), where in the model only the
            # traffic its copies stand for comes between two runs of a node.
            columns.update({i: Column(p.run, rel=REL, floor=self.precision_ms * p.copies)
                            for i, p in progs.items()})
            try:
                samples = time_columns(columns, self.timing["clock"],
                                       on_done=lambda name, _: tick())
            except Exception as e:  # a run that failed after its first
                for i in progs:
                    out[i] = e
                continue
            cal = {n: samples[("ref", n)].median for n in refs}
            for i, p in progs.items():
                s = samples[i]
                ms = max((s.median * (1 - p.share) - overhead) / p.copies, 0.0)
                out[i] = Timed(ms, cal, s.half / p.copies, s.runs)
        return out

    def _chunks(self, whats) -> list[list[int]]:
        """The units' indices in batches of at most CHUNK programs and
        CHUNK_BYTES of weights' copies (a model beyond the last-level cache
        times programs of twice its size)."""
        chunks: list[list[int]] = [[]]
        held = 0
        for i, what in enumerate(whats):
            try:
                links = unit_links(what)
                size = self.copies(links) * const_bytes(links)
            except Exception:  # said when its program is built
                size = 0
            if chunks[-1] and (len(chunks[-1]) == CHUNK or held + size > CHUNK_BYTES):
                chunks.append([])
                held = 0
            chunks[-1].append(i)
            held += size
        return [c for c in chunks if c]

    def time_overhead(self) -> float:
        """The fixed cost of a session run: a ReLU of one element, less what one
        more node adds to a run (from a chain of such ReLUs), which every node
        pays inside a model too."""
        tiny = ("x", (1,), "float32")
        one = [("relu", {}, (tiny,))]
        many = one + [("relu", {}, (("prev", (1,), "float32"),))] * (PER_NODE_CHAIN - 1)
        t1, tn = self.time_graph(chain_graph(one)), self.time_graph(chain_graph(many))
        return t1 - max(tn - t1, 0.0) / (PER_NODE_CHAIN - 1)

    def time_graph(self, g: Graph) -> float:
        """Median milliseconds of one run of `g` (exported to ONNX) in onnxruntime,
        less the share of the layout changes onnxruntime wraps around it."""
        model, feeds = export_onnx(g), g.random_inputs(seed=0)
        ms = median_ms(Runner(session(model, benchmark_options(self.threads)), feeds),
                       **self.timing)
        return ms * (1 - self.layout_share(model, feeds)) if self.exclude_layout else ms

    def whole_model_runners(self, graphs: Sequence[Graph]) -> dict[tuple[int, int], Runner]:
        """Two sessions per graph, by (graph, session): sessions of one model
        differ by where their buffers land. Created in a balanced order
        (`balanced_order`), so that neither graph gets the later ones."""
        exported = [(export_onnx(g), g.random_inputs(seed=0)) for g in graphs]
        runners = {}
        for s in range(2):
            for k in balanced_order(range(len(graphs)), s):
                runners[(k, s)] = Runner(session(exported[k][0],
                                                 benchmark_options(self.threads)),
                                         exported[k][1])
        return runners

    def time_models(self, graphs: Sequence[Graph], rounds: int = 21,
                    round_ms: float = 50.0) -> list[float]:
        """Milliseconds of one run of each whole graph, timed against each
        other: two sessions per graph, interleaved round by round; the mean of
        the two sessions' medians. 21 rounds, as the benchmark: with 11,
        ResNeXt-50's 5.6% gain (an A/B of three sessions each) once measured
        2.9%. (The search decides by `compare_models`.)"""
        ms = time_interleaved(self.whole_model_runners(graphs), rounds, round_ms,
                              self.threads)
        return [(ms[(k, 0)] + ms[(k, 1)]) / 2 for k in range(len(graphs))]

    def compare_models(self, original: Graph, optimized: Graph, margin: float | None = None,
                       max_seconds: float = 20.0, round_ms: float = 50.0,
                       min_rounds: int = 8) -> Verdict:
        """Whether `optimized` runs faster than `original` by more than `margin`
        (default `measured_gain`), decided by a confidence interval of their
        ratio over interleaved rounds (`compare_interleaved`, two sessions
        each), within about `max_seconds`."""
        runners = self.whole_model_runners([original, optimized])
        return compare_interleaved(
            [runners[(0, s)] for s in range(2)], [runners[(1, s)] for s in range(2)],
            margin=self.measured_gain if margin is None else margin,
            max_seconds=max_seconds, min_rounds=min_rounds, round_ms=round_ms,
            clock=clock_for(self.threads))

    def layout_ms(self, graph: Graph) -> float:
        """Milliseconds of the reorders onnxruntime puts into the whole model
        `graph` (layout.py), which the timings of its convolutions leave out.
        Only a model with operators run in the blocked layout (convolutions)
        has them."""
        if not self.exclude_layout or not any(
                OPS[n.op].blocked_layout or n.a.get("onnx_type") == "Conv"
                for n in graph.topo_order()):
            return 0.0
        key = ("layout-of", graph.hash())  # the layout does not depend on weight values
        if key not in self._memo:
            try:
                changes = layout_changes(export_onnx(graph), self.threads)
            except Exception as e:  # a prediction without them is still a prediction
                log.warning("the layout changes of the model could not be read (%s); "
                            "its predicted latency leaves them out", e)
                changes = []
            self._memo[key] = sum(self.reorder_cost(op, shape) for op, shape in changes)
        return self._memo[key]

    def reorder_cost(self, op_type: str, shape: Shape) -> float:
        """Milliseconds of one reorder (ReorderInput or ReorderOutput) of an NCHW
        tensor of `shape`, timed as a one-node program less the overhead."""
        key = ("layout", op_type, tuple(shape))
        if key not in self._memo:
            def measure() -> float:
                model, feeds = reorder_program(op_type, tuple(shape))
                run = Runner(session(model, benchmark_options(self.threads)), feeds)
                return max(median_ms(run, **self.timing) - self.overhead_ms, 0.0)
            self._memo[key] = self._cached(key, measure)
        return self._memo[key]

    def layout_share(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
        """The fraction of kernel time spent in the layout changes (to and from
        onnxruntime's blocked NCHWc format) that it puts around convolutions, read
        from its profiler. A program of one convolution pays them at its input and
        output; inside a model, consecutive convolutions stay blocked and pay
        them only where the model leaves the format."""
        return layout_fraction(profile_events(model, feeds, self.threads, runs=3))
