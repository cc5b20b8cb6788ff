"""The search runner: one object owns the search's limits and the objective it
is judged by, runs its passes over a graph, and reports what each pass did and
why the search stopped (egg's `Runner` is the model).

The objective, one for every pass: the cost model's cost of the graph (each
fused chain priced as one program where the device fuses, `graph_cost`; the sum
of node costs elsewhere) plus `byte_cost` per byte of constants a run reads
beyond those of the graph the run began with (`CostModel.weight_byte_cost`: a
rewrite that copies a weight other nodes still read makes every run stream the
copy, which no node's cost shows). A pass's result is kept only where the
objective falls by more than `Limits.min_gain`.

The passes, in order:
  search   the graph cut into pieces at narrow points (identical pieces searched
           once); each piece searched by the compiled core (TASO's backtracking
           within the budget, alpha, op cap and time limit), which ranks graphs
           by the node-cost sum the objective reduces to where nothing fuses;
           a piece's best is kept where the objective agrees; pieces joined.
  joined   the rules tagged `across_pieces` (and `fused_gain` where the device
           fuses) on the joined graph, one match at a time, each step lowering
           the objective: matches the pieces split, gains node sums miss.
           (A measured model prices keys it has not timed by a guess and
           times the winner's (`confirm`); where one moved, these two passes
           run again on the timed costs, at most SETTLE_ROUNDS more times.)
  fold     weight-only subgraphs become initializers (free to the objective).
  timing   a model that times whole graphs (`compare_models`, or `time_models`)
           has the last word: the result is kept only if it measures faster
           than the original ("faster"; not on "not faster" or "undecided").
           A result identical to the original is not timed ("unchanged").
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from taso.rules_db import Rule

from taso.ir import Graph
from taso.runtime import Verdict

from .cost import CostModel
from .engine import Engine
from .fold_weights import fold_weights
from .partition import Piece, join, piece_key, shared_weights, split_graph
from .trace import JOINED, PieceTrace, Trace

log = logging.getLogger("taso.optimizer")

# Pieces of a partitioned graph: at least MIN, at most MAX operators.
PIECE_MIN_OPS, PIECE_MAX_OPS = 8, 48
# At most this many rounds again after a measured model times a winner's guessed keys.
SETTLE_ROUNDS = 3
# Why a search stopped, from the least limited to the most (optimizer/csrc/core.h).
STOPS = ("saturated", "exhausted", "budget", "time_limit")


@dataclass(frozen=True)
class Limits:
    budget: int = 1000          # graphs the core expands, per piece
    alpha: float = 1.05         # candidates up to alpha x the best are expanded
    time_limit: float = 0.0     # seconds of core search per piece; 0: none
    max_ops_factor: float = 2.0  # op cap: candidates with more x the piece's operators dropped
    min_gain: float = 0.0       # a pass keeps a result that lowers the objective by more
    joined_steps: int = 4096    # rewrites of the joined pass, at most


@dataclass
class PassReport:
    name: str                   # "search", "joined", "fold" or "timing"
    round: int                  # 1, and 2.. for the rounds on timed costs
    kept: bool                  # whether its result was kept
    applied: dict[str, int]     # rewrites it kept, by rule id
    seconds: float
    cost_before: float | None = None  # the objective before and after (None: not priced)
    cost_after: float | None = None
    stop_reason: str = ""       # why it ended
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunReport:
    graph: Graph                # the result (weight-only subgraphs folded with `fold`)
    applied: Counter[str]
    stop_reason: str            # the search pass's, of the last round (STOPS)
    passes: list[PassReport]
    cost_before: float          # the model's cost of the graph run and of the result
    cost_after: float
    explored: int = 0           # graphs the core expanded, all rounds
    generated: int = 0          # distinct graphs it saw
    core_seconds: float = 0.0
    search_seconds: float = 0.0  # search and joined passes, all rounds
    fold_seconds: float = 0.0
    pieces: int = 1
    distinct_pieces: int = 1
    rounds: int = 1
    timed: dict[str, Any] | None = None  # the timing pass's measurements
    core_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Objective:
    """What every pass is judged by (the module's docstring), for a run that
    began at a graph whose constants take `base_bytes` and whose objective is
    `start`: a result is kept where it falls below `start` by the margin."""

    model: CostModel
    byte_cost: float    # cost of one more byte of constants a run reads
    base_bytes: float
    start: float = 0.0

    @classmethod
    def at(cls, model: CostModel, byte_cost: float, cg: Any, graph: Graph) -> Objective:
        """The objective of a run that begins at `graph` (its core copy `cg`)."""
        o = cls(model, byte_cost, cg.const_bytes)
        return replace(o, start=o(cg, graph))

    @classmethod
    def starting_at(cls, model: CostModel, graph: Graph) -> Objective:
        """`at` `graph`, priced by an engine of its own."""
        engine = Engine([], model)
        return cls.at(model, engine.core.byte_cost, engine.to_core(graph), graph)

    @property
    def fused(self) -> bool:
        return bool(getattr(self.model, "fuses", False))

    def cost(self, cg: Any, graph: Graph | Callable[[], Graph]) -> float:
        """The model's cost of core graph `cg`, which is `graph` (or `graph()`,
        asked for only where the device fuses: node costs cannot say what)."""
        if not self.fused:
            return cg.cost
        return self.model.graph_cost(graph if isinstance(graph, Graph) else graph())

    def __call__(self, cg: Any, graph: Graph | Callable[[], Graph]) -> float:
        return self.cost(cg, graph) + self.byte_cost * (cg.const_bytes - self.base_bytes)

    def keeps(self, value: float, min_gain: float) -> bool:
        """Whether a result of this objective value is kept: below `start` by
        more than the fraction `min_gain`."""
        return value < (1 - min_gain) * self.start


class Runner:
    """Runs the passes over a graph within `limits`. `progress(piece, pieces,
    expanded, best)` is called while searching; piece == pieces is the joined
    pass, with `expanded` the rewrites it has applied. `trace`, where given,
    records what each pass did for the HTML report (trace.py)."""

    def __init__(self, rules: list[Rule], model: CostModel, limits: Limits = Limits(),
                 partition: bool = True, fold: bool = True, timing: bool = True,
                 progress: Callable[[int, int, int, float], None] | None = None,
                 trace: Trace | None = None):
        self.rules, self.model, self.limits, self.trace = rules, model, limits, trace
        self.partition, self.fold, self.timing, self.progress = partition, fold, timing, progress
        fused = bool(getattr(model, "fuses", False))
        wanted = {"across_pieces", *(("fused_gain",) if fused else ())}
        self.joined_rules = [r for r in rules if wanted & set(r.tags)]

    def run(self, graph: Graph) -> RunReport:
        """Optimize `graph` (pruned, and the model told to price within it:
        see `run_search`)."""
        t0 = time.perf_counter()
        pieces = split_graph(graph, PIECE_MIN_OPS, PIECE_MAX_OPS) if self.partition else None
        passes: list[PassReport] = []
        rounds = explored = generated = 0
        core_seconds = 0.0
        # A measured model times the original's keys now, guesses the keys the
        # search meets anew, and times each round's winner's (`confirm`).
        self.model.begin_search(graph)
        try:
            while True:
                rounds += 1
                if self.trace is not None:
                    self.trace.start_round(rounds)
                # Engines memoize costs: a round on timed costs needs new ones.
                engine = Engine(self.rules, self.model)
                out, applied, found = self.search_pass(graph, pieces, engine, rounds)
                # The whole graph goes to this engine after the pieces: the order in
                # which an engine meets attributes and shapes decides the core's
                # canonical operand orders, hence the order of equal-cost rewrites.
                objective = Objective.at(self.model, engine.core.byte_cost,
                                         engine.to_core(graph), graph)
                out, more, joined = self.joined_pass(out, objective, rounds,
                                                     found.detail["pieces"])
                applied.update(more)
                found.cost_before, found.cost_after = objective.start, joined.cost_before
                passes += [found, joined]
                explored += found.detail["expanded"]
                generated += found.detail["generated"]
                core_seconds += found.detail["core_seconds"]
                # The winner's guessed keys, timed: where one moved, the passes run
                # again on the timed costs (at most SETTLE_ROUNDS times).
                if rounds > SETTLE_ROUNDS or not self.model.confirm(out):
                    break
            self.model.end_search(out)
        finally:
            self.model.end_search(None)
        t1 = time.perf_counter()
        if self.fold:
            out = fold_weights(out)
            passes.append(PassReport("fold", rounds, True, {}, time.perf_counter() - t1))
        t2 = time.perf_counter()
        timed = self.timing_pass(graph, out, applied, rounds)
        if timed is not None:
            passes.append(timed[0])
            if not timed[0].kept:
                out, applied = timed[1], Counter()

        # Priced afresh: the last round's engine remembers the guesses that
        # `end_search` has since timed.
        pricing = Engine([], self.model)
        final = Objective.at(self.model, pricing.core.byte_cost, pricing.to_core(graph), graph)

        def price(g: Graph) -> float:
            return final.cost(pricing.to_core(g), g)
        return RunReport(
            graph=out, applied=applied, stop_reason=found.stop_reason, passes=passes,
            cost_before=price(graph), cost_after=price(out), explored=explored,
            generated=generated, core_seconds=core_seconds, search_seconds=t1 - t0,
            fold_seconds=t2 - t1, pieces=found.detail["pieces"],
            distinct_pieces=found.detail["distinct_pieces"], rounds=rounds,
            timed=timed[0].detail if timed is not None else None,
            core_counters=dict(engine.core.counters))

    # ---- the search pass -----------------------------------------------------------
    def search_pass(self, g: Graph, pieces: list[Piece] | None, engine: Engine,
                    round_: int = 1) -> tuple[Graph, Counter[str], PassReport]:
        """Each distinct piece of `g` (all of it where `pieces` is None) searched
        by the core of `engine`; its best kept where the piece's objective falls
        by the margin; the pieces joined. (The report's objective values are
        the caller's to fill in.)"""
        start = time.perf_counter()
        lim = self.limits
        graphs = [p.graph for p in pieces] if pieces else [g]
        pinned = shared_weights(pieces) if pieces else [()]
        results: dict[tuple, Any] = {}
        applied: Counter[str] = Counter()
        stops: Counter[str] = Counter()
        expanded = generated = 0
        core_seconds = 0.0
        keys, cgs, points = [], [], {}
        for k, pg in enumerate(graphs):
            key = (piece_key(pg), pinned[k])
            cg = engine.to_core(pg, pinned[k])
            keys.append(key)
            cgs.append(cg)
            if key not in results:
                points[key] = [(0, cg.cost)]
                res = results[key] = engine.core.search(
                    cg, budget=lim.budget, alpha=lim.alpha, max_ops_factor=lim.max_ops_factor,
                    time_limit=lim.time_limit, **self._core_progress(k, len(graphs), cg,
                                                                     points[key]))
                expanded += res["expanded"]
                generated += res["generated"]
                core_seconds += res["seconds"]
                stops[res["stop_reason"]] += 1
                log.debug("piece %d/%d: %d ops, cost %.4f -> %.4f, %d expanded, %.3fs, %s",
                          k + 1, len(graphs), cg.num_ops, res["initial_cost"], res["best"].cost,
                          res["expanded"], res["seconds"], res["stop_reason"])
        # The core ranks by node costs; the objective has the last word (a device
        # that fuses can run a rewrite slower than its node costs say:
        # cost/measured.py), by more than the gain the model can resolve. Where
        # the objective prices whole graphs, what it will time is timed first,
        # for every piece in one batch.
        found = {k: engine.from_core(results[key]["best"], graphs[k])
                 for k, key in enumerate(keys) if results[key]["applied"]}
        if found and getattr(self.model, "fuses", False):
            once = {keys[k]: k for k in found}.values()  # a piece's copies price alike
            self.model.time_ahead([g for k in once for g in (found[k], graphs[k])])
        optimized = []
        traced: dict[tuple, PieceTrace] = {}
        for k, pg in enumerate(graphs):
            key, cg, res = keys[k], cgs[k], results[keys[k]]
            if key in traced:
                traced[key].copies += 1
            best = pg
            if k in found:
                # Constants count as the core counted them, the piece's shared
                # weights pinned.
                piece = Objective.at(self.model, engine.core.byte_cost, cg, pg)
                value = piece(res["best"], found[k])
                if piece.keeps(value, lim.min_gain):
                    best = found[k]
                    applied.update(engine.rules[i].id for i in res["applied"])
                elif self.trace is not None and key not in traced:
                    self.trace.refuse(refusal(piece.start, value), f"piece {k + 1}",
                                      Counter(engine.rules[i].id for i in res["applied"]),
                                      round_, before=piece.start, after=value,
                                      min_gain=lim.min_gain)
            if self.trace is not None and key not in traced:
                traced[key] = self._trace_piece(engine, k, cg, pg, res, points[key],
                                                best is not pg)
            optimized.append(best)
        out = join(g, pieces, optimized) if pieces else optimized[0]
        stop = max(stops, key=STOPS.index) if stops else "saturated"
        return out, applied, PassReport(
            "search", round_, bool(applied), dict(applied), time.perf_counter() - start,
            stop_reason=stop,
            detail={"stops": dict(stops), "pieces": len(graphs), "distinct_pieces": len(results),
                    "expanded": expanded, "generated": generated, "core_seconds": core_seconds})

    def _core_progress(self, k: int, n: int, cg: Any,
                       points: list[tuple[int, float]]) -> dict[str, Any]:
        progress, trace = self.progress, self.trace
        if progress is None and trace is None:
            return {}
        if progress is not None:
            progress(k, n, 0, cg.cost)

        def cb(expanded: int, best: float, queued: int) -> None:  # from inside the core
            if trace is not None:
                points.append((expanded, best))
            if progress is not None and expanded % 50 < every:
                progress(k, n, expanded, best)
        # The report draws the best cost against graphs expanded: about 100 points.
        every = 50 if trace is None else max(1, min(50, self.limits.budget // 100))
        return {"progress": cb, "progress_every": every}

    def _trace_piece(self, engine: Engine, k: int, cg: Any, pg: Graph, res: dict,
                     points: list[tuple[int, float]], kept: bool) -> PieceTrace:
        """The trace's record of piece k's search, its path retraced where kept."""
        assert self.trace is not None
        points.append((res["expanded"], res["best"].cost))
        rules = dict(Counter(engine.rules[i].id for i in res["applied"]))
        if kept:
            self.trace.retrace(engine, cg, list(res["path_keys"]), pg, f"piece {k + 1}")
        t = PieceTrace(k, 1, cg.num_ops, res["initial_cost"], res["best"].cost, res["expanded"],
                       res["generated"], res["stop_reason"], res["seconds"], points, kept, rules)
        self.trace.pieces.append(t)
        return t

    # ---- the joined pass -----------------------------------------------------------
    def joined_pass(self, joined: Graph, objective: Objective, round_: int = 1,
                    pieces: int = 1) -> tuple[Graph, Counter[str], PassReport]:
        """The tagged rules on the joined graph (`descend`), kept where the
        objective falls below the graph the run began with by the margin: the
        pieces may have taken most of a gain (BERT imported from ONNX: 15 of 24
        dense layers) and left this pass less than the margin of the rest."""
        start = time.perf_counter()
        engine = Engine(self.joined_rules, self.model)
        step = None if self.progress is None else (
            lambda n, c: self.progress(pieces, pieces, n, c))  # type: ignore[misc]
        trace = self.trace
        on_step = None if trace is None else (
            lambda ri, parent, key, c0, c1: self._trace_joined(engine, ri, parent, key, joined))
        out, applied, before, after, stop = descend(joined, engine, objective,
                                                    self.limits.joined_steps, step, on_step)
        kept = bool(applied) and objective.keeps(after, self.limits.min_gain)
        if trace is not None:
            trace.joined = {"before": before, "after": after, "kept": kept, "stop": stop,
                            "rules": dict(applied), "min_gain": self.limits.min_gain}
            if applied and not kept:
                trace.steps = [s for s in trace.steps if s.where != JOINED]
                trace.refuse(refusal(objective.start, after), JOINED, applied, round_,
                             before=objective.start, after=after, min_gain=self.limits.min_gain)
        if kept:
            log.info("rewrites of the joined graph: %s, objective %.3f -> %.3f", dict(applied),
                     before, after)
        else:
            out, applied, after = joined, Counter(), before
        return out, applied, PassReport("joined", round_, kept, dict(applied),
                                         time.perf_counter() - start, before, after, stop,
                                         {"rules": len(self.joined_rules)})

    def _trace_joined(self, engine: Engine, ri: int, parent: Any, key: int,
                      joined: Graph) -> None:
        assert self.trace is not None
        if not self.trace.wants(JOINED, engine.rules[ri].id):
            self.trace.untraced += 1
            return
        found = engine.core.rewrite_at(parent, key)
        if found is not None:
            _, matched, targets, child = found
            self.trace.add_step(engine, ri, parent, matched, child, targets, joined, JOINED)

    # ---- the timing pass -----------------------------------------------------------
    def timing_pass(self, original: Graph, out: Graph, applied: Counter[str],
                    round_: int) -> tuple[PassReport, Graph] | None:
        """Both whole models (`original` folded as `out` is) timed against each
        other on the device: node and chain costs cannot see everything a
        runtime does with a graph (NasRNN's relu merges: predicted cheaper, ran
        slower). Only a "faster" verdict keeps `out`. A result identical to the
        original is not timed. The report, and the graph to keep where `out`
        is not kept. None where the model times no whole models."""
        if not self.timing or not times_models(self.model):
            return None
        start = time.perf_counter()
        if applied and self.fold:
            original = fold_weights(original)
        if not applied or identical(original, out):
            verdict, original = Verdict("unchanged"), out
        else:
            try:
                verdict = compare_models(self.model, original, out)
            except Exception as e:
                # Advice on keeping a checked result, from a device runtime whose
                # errors share no base class (onnxruntime's, cupy's, a user model's):
                # a failure skips the advice, said in a warning, never the result.
                text = str(e).strip()
                log.warning("the whole-model timing was skipped: %s",
                            text.splitlines()[0] if text else type(e).__name__)
                log.debug("the whole-model timing failed", exc_info=True)
                return None
        kept = verdict.verdict == "faster"
        detail = {"verdict": verdict.verdict, "kept": kept, "original_ms": verdict.a_ms,
                  "optimized_ms": verdict.b_ms, "ratio": verdict.ratio, "low": verdict.low,
                  "high": verdict.high, "confidence": verdict.confidence,
                  "rounds": verdict.rounds,
                  "margin": self.model.measured_gain,
                  "seconds": time.perf_counter() - start, "rules": dict(sorted(applied.items()))}
        if verdict.verdict in ("not faster", "undecided"):
            log.info("kept the original: the optimized model measured %s (%.3f ms against "
                     "%.3f ms)", verdict.verdict, verdict.b_ms, verdict.a_ms)
            if self.trace is not None:
                numbers = {k: v for k, v in detail.items() if k not in ("kept", "rules")}
                self.trace.refuse(NOT_FASTER, "whole model", applied, **numbers)
        return PassReport("timing", round_, kept, dict(applied) if kept else {},
                          detail["seconds"], stop_reason=verdict.verdict,
                          detail=detail), original


# The trace's reason for a result the whole-model timing did not keep.
NOT_FASTER = "not measured faster as a whole model"


def times_models(model: CostModel) -> bool:
    """Whether `model` can time whole models against each other."""
    return any(getattr(model, name, None) is not None
               for name in ("compare_models", "time_models"))


def compare_models(model: CostModel, original: Graph, optimized: Graph) -> Verdict:
    """The model's verdict on `optimized` against `original`: its own
    `compare_models`, else one timing of each by `time_models`, which gives
    two numbers and no interval (the cupy backend, a user's model)."""
    compare = getattr(model, "compare_models", None)
    if compare is not None:
        return compare(original, optimized)
    start = time.perf_counter()
    before, after = model.time_models([original, optimized])  # type: ignore[attr-defined]
    faster = after < (1 - model.measured_gain) * before
    return Verdict("faster" if faster else "not faster", after / before if before else None,
                   seconds=time.perf_counter() - start, a_ms=before, b_ms=after)


def identical(a: Graph, b: Graph) -> bool:
    """Whether `a` and `b` are the same model: the same structure (`Graph.hash`,
    which leaves weights' values out) and the same values of same-named weights."""
    if a.hash() != b.hash():
        return False
    wa, wb = ({n.name: n.data for n in g.weights} for g in (a, b))
    return len(wa) == len(a.weights) and wa.keys() == wb.keys() and all(
        np.array_equal(wa[k], wb[k]) for k in wa)


def timed_text(v: dict[str, Any], arrow: str = "->", times: str = "x") -> str:
    """The whole-model verdict (a report's `timed`) in a line: the two
    latencies, the speedup with its confidence interval where there is one,
    and what was kept."""
    if v["verdict"] == "unchanged":
        return "unchanged (" + ("the rewrites left the graph as it was" if v["rules"]
                                else "no rewrite applied") + ")"
    speedup = f", {times}{1 / v['ratio']:.2f}" if v.get("ratio") else ""
    if v.get("low") and v.get("high"):  # B/A's interval, turned into A/B's
        speedup += f" [{times}{1 / v['high']:.2f}, {times}{1 / v['low']:.2f}]"
    outcome = {"faster": "faster: kept", "not faster": "not faster: original kept",
               "undecided": f"undecided after {v['seconds']:.0f} s: original kept"}
    return (f"{v['original_ms']:.3f} ms {arrow} {v['optimized_ms']:.3f} ms{speedup} "
            f"{outcome[v['verdict']]}")


def refusal(before: float, after: float) -> str:
    """Why a pass's result was not kept, as the report groups it."""
    return "below --min-gain" if after < before else "not cheaper priced as a whole"


def descend(graph: Graph, engine: Engine, objective: Objective, max_steps: int = 4096,
            progress: Callable[[int, float], None] | None = None,
            on_step: Callable[[int, Any, int, float, float], Any] | None = None
            ) -> tuple[Graph, Counter[str], float, float, str]:
    """Apply `engine`'s rules to `graph` one match at a time, each time the
    first rewrite that lowers the objective, while one does, for at most
    `max_steps` steps; `progress(rewrites, objective)` after each, and
    `on_step(rule, core graph before, match key, objective before, after)`
    (for the report: where the rule fired). Returns the
    graph, the rewrites by rule id, the objective before and after, and why it
    stopped: "saturated" (no rewrite lowers the objective) or "steps"."""
    applied: Counter[str] = Counter()
    cg = engine.to_core(graph)
    start = cost = objective(cg, graph)
    best: Callable[[], Graph] = lambda: graph  # noqa: E731
    # The first improvement, not the best: the matches are mostly independent
    # (one per layer or time step), and a long sequence has thousands, so the
    # core builds the rewrites a page at a time (pages of 1, 2, 4, ... 64).
    # A match that did not lower the cost is passed over in later steps (by its
    # key, which a rewrite of other nodes leaves alone), so that a step prices
    # about one graph instead of every loser before the first winner. A rewrite
    # of its consumers can make a loser win, so when none is left to win, the
    # passed-over ones are tried once more before stopping (that pass counts
    # as one of the `max_steps`).
    passed: set[int] = set()
    retried = False
    stop = "steps"
    for _ in range(max_steps):
        found, page = None, 1
        while found is None:
            cands = engine.core.expand(cg, 0, page, passed)
            for ri, key, cand in cands:
                # A taso Graph is built where the objective needs one (a fusing
                # device), at most once per candidate.
                rebuilt = _once(lambda cand=cand: engine.from_core(cand, graph))
                c = objective(cand, rebuilt)
                if c < cost:
                    found = (ri, cand, rebuilt, c)
                    if on_step is not None:
                        on_step(ri, cg, key, cost, c)
                    break
                passed.add(key)
            if found is not None or len(cands) < page:
                break
            page = min(2 * page, 64)  # the losers of this page are passed over now
        if found is None:
            if retried or not passed:
                stop = "saturated"
                break
            passed.clear()
            retried = True
            continue
        retried = False
        ri, cg, best, cost = found
        applied[engine.rules[ri].id] += 1
        if progress is not None:
            progress(sum(applied.values()), cost)
    return best(), applied, start, cost, stop


def _once(make: Callable[[], Graph]) -> Callable[[], Graph]:
    """`make`, called at most once: later calls return its first result."""
    box: list[Graph] = []

    def get() -> Graph:
        if not box:
            box.append(make())
        return box[0]
    return get
