"""What the measured cost models share: keys, the memo, the persistent cache,
calibration, what is worth timing, constant inputs and the per-run overhead.

A subclass says how to time a chain of nodes run as one program (`time_chain`;
one node is a chain of one) and one empty run (`time_overhead`) on its device,
and may time many at once beside its reference programs (`time_units`,
`reference_reading`); this class decides what is worth timing. A node whose
inputs are all constants costs nothing (it is folded before the model runs);
otherwise its key is its operator's `cost_key` plus which inputs are
constants, looked up in memory, then in the cache, and timed only when both
miss. The cost is the timing less the overhead, never below zero, carried to
the device's quietest calibration (calibrate.py), so that keys timed under
load and keys timed idle compare as if timed together.

What is worth timing, in a search (`begin_search` .. `end_search`): the keys
of the original graph, in one batch; then, for the graphs the search meets,
keys missing from the cache are first priced by the analytic model (scaled by
what the measured keys of the same operators cost against it) and only the
keys of each round's winner are timed (`confirm`), in one batch with the
original's keys the winner replaces, timed again and scaled to their prices;
where that moved a cost, the search runs again on the measured costs. A cached entry out of
calibration is carried (rescaled) unless a decision rests on it and the
machine is quieter now than when it was timed; then it is timed again.

A device that fuses (onnxruntime folds a normalization, a bias, a residual add
and an activation into the convolution or product before them) is costed in
`graph_cost` by chains, not nodes: a contraction with the chain of elementwise
nodes that each solely consume the one before is timed as one program, so
whatever the runtime fuses of it is measured as fused. A device that merges
identical nodes (onnxruntime eliminates common subexpressions) is costed on
the graph so merged: a rewrite that only does the same saves nothing there.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any, NamedTuple

from taso.ir import Graph
from taso.ops import get_op

from . import SOURCE_OPS, CostModel, Shape
from .cache import CostCache
from .calibrate import (
    BUSY,
    TOLERANCE,
    Reading,
    carry,
    factor,
    others_running,
    quietest,
    slowdown,
)
from .chains import (  # noqa: F401  (re-exported: the backends and tests read them here)
    KIND_ORDER,
    MAX_CHAIN,
    VALUE_LIMIT,
    Link,
    Unit,
    _kind,
    canonical_inputs,
    const_kind,
    const_value,
    fusable_chains,
    is_const_kind,
    kind_value,
    link_source,
    opaque_kinds,
    value_kind,
)

log = logging.getLogger("taso.optimizer")

OVERHEAD_KEY = ("run-overhead",)
# A confirmed key that moved by more than this from its guess runs the search again.
MOVED = 0.05
# Keys of a searched model are timed to this fraction of its cost at least.
PRECISION = 0.002
# The original's keys a winner replaces timed again beside its new ones: the
# dearest this many (`_rivals_of`).
RIVALS = 8
# Timed units whose ratios a guess takes the median of (`_guess`).
NEAREST = 3


def link_label(op: str, attrs: Any) -> str:
    """What a guess's ratios are kept by, for one operator: its name (an opaque
    node's ONNX type), grouped convolutions apart. ResNeXt-50's grouped 3x3
    convolutions ran 5-10x what dense ones of their estimate did, and guessed
    by those, merging them looked free."""
    a = dict(attrs)
    if op == "opaque":
        return a.get("onnx_type", op)
    return op + ("/grouped" if int(a.get("groups", 1)) > 1 else "")


def head_family(links: Sequence[Link]) -> str | None:
    """The kind of a unit's head contraction, grouped convolutions apart (None
    where the head is no contraction). A search's first guesses of lone
    convolutions have only the original's units to go by: its convolutions
    with their normalizations and activations folded, of other labels."""
    op, attrs, _ = links[0]
    if op == "opaque" or not get_op(op).contraction:
        return None
    return f"head {get_op(op).kind}" + ("/grouped" if int(dict(attrs).get("groups", 1)) > 1
                                        else "")


def head_work(links: Sequence[Link]) -> tuple | None:
    """What a unit's head contraction computes: its kind, its attributes but
    the activation, its input shapes but a bias. A search meets the
    original's convolutions alone (before folding their normalizations into
    them), which onnxruntime runs as the units timed: guessed by their
    estimate, ResNeXt-50's grouped ones priced a fifth of that, and merging
    them looked dearer than keeping them. None where the head is no
    contraction."""
    op, attrs, ins = links[0]
    if op == "opaque" or not get_op(op).contraction:
        return None
    return (get_op(op).kind, tuple(sorted((k, v) for k, v in dict(attrs).items()
                                         if k != "activation")),
            tuple(shape for _, shape, _ in ins[:2]))


class Timed(NamedTuple):
    """One unit's timing: milliseconds (less the overhead), the calibration
    reading of its batch, the half-width of its interval, its runs."""

    ms: float
    cal: Reading | None = None
    half: float | None = None
    reps: int | None = None


def unit_links(what: tuple) -> list[Link]:
    """The chain a unit times: its links, or its one node as a chain of one."""
    if what[0] == "chain":
        return list(what[1])
    _, op, attrs, shapes, consts, dtypes = what
    return [(op, attrs, tuple((_kind(c), s, d) for s, c, d in
                              zip(shapes, consts, dtypes or ["float32"] * len(shapes))))]


def default_consts(op: str, shapes: Sequence[Shape]) -> tuple[bool, ...]:
    """Which inputs are constants when the caller does not say: the operator's
    answer (`Op.default_consts`: a layer's parameters, a GEMM's operands after
    the first, a product's plain-matrix right operand)."""
    return get_op(op).default_consts(shapes)


def open_cache(cache: CostCache | str | os.PathLike | bool | None) -> CostCache | None:
    """A CostCache from an instance, a path, None/True (the default path) or
    False (no persistence)."""
    if cache is False:
        return None
    if isinstance(cache, CostCache):
        return cache
    return CostCache(None if cache in (None, True) else cache)


class MeasuredCostModel(CostModel):
    """Base of the models that time nodes on a device.

    `measured` counts the timings this instance ran (keys missing from memory
    and cache) and `measure_seconds` the wall time they took."""

    def __init__(self, cache: CostCache | str | os.PathLike | bool | None = None):
        self.cache = open_cache(cache)
        self._memo: dict[Any, float] = {}
        self._overhead: float | None = None
        self.measured = 0
        self.measure_seconds = 0.0
        # What the model being priced does to the caches between two runs of one
        # of its nodes, as the backend times it (`model_context`); part of every
        # key, empty where the backend has nothing to say.
        self.context: tuple = ()
        self._opaque: dict[tuple, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._fallback_said: set[str] = set()
        self._analytic: CostModel | None = None
        # In a search: keys priced by a guess (not yet timed), and cached keys
        # to time again if a decision rests on them; each with what it times.
        self.searching = False
        self._guessed: dict[Any, tuple] = {}
        self._doubted: dict[Any, tuple] = {}
        # The searched graph's keys (`_rivals_of`), and the keys the device
        # could not time at all.
        self._rivals: dict[Any, tuple] = {}
        self._untimable: set[Any] = set()
        # Per operator (or chain) label, the timed units' (estimate, measured over
        # estimate): what the guesses are scaled by.
        self._ratios: dict[str, list[tuple[float, float]]] = {}
        # Per contraction (`head_work`), the prices of the timed units it heads.
        self._heads: dict[tuple, list[float]] = {}
        self._reading: Reading | None = None  # the machine now (calibrate.py)
        self._quiet: Reading | None = None
        self._busy_said = False
        # Where keys' prices came from (see `counts`), and the progress callback
        # (keys done, keys in the batch, estimated seconds left).
        self.counts: Counter[str] = Counter()
        self.progress: Callable[[int, int, float], None] | None = None
        # Milliseconds a key's timing need not resolve: PRECISION of the model
        # being searched (0 until one is), so a microsecond op in a model of
        # milliseconds is timed once, not until its median is known to 3%.
        self.precision_ms = 0.0

    fuses = False  # whether graph_cost times fusable chains as one program
    merges = False  # whether the device computes identical nodes once (`Graph.deduplicated`)
    # Whether whole-model predictions are scaled to the device's speed now
    # (`speed_now`); `last_speed` is the factor the last one used.
    recalibrate = True
    last_speed = 1.0
    # NasRNN's relu merges (taso-081/082) were predicted 1.8% cheaper on this
    # CPU and ran 10-14% slower; repeated sessions of one model spread 1-5%.
    min_gain = 0.03
    # The bar a whole model's measured ratio must clear (with its confidence
    # interval, where the backend gives one). With medians of 21 rounds, BERT's
    # rows rewrite measured 3.0-7.2% faster over four runs, ResNeXt-50's merges
    # 2.9-5.1%: a 3% bar refused each once; 1% still refuses what measures
    # slower, as NasRNN's relu merges did (10-20%).
    measured_gain = 0.01

    # ---- what a device backend provides ------------------------------------------
    def time_chain(self, links: Sequence[Link]) -> float:
        """Milliseconds of one run of a program computing `links` in turn
        (overhead included)."""
        raise NotImplementedError

    def time_node(self, op: str, attrs: dict[str, Any], shapes: list[Shape],
                  consts: tuple[bool, ...], dtypes: Sequence[str] | None) -> float:
        """Milliseconds of one run of a one-node program (overhead included)."""
        return self.time_chain(unit_links(("node", op, attrs, shapes, consts, dtypes)))

    def time_overhead(self) -> float:
        """Milliseconds of one run of a program that computes (almost) nothing."""
        raise NotImplementedError

    def model_context(self, graph: Graph | None) -> tuple:
        """The part of the keys that depends on the whole model `graph` (None:
        no model said; see `price_within`); nothing by default."""
        return ()

    def price_within(self, graph: Graph) -> None:
        self.context = self.model_context(graph)
        # The search core asks for an opaque node's cost by its attributes and
        # input shapes alone: its input dtypes and constant values come from here.
        const = graph.constant_nodes()
        for n in graph.topo_order():
            if n.op == "opaque":
                shapes = tuple(tuple(graph.nodes[p].shapes[i]) for p, i in n.inputs)
                self._opaque[(tuple(sorted(n.attrs)), shapes)] = (
                    opaque_kinds(graph, n, const),
                    tuple(graph.nodes[p].dtypes[i] for p, i in n.inputs))

    # ---- the interface -------------------------------------------------------------
    def op_cost(self, op: str, attrs: dict[str, Any], shapes: Sequence[Shape],
                consts: Sequence[bool] | None = None,
                dtypes: Sequence[str] | None = None) -> float:
        shapes = [tuple(map(int, s)) for s in shapes]
        unit = self._node_unit(op, attrs, shapes, consts, dtypes)
        return 0.0 if unit is None else self._priced(*unit)

    def chain_cost(self, links: Sequence[Link]) -> float:
        """Milliseconds of a chain run as one program, less the overhead."""
        return self._priced(*self._chain_unit(links))

    def graph_cost(self, graph: Graph) -> float:
        """Sum of the live computed nodes' costs, each timed with its real
        constant inputs and dtypes (fusable chains as one program where the
        device fuses); nodes computed from weights alone are folded, so they
        cost nothing."""
        return sum(ms for _, ms in self.priced_units(graph))

    def priced_units(self, graph: Graph) -> list[tuple[list[int], float]]:
        """What `graph_cost` sums, one entry per unit priced: the node ids of a
        node or of a fused chain (in order), and its milliseconds."""
        return [(ids, 0.0 if unit is None else self._priced(*unit))
                for ids, unit in self._units(graph)]

    def predict_latency(self, graph: Graph, speed: float | None = None) -> float:
        """Predicted milliseconds of one run of the whole model `graph` (which it
        is then priced within): the nodes' costs, the fixed cost of one run and
        the layout changes inside the model, scaled by `speed` (default: with
        `recalibrate`, `speed_now`; the factor used is `last_speed`)."""
        self.price_within(graph)
        ms = self.graph_cost(graph) + self.overhead_ms + self.layout_ms(graph)
        if speed is None:
            speed = self.speed_now(graph) if self.recalibrate else 1.0
        self.last_speed = speed
        return ms * speed

    def speed_now(self, graph: Graph, sample: int = 8) -> float:
        """How much longer the device takes now than when the costs of `graph`
        were measured (this VM's speed drifts by 20% and more within an hour):
        over the `sample` keys that weigh most in it (cost times uses), each
        one's time now over its cached cost; their median, weighted by what
        each weighs. A median, as one key's cached timing can be off by 2x (a
        session's buffers landing badly); weighted, as BERT's small keys (its
        softmax, transposes) timed 20-40% faster than cached while its four
        product chains, 95% of the model, timed as cached. Both timings are
        less the cached overhead of a run: timing it again moved NasRNN's
        15 us keys by a third (it is the unstable part of a tiny program)."""
        found = [unit for _, unit in self._units(graph) if unit is not None]
        units, uses = dict(found), Counter(k for k, _ in found)
        weight = {k: self._priced(k, what) * uses[k] for k, what in units.items()}
        heavy = [k for k in sorted(weight, key=lambda k: -weight[k])[:sample] if weight[k] > 0]
        if not heavy:
            return 1.0
        start = time.perf_counter()
        # Timed as the costs were (one batch): timed one by one, ResNet-50's
        # convolutions read 15% below their batch timings, and the prediction
        # with them.
        now = self.time_units([units[k] for k in heavy])
        ratios = sorted((r.ms / self._memo[k], weight[k]) for k, r in zip(heavy, now)
                        if isinstance(r, Timed) and self._memo[k] > 0)
        if not ratios:
            return 1.0
        self.measure_seconds += time.perf_counter() - start
        half = sum(w for _, w in ratios) / 2
        return next(r for (r, _), acc in zip(ratios, accumulate(w for _, w in ratios))
                    if acc >= half)

    def layout_ms(self, graph: Graph) -> float:
        """Milliseconds of the layout changes the device makes inside the whole
        model `graph` that its node costs leave out; none by default."""
        return 0.0

    @property
    def overhead_ms(self) -> float:
        if self._overhead is None:
            self._overhead = self._cached(OVERHEAD_KEY, self.time_overhead)
        return self._overhead

    def save(self) -> None:
        if self.cache is not None:
            self.cache.save()

    # ---- keys and what they time --------------------------------------------------------
    # A unit is its cost key and what to time on a miss: ("node", op, attrs,
    # shapes, consts, dtypes) or ("chain", links). Plain tuples, not closures:
    # graph_cost builds one per node, and the search calls it very often.
    def _node_unit(self, op: str, attrs: dict[str, Any], shapes: Sequence[Shape],
                   consts: Sequence[bool] | None, dtypes: Sequence[str] | None
                   ) -> Unit | None:
        """One node's cost key and timing; None where it costs nothing."""
        if op in SOURCE_OPS or get_op(op).weight_only:
            return None
        if op == "opaque" and consts is None:
            known = self._opaque.get((tuple(sorted(attrs.items())) if isinstance(attrs, dict)
                                      else attrs, tuple(map(tuple, shapes))))
            if known is not None:
                consts, dtypes = known
        consts = tuple(c if isinstance(c, str) else bool(c) for c in consts) \
            if consts is not None else default_consts(op, shapes)
        if consts and all(is_const_kind(c) if isinstance(c, str) else c for c in consts):
            return None  # folded into a constant before the model runs
        if get_op(op).commutative:
            ins = canonical_inputs(op, [("w" if c else "x", s, d) for s, c, d in
                                        zip(shapes, consts, dtypes or ["float32"] * 2)])
            shapes, dtypes = [s for _, s, _ in ins], [d for _, _, d in ins]
            consts = tuple(kind == "w" for kind, _, _ in ins)
        key = (get_op(op).cost_key(dict(attrs), shapes), consts) + self.context
        return key, ("node", op, attrs, shapes, consts, dtypes)

    def program_links(self, links: Sequence[Link]) -> Sequence[Link]:
        """The chain `links` as the device runs it (what it folds away on its
        own); unchanged by default."""
        return links

    def _chain_unit(self, links: Sequence[Link]) -> Unit:
        links = self.program_links(links)
        if len(links) == 1:  # a node, as the device runs it: that node's unit
            op, a, ins = links[0]
            unit = self._node_unit(op, a, [s for _, s, _ in ins],
                                   [is_const_kind(k) for k, _, _ in ins], [d for _, _, d in ins])
            if unit is not None:
                return unit
        key = ("chain", tuple((get_op(op).cost_key(a, [s for _, s, _ in ins]),
                               tuple(kind for kind, _, _ in ins)) for op, a, ins in links)
               ) + self.context
        return key, ("chain", links)

    def _time_unit(self, what: tuple) -> float:
        """Milliseconds of a unit's program, less the overhead."""
        if what[0] == "chain":
            ms = self.time_chain(what[1])
        else:
            _, op, attrs, shapes, consts, dtypes = what
            ms = self.time_node(op, dict(attrs), shapes, consts, dtypes)
        return max(ms - self.overhead_ms, 0.0)

    def _units(self, graph: Graph) -> list[tuple[list[int], Unit | None]]:
        """The units `graph_cost` sums: the node ids of a node or a fused chain,
        and its key and timing (None: it costs nothing)."""
        if self.merges:
            graph = graph.deduplicated()
        live, const = graph.live(), graph.constant_nodes()
        chained: dict[int, list[int]] = {}
        if self.fuses:
            for chain in fusable_chains(graph, live, const):
                chained.update({nid: chain for nid in chain})
        units: list[tuple[list[int], Unit | None]] = []
        for n in graph.topo_order():
            if n.id not in live or n.id in const or n.op == "input":
                continue
            if n.id in chained:
                if chained[n.id][0] == n.id:
                    chain = chained[n.id]
                    units.append((chain, self._chain_unit(self.links(graph, chain, const))))
                continue
            srcs = [(graph.nodes[p], i) for p, i in n.inputs]
            consts = opaque_kinds(graph, n, const) if n.op == "opaque" else \
                [m.id in const for m, _ in srcs]
            units.append(([n.id], self._node_unit(
                n.op, n.a, [m.shapes[i] for m, i in srcs], consts,
                [m.dtypes[i] for m, i in srcs])))
        return units

    def _priced(self, key: Any, what: tuple) -> float:
        ms = self._memo.get(key)
        if ms is not None:
            return ms
        if key in self._guessed and not self.searching:
            self._measure([(key, what)])  # a guess outlives no search
            return self._memo[key]
        entry = self.cache.entry(self.name, self.device, key) if self.cache is not None \
            else None
        if entry is not None:
            ms = self._carried(key, what, entry)
        elif self._guessable(what):
            return self._guess(key, what)
        else:
            self._measure([(key, what)])
            return self._memo[key]
        self._memo[key] = ms
        return ms

    # ---- calibration ---------------------------------------------------------------
    analytic_first = True  # in a search, guess missing keys and time the winners'

    def reference_reading(self) -> Reading | None:
        """The reference programs timed now (calibrate.REFERENCES); None for a
        device that has none."""
        return None

    def reading(self) -> Reading | None:
        """The machine now: the latest reading (timed once, then renewed by every
        batch)."""
        if self._reading is None:
            start = time.perf_counter()
            self._take_reading(self.reference_reading())
            self.measure_seconds += time.perf_counter() - start
        return self._reading

    def quiet(self) -> Reading | None:
        """The device's quietest reading, what every price is carried to: the
        cache's and this run's first, fixed from then on (a quieter reading
        later is kept for later runs), so that the prices of one run agree."""
        if self._quiet is None:
            cached = self.cache.quiet(self.name, self.device) if self.cache is not None \
                else None
            self._quiet = quietest(cached, self.reading())
        return self._quiet

    def _take_reading(self, reading: Reading | None) -> None:
        if not reading:
            return
        self._reading = dict(reading)
        if self.cache is not None:
            self.cache.note_reading(self.name, self.device, reading)  # the quietest kept
        if self._busy_said:
            return
        quiet = self.cache.quiet(self.name, self.device) if self.cache is not None else reading
        slow = slowdown(reading, quiet)
        others = others_running()
        if slow > BUSY or (others is not None and others >= 0.5):
            self._busy_said = True
            self.counts["busy"] = 1
            log.warning("the machine is busy (%sreference programs %.2fx their quietest time): "
                        "measured costs may be off by %.0f%%; each is timed beside the "
                        "references and carried to the quiet state",
                        f"{others:.1f} other processes running, " if others else "", slow,
                        100 * max(slow - 1, 0.1))

    def _carried(self, key: Any, what: tuple, entry: dict) -> float:
        """A cached entry's price in the quiet state; noted for timing again if
        the machine is quieter now than when it was timed (or it carries no
        calibration), should a decision rest on it."""
        ms, cal = entry["ms"], entry.get("cal")
        now = self.reading()
        if now is not None and (cal is None or factor(cal, now, ms) < 1 - TOLERANCE):
            self._doubted[key] = what
        carried = ms * carry(cal, self.quiet(), ms)
        self.counts["rescaled" if abs(carried - ms) > TOLERANCE * ms else "cached"] += 1
        self._learn(what, carried)
        return carried

    # ---- guesses, batches and decisions --------------------------------------------------
    def _guessable(self, what: tuple) -> bool:
        """Whether a unit missing from memory and cache is guessed, not timed:
        in a search, the core's candidates, met by the thousand, are; a fused
        chain (priced for the few graphs a pass compares whole) is timed: what
        fusion saves is what a guess cannot see."""
        return self.searching and self.analytic_first and what[0] == "node"

    def _guess(self, key: Any, what: tuple) -> float:
        """A price for a unit not yet timed. A contraction that was timed as a
        unit of its own (`head_work`) costs what it was timed at. Otherwise its
        roofline estimate (analytic.py, without launch or saturation terms: the
        work alone) times the median measured-over-estimated ratio of the timed
        units nearest to it in estimate: of its own operators, else of the
        contractions of its head's kind timed alone (`head_family`), else of
        any. Small products' roofline ratios differ 20x from large ones', so
        the nearest, not a mean."""
        links = unit_links(what)
        same = self._heads.get(head_work(links))
        if same:
            ms = sorted(same)[len(same) // 2]
        else:
            label, ests = self._estimates(what)
            est, known = sum(ests), self._ratios.get(label)
            if not known and (known := self._ratios.get(head_family(links))):
                est = ests[0]  # the family's ratios are of its heads' estimates
            known = known or [p for ps in self._ratios.values() for p in ps]
            if known and est > 0:
                # The median of the nearest few: units of one estimate (ResNeXt-50's
                # 1x1 convolutions of equal work) ran at ratios 30% apart.
                near = sorted(known, key=lambda p: abs(math.log(p[0] / est)))[:NEAREST]
                ms = est * sorted(r for _, r in near)[len(near) // 2]
            else:
                ms = sum(ests)
        self._guessed[key] = what
        self._memo[key] = ms
        return ms

    def _measure(self, units: Sequence[tuple[Any, tuple]],
                 beside: Mapping[Any, tuple] | None = None) -> None:
        """Time `units` (key, what) as one batch; their prices into the memo
        and the cache (the analytic model's where the device cannot run one).
        `beside`: priced keys (key: what) timed again in the same batch, whose
        prices stay: the units' timings are scaled by the prices of these over
        their timings now (`_scale_beside`)."""
        units = list(dict(units).items())  # each key once
        if not units:
            return
        rivals = [(k, w) for k, w in (beside or {}).items() if k not in dict(units)]
        timed = units + rivals
        start = time.perf_counter()
        done = [0]

        def tick() -> None:
            done[0] += 1
            if self.progress is not None:
                spent = time.perf_counter() - start
                self.progress(done[0], len(timed), spent / done[0] * (len(timed) - done[0]))
        try:
            results = self.time_units([what for _, what in timed], tick)
        finally:
            self.measure_seconds += time.perf_counter() - start
        if results and isinstance(results[-1], Timed) and results[-1].cal:
            self._take_reading(results[-1].cal)
        quiet = self.quiet()
        scale = self._scale_beside(rivals, results[len(units):], quiet)
        for (key, what), r in zip(units, results):
            self._guessed.pop(key, None)
            was_doubted = self._doubted.pop(key, None) is not None
            if isinstance(r, Exception):
                self._memo[key] = self._fallback(what, r)
                self._untimable.add(key)
                self.counts["fallback"] += 1
                continue
            self.measured += 1
            self.counts["remeasured" if was_doubted else "measured"] += 1
            if self.cache is not None:
                self.cache.put(self.name, self.device, key, r.ms * scale, r.cal,
                               None if r.half is None else r.half * scale, r.reps)
            ms = r.ms * carry(r.cal, quiet, r.ms) * scale
            self._memo[key] = ms
            self._learn(what, ms)

    def _scale_beside(self, rivals: list[tuple[Any, tuple]],
                      results: Sequence[Timed | Exception], quiet: Reading | None) -> float:
        """What the units of a batch are scaled by: the prices of the keys timed
        beside them (`rivals`, priced earlier in another batch) over their
        timings in this one; 1 where none was timed. A key's timing depends on
        its batch (the neighbours its runs alternate with): 8 keys timed apart
        from the rest of their model read 15% low, and a winner's few new keys,
        timed in a small batch of their own, looked cheaper than the keys of the
        original they replace, timed in one large batch."""
        had = now = 0.0
        for (key, _), r in zip(rivals, results):
            if isinstance(r, Timed):
                self.measured += 1
                self.counts["beside"] += 1
                had += self._memo[key]
                now += r.ms * carry(r.cal, quiet, r.ms)
        return had / now if had > 0 and now > 0 else 1.0

    def _learn(self, what: tuple, ms: float) -> None:
        """Take a timed (or cached) unit's price into what guesses are scaled by."""
        label, ests = self._estimates(what)
        if sum(ests) > 0 and ms > 0:
            self._ratios.setdefault(label, []).append((sum(ests), ms / sum(ests)))
        links = unit_links(what)
        family = head_family(links)
        if family is not None and len(links) == 1 and ests[0] > 0 and ms > 0:
            # Units that are a contraction alone (a convolution with its
            # normalization and activation folded, as the device runs it) say
            # what the contraction costs; a chain's price holds its epilogue's
            # too: BERT's lone products, priced as their product+bias+GELU
            # chains, hid the gain of its dense-residual rewrite (x1.05 -> x1.02).
            self._ratios.setdefault(family, []).append((ests[0], ms / ests[0]))
            self._heads.setdefault(head_work(links), []).append(ms)

    def time_units(self, whats: Sequence[tuple], tick: Callable[[], None] = lambda: None
                   ) -> list[Timed | Exception]:
        """Each unit's timing (or the error that kept it from being timed), one
        after another, with the reading taken before them; a backend that can
        time many at once overrides it."""
        reading = self.reference_reading()
        out: list[Timed | Exception] = []
        for what in whats:
            try:
                out.append(Timed(self._time_unit(what), reading))
            except Exception as e:  # a node the device cannot run alone
                out.append(e)
            tick()
        return out

    def begin_search(self, graph: Graph) -> None:
        """A search of `graph` starts: the keys of `graph` are timed (one batch)
        where they are missing or doubted, and from here keys the search meets
        anew are guessed until `confirm` times them."""
        self.weight_byte_cost()  # the search reads it; a measured key, not a guess
        self.searching = False
        self._rivals = {}
        self._confirm(graph)
        self._rivals = {k: what for _, (k, what) in self._timed_units(graph)}
        self.precision_ms = PRECISION * self.graph_cost(graph)
        self.searching = True

    def confirm(self, graph: Graph) -> bool:
        """Time the guessed and doubted keys of `graph` (a round's winner): True
        where one moved by more than MOVED from its price in the search, so the
        search is to run again on the timed costs."""
        return self._confirm(graph)

    def end_search(self, graph: Graph | None) -> None:
        """The search chose `graph`: its keys are timed, so its cost is measured
        (None: the search ended without a choice)."""
        try:
            if graph is not None:
                self._confirm(graph)
        finally:
            self.searching = False
            self._rivals = {}

    def time_ahead(self, graphs: Any) -> None:
        """Time in one batch the units of `graphs` that pricing them would time
        one at a time (missing from memory and cache, and not to be guessed): a
        search pass judges each of a model's pieces whole, and one new fused
        chain a piece, each timed in a batch of its own, cost ResNet-50 30
        batches of 0.2-0.7 s set-up each."""
        pending: dict[Any, tuple] = {}
        for graph in graphs:
            for _, unit in self._units(graph):
                if unit is None or unit[0] in pending or unit[0] in self._memo:
                    continue
                key, what = unit
                if self._guessable(what):
                    continue
                if self.cache is None or self.cache.entry(self.name, self.device, key) is None:
                    pending[key] = what
        self._measure(list(pending.items()))

    def _timed_units(self, graph: Graph) -> list[tuple[list[int], Unit]]:
        """The units of `graph` that cost something and the device can time."""
        return [(ids, unit) for ids, unit in self._units(graph)
                if unit is not None and unit[0] not in self._untimable]

    def _confirm(self, graph: Graph) -> bool:
        """Time the guessed and doubted keys of `graph`. Where there are any, the
        keys of the searched graph that `graph` no longer has (its rivals: what
        the decision compares them with) are timed again in the same batch,
        and the new timings scaled by the rivals' prices over their timings
        now: what the batch does to timings, and a load that the reference
        programs do not see (this Intel VM's hardly slow beside a busy core),
        then weigh on both sides alike, and the ratio of new keys to rivals
        is the one measured side by side."""
        pending: dict[Any, tuple] = {}
        before: dict[Any, float] = {}
        for _, unit in self._units(graph):
            if unit is None or unit[0] in pending:
                continue
            key, what = unit
            if key not in self._memo:
                entry = self.cache.entry(self.name, self.device, key) \
                    if self.cache is not None else None
                if entry is None:
                    pending[key] = what
                    continue
                self._memo[key] = self._carried(key, what, entry)
            if key in self._guessed or key in self._doubted:
                before[key] = self._memo.pop(key)
                pending[key] = what
        self._measure(list(pending.items()), self._rivals_of(graph) if pending else None)
        return any(abs(self._memo[k] - ms) > MOVED * ms for k, ms in before.items())

    def _rivals_of(self, graph: Graph) -> dict[Any, tuple]:
        """The searched graph's priced keys that `graph` no longer has, the
        RIVALS dearest: what a decision weighs `graph`'s new keys against."""
        kept = {unit[0] for _, unit in self._units(graph) if unit is not None}
        gone = [k for k in self._rivals if k not in kept and self._memo.get(k)]
        return {k: self._rivals[k] for k in sorted(gone, key=lambda k: -self._memo[k])[:RIVALS]}

    def _analytic_price(self, what: tuple) -> tuple[str, float]:
        """A unit's label (its operators) and the analytic model's price of it."""
        label, ests = self._estimates(what)
        return label, sum(ests)

    def _estimates(self, what: tuple) -> tuple[str, list[float]]:
        """A unit's label and the analytic model's price of each of its links
        (0 where it has none)."""
        links = unit_links(what)
        label = "+".join(link_label(op, a) for op, a, _ in links)
        ests = []
        for op, attrs, ins in links:
            try:
                ms = float(self.roofline.op_cost(op, dict(attrs), [s for _, s, _ in ins]))
            except Exception:
                ms = 0.0
            ests.append(ms if math.isfinite(ms) else 0.0)
        return label, ests

    @property
    def roofline(self) -> CostModel:
        """The analytic model that prices what cannot be timed, and the guesses:
        its work terms alone (no launch, no saturation)."""
        if self._analytic is None:
            from .analytic import AnalyticCost

            self._analytic = AnalyticCost(launch_us=0.0, saturation_mflops=0.0)
        return self._analytic

    def _fallback(self, what: tuple, error: Exception) -> float:
        """The analytic model's price for a unit the device could not time
        (kept in memory, never in the cache); said once per operator."""
        label, ms = self._analytic_price(what)
        if label not in self._fallback_said:
            self._fallback_said.add(label)
            text = str(error).strip().splitlines()
            log.warning("%s cannot be timed alone on this device (%s); priced by the analytic "
                        "model", label, text[0][:200] if text else type(error).__name__)
        return ms

    @staticmethod
    def links(graph: Graph, chain: list[int], const: set[int]) -> list[Link]:
        out = []
        at = {nid: k for k, nid in enumerate(chain)}
        for k, nid in enumerate(chain):
            n = graph.nodes[nid]
            ins = tuple(("prev" if at.get(p) == k - 1 else f"@{at[p]}" if p in at else
                         const_kind(graph.nodes[p], n.op) if p in const else "x",
                         graph.nodes[p].shapes[i], graph.nodes[p].dtypes[i])
                        for p, i in n.inputs)
            out.append((n.op, n.a, canonical_inputs(n.op, ins)))
        return out

    def _cached(self, key: Any, measure) -> float:
        ms = self.cache.get(self.name, self.device, key) if self.cache is not None else None
        if ms is None:
            start = time.perf_counter()
            ms = float(measure())
            self.measured += 1
            self.measure_seconds += time.perf_counter() - start
            if self.cache is not None:
                self.cache.put(self.name, self.device, key, ms)
        return ms
