"""`optimize`: the cost-based search over a graph, end to end.

Rules are compiled into the C++ core once per run; a large graph is cut into
pieces at narrow points (identical pieces are searched once); each piece is
searched by TASO's backtracking (priority queue by cost, alpha relaxation, a
budget of expanded graphs, hash dedup, op-count cap); the pieces are joined and
weight-only subgraphs folded into initializers.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taso.rules_db import Rule, RuleSet, checked, default_rule_files, load
from taso.verifier.record import is_current

from taso.ir import Graph

from .cost import CostModel, get_cost_model
from .engine import Engine
from .fold_weights import fold_weights
from .fusion_rules import ACROSS_PIECES, FUSED_GAINS
from .partition import Piece, join, piece_key, shared_weights, split_graph

log = logging.getLogger("taso.optimizer")

# The cost model: times measured on this machine's CPU in onnxruntime, where
# the optimized model will run; "analytic" (a roofline, no device) is for
# tests and quick looks, and its choices can run slower here.
DEFAULTS: dict[str, Any] = {"budget": 1000, "alpha": 1.05, "cost_model": "ort"}
# Pieces of a partitioned graph: at least MIN, at most MAX operators.
PIECE_MIN_OPS, PIECE_MAX_OPS = 8, 48
# At most this many searches again after a measured model settles its timings.
SETTLE_PASSES = 2


def set_search_budget(n: int) -> None:
    """Default number of graphs the search expands (per piece)."""
    problem = argument_problem(budget=n)
    if problem:
        raise ValueError(f"the search budget {problem.partition(' ')[2]}")
    DEFAULTS["budget"] = int(n)


def set_cost_threshold(alpha: float) -> None:
    """Default alpha: graphs up to alpha times the best cost are still expanded."""
    problem = argument_problem(alpha=alpha)
    if problem:
        raise ValueError(problem)
    DEFAULTS["alpha"] = float(alpha)


def set_cost_model(spec: str | CostModel | Callable) -> None:
    """Default cost model: a name ("ort", "analytic", "cupy"), a CostModel or a
    function (op, attrs, input_shapes) -> milliseconds."""
    get_cost_model(spec)  # refuses an unknown name, or a device this machine lacks
    DEFAULTS["cost_model"] = spec


def enable_debug_logging() -> None:
    configure_logging(logging.DEBUG)


def configure_logging(level: int | str | None = None) -> None:
    """Log level from the argument, else TASO_DEBUG=1 (debug) or TASO_LOG_LEVEL."""
    if level is None:
        if os.environ.get("TASO_DEBUG", "") not in ("", "0"):
            level = logging.DEBUG
        else:
            level = os.environ.get("TASO_LOG_LEVEL", "").upper() or None
    if level is None:
        return
    logger = logging.getLogger("taso")
    try:
        logger.setLevel(level)
    except (ValueError, TypeError):
        import sys
        print(f"taso: ignoring TASO_LOG_LEVEL={level!r} (use debug, info, warning or error)",
              file=sys.stderr)
        return
    if not logger.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(h)


configure_logging()


# ---- rules -------------------------------------------------------------------------
def resolve_rules(rules: Any = None, unverified: bool = False) -> list[Rule]:
    """The rules to search with. None: the shipped default sets (DEFAULT_SETS);
    a path or a list of paths: those files; a RuleSet, Rules, or a mix. Every
    rule is checked (a malformed one is a ValueError naming it). However they
    are given, only rules proved from today's axioms count, unless
    `unverified`: a rule whose proof record was made from other axioms (a
    stale record) is proved again here, and kept if it still is."""
    if rules is None:
        rules = default_rule_files()
    if isinstance(rules, (str, Path, Rule, RuleSet)):
        rules = [rules]
    given: list[Rule] = []
    for item in rules:
        if isinstance(item, Rule):
            given.append(checked(item))
        elif isinstance(item, RuleSet):
            given.extend(checked(r) for r in item)
        elif isinstance(item, (str, Path)):
            given.extend(load(item))  # checked as it is read
        else:
            raise TypeError(f"rules: expected paths, RuleSets or Rules, got "
                            f"{type(item).__name__}")
    if unverified:
        return given
    stale = [r for r in given if r.status == "proved" and not is_current(r.verification)]
    reproved = _prove_again(stale)
    return [r for r in given if is_current(r.verification) or id(r) in reproved]


def _prove_again(rules: list[Rule]) -> set[int]:
    """Ids (id()) of the rules whose stale proof records hold again today."""
    if not rules:
        return set()
    from taso.verifier.prove import prove
    log.warning("%d rule(s) carry proofs made from other axioms; proving them again "
                "(taso-verify --output writes the new records)", len(rules))
    return {id(r) for r in rules if prove(r, timeout=10.0)["proved"]}


# ---- the report ----------------------------------------------------------------------
@dataclass
class SearchReport:
    graph: Graph
    cost_before: float
    cost_after: float
    rules_applied: dict[str, int]
    explored: int  # graphs expanded
    generated: int  # distinct graphs seen
    seconds: float  # the whole optimization: pieces, search, joining, folding
    search_seconds: float = 0.0  # cutting, searching the pieces (in the core), joining
    core_seconds: float = 0.0  # in the search core alone
    fold_seconds: float = 0.0  # evaluating weight-only subgraphs into initializers
    pieces: int = 1
    distinct_pieces: int = 1
    num_rules: int = 0
    cost_model: str = ""
    max_error: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("graph", "extra")}
        d["ops_before"] = self.extra.get("ops_before")
        d["core_counters"] = self.extra.get("core")
        d["ops_after"] = self.graph.num_ops()
        d["timed"] = self.extra.get("timed")  # the whole-model timing, where one ran
        d["costs_measured"] = self.extra.get("costs_measured")
        d["passes"] = self.extra.get("passes", 1)  # searches: 1, more after settled timings
        return d


# ---- the search ------------------------------------------------------------------------
# The core counts expanded graphs in a C int.
MAX_BUDGET = 2**31 - 1


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) or \
        type(v).__module__ == "numpy" and hasattr(v, "dtype") and v.dtype.kind in "iuf"


def _whole(v: Any) -> bool:
    return _real(v) and math.isfinite(v) and float(v) == int(v)


_RANGES = {"budget": (lambda v: _whole(v) and 1 <= v <= MAX_BUDGET,
                      f"must be a whole number from 1 to {MAX_BUDGET}"),
           "alpha": (lambda v: _real(v) and math.isfinite(v) and v >= 1,
                     "must be a finite number >= 1"),
           "time_limit": (lambda v: _real(v) and math.isfinite(v) and v >= 0,
                          "must be >= 0 seconds"),
           "min_gain": (lambda v: _real(v) and 0 <= v < 1, "must be in [0, 1)")}


def argument_problem(flags: bool = False, **values: float | None) -> str | None:
    """Why one of the search's numeric arguments (budget, alpha, time_limit,
    min_gain; None: the default) is out of range, or None; named as taso-opt's
    flags when `flags`."""
    for name, v in values.items():
        ok, rule = _RANGES[name]
        if v is not None and not ok(v):
            label = "--" + name.replace("_", "-") if flags else name
            return f"{label} {rule}, got {v}"
    return None


def run_search(graph: Graph, alpha: float | None = None, budget: int | None = None,
               rules: Any = None, cost_model: str | CostModel | Callable | None = None,
               partition: bool = True, unverified: bool = False, fold: bool = True,
               time_limit: float = 0.0, min_gain: float | None = None, timing: bool = True,
               progress: Callable[[int, int, int, float], None] | None = None,
               check: bool = True, check_seed: int = 0, reference: Any = None,
               validate: bool | None = None) -> SearchReport:
    """Optimize `graph`; returns the report with the optimized graph.
    `cost_model`: a name, a CostModel or a function (op, attrs, shapes) -> ms;
    None takes the default (`set_cost_model`; at first "ort", measured on this
    CPU). A piece's rewrite is kept when its whole-graph cost falls by more than
    `min_gain` (a fraction; default: the cost model's own `min_gain`). With a
    model that can time whole graphs (`time_models`) and `timing`, the
    result is kept only if it also measures faster, by more than the model's
    `measured_gain` (`validate` is the old name of `timing`).
    With `check` (the default) the result is then compared with `graph` (or
    with `reference`, the ONNX model it was loaded from) in onnxruntime on
    seeded random inputs (`check_seed`; see `check.check_result`): a mismatch
    raises `taso.CheckError`, and the report's `max_error` is the largest
    difference.
    `progress(piece, pieces, expanded, best_cost)` is called while searching;
    piece == pieces is the pass over the joined graph (`refine_joined`), with
    `expanded` the rewrites it has applied."""
    if not isinstance(graph, Graph):
        raise TypeError(f"optimize needs a taso Graph (taso.load_onnx(model) reads one from "
                        f"ONNX), not {type(graph).__name__}")
    if validate is not None:
        timing = validate
    alpha = DEFAULTS["alpha"] if alpha is None else alpha
    budget = DEFAULTS["budget"] if budget is None else budget
    problem = argument_problem(alpha=alpha, budget=budget, time_limit=time_limit,
                               min_gain=min_gain)
    if problem:
        raise ValueError(problem)
    alpha, budget = float(alpha), int(budget)
    model = get_cost_model(DEFAULTS["cost_model"] if cost_model is None else cost_model)
    margin = model.min_gain if min_gain is None else float(min_gain)
    rule_list = resolve_rules(rules, unverified)
    if not rule_list:
        log.warning("no rules to search with%s; nothing will be rewritten",
                    _why_no_rules(rules, unverified))
    t0 = time.perf_counter()
    timed_before = (getattr(model, "measured", 0), getattr(model, "measure_seconds", 0.0))
    g = graph.pruned()
    model.price_within(g)  # its pieces and rewrites are priced as parts of it
    engine = Engine(rule_list, model)
    pieces = split_graph(g, PIECE_MIN_OPS, PIECE_MAX_OPS) if partition else None
    found = _search_once(g, pieces, engine, model, rule_list, margin, budget, alpha,
                         time_limit, progress)
    # Small programs timed in a moment of disturbance (another tenant's burst,
    # weights evicted from a shared cache) read 1.5-3x their cost and steer
    # the search; each such timing is taken again, seconds later, and where
    # one moved the search runs again on the settled costs (which may time
    # new keys, settled in turn).
    settle = getattr(model, "settle", None)
    passes = 1
    for _ in range(SETTLE_PASSES):
        if settle is None or not settle():
            break
        passes += 1
        before = found
        engine = Engine(rule_list, model)
        found = _search_once(g, pieces, engine, model, rule_list, margin, budget, alpha,
                             time_limit, progress)
        found.explored += before.explored
        found.generated += before.generated
        found.core_seconds += before.core_seconds
    out, applied = found.graph, found.applied
    t1 = time.perf_counter()
    if fold:
        out = fold_weights(out)
    t2 = time.perf_counter()
    timed = None
    time_models = getattr(model, "time_models", None)
    if timing and applied and time_models is not None:
        # The last word is the device's: both whole models, timed against each
        # other. Node and chain costs cannot see everything a runtime does
        # with a graph (NasRNN's relu merges: predicted cheaper, ran slower).
        original = fold_weights(g) if fold else g
        try:
            before_ms, after_ms = time_models([original, out])
        except Exception as e:  # a node the device cannot run (cupy: opaque), a failed run
            log.warning("the whole-model timing was skipped: %s",
                        str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        else:
            timed = {"original_ms": before_ms, "optimized_ms": after_ms,
                         "kept": after_ms < (1 - model.measured_gain) * before_ms,
                         "seconds": time.perf_counter() - t2,
                         "rules": dict(sorted(applied.items()))}
        if timed is not None and not timed["kept"]:
            log.info("kept the original: it measured %.3f ms, the optimized %.3f ms",
                     before_ms, after_ms)
            out, applied = original, Counter()
    out.dim_params = dict(g.dim_params)
    out.output_dim_params = dict(g.output_dim_params)
    max_error = None
    notes: list[str] = []
    if check:
        from .check import BindingError, check_result

        try:
            max_error = check_result(g, out, dict(applied), seed=check_seed,
                                     reference=reference)
        except BindingError as e:
            # A rewrite sized something by the searched binding (a split of the
            # batch rows, a reshape back to them): search again without the
            # rules whose target side reads a dim, whose results hold for every
            # binding; else the result is valid at one binding only.
            safe = [r for r in rule_list if binding_free(r)]
            if not applied or len(safe) == len(rule_list):
                raise _one_binding(e, g) from None
            log.info("the result holds at the searched binding only (%s); searching again "
                     "without the %d rules that size by a dim", e, len(rule_list) - len(safe))
            try:
                again = run_search(graph, alpha, budget, safe, model, partition, True, fold,
                                   time_limit, min_gain, timing, progress, True, check_seed,
                                   reference)
            except BindingError as e2:
                raise _one_binding(e2, g) from None
            again.extra["notes"] = [f"rules that size by a dim were left out: with them the "
                                    f"result held at the searched binding only ({e})"]
            return again
    t3 = time.perf_counter()
    t3 = time.perf_counter()
    # The cost the result was judged by: fused where the device fuses.
    price = model.graph_cost if getattr(model, "fuses", False) else \
        (lambda h: engine.to_core(h).cost)
    report = SearchReport(
        graph=out, cost_before=price(g), cost_after=price(out),
        rules_applied=dict(sorted(applied.items())), explored=found.explored,
        generated=found.generated, seconds=t3 - t0, search_seconds=t1 - t0,
        core_seconds=found.core_seconds, fold_seconds=t2 - t1, pieces=found.pieces,
        distinct_pieces=found.distinct_pieces,
        num_rules=len(engine.rules), cost_model=model.name, max_error=max_error,
        extra={"ops_before": g.num_ops(), "core": dict(engine.core.counters), "notes": notes,
               "timed": timed, "costs_measured": _costs_measured(model, timed_before),
               "passes": passes})
    return report


def binding_free(rule: Rule) -> bool:
    """Whether no attribute of the rule's target side is read off a dim (a
    split's sizes, a reshape's target), which would bake one binding of a
    symbolic dim into the result."""
    def reads_dim(v: Any) -> bool:
        if isinstance(v, dict):
            return "dim" in v or any(reads_dim(u) for u in v.values())
        if isinstance(v, (list, tuple)):
            return any(reads_dim(u) for u in v)
        return False

    return not any(reads_dim(n.attrs) for n in rule.dst)


def _one_binding(e: Exception, g: Graph) -> Exception:
    from taso.errors import CheckError

    at = ", ".join(f"{p}={d}" for n in g.inputs
                   for d, p in zip(n.shapes[0], g.dim_params.get(n.name, ())) if p)
    return CheckError(f"the result holds at the searched binding ({at}) only: {e}; pass "
                      f"static=True (taso-opt --static) to write it at that binding")


@dataclass
class _Found:
    """What one pass of the search (the pieces, then the joined graph) found."""
    graph: Graph
    applied: Counter[str]
    explored: int = 0
    generated: int = 0
    core_seconds: float = 0.0
    pieces: int = 1
    distinct_pieces: int = 1


def _search_once(g: Graph, pieces: list[Piece] | None, engine: Engine, model: CostModel,
                 rule_list: list[Rule], margin: float, budget: int, alpha: float,
                 time_limit: float, progress: Callable | None) -> _Found:
    """Search the `pieces` of `g` (all of it where None), join them and rewrite
    the joined graph (`refine_joined`)."""
    graphs = [p.graph for p in pieces] if pieces else [g]
    pinned = shared_weights(pieces) if pieces else [()]
    results: dict[tuple, Any] = {}
    applied: Counter[str] = Counter()
    explored = generated = 0
    core_seconds = 0.0
    optimized = []
    for k, pg in enumerate(graphs):
        key = (piece_key(pg), pinned[k])
        cg = engine.to_core(pg, pinned[k])
        if key not in results:
            cb = None
            if progress is not None:
                progress(k, len(graphs), 0, cg.cost)

                def cb(e, best, queued, k=k):  # from inside the core's loop
                    progress(k, len(graphs), e, best)
            res = engine.core.search(cg, budget=budget, alpha=alpha, time_limit=time_limit,
                                     progress=cb, progress_every=50 if cb else 0)
            explored += res["expanded"]
            generated += res["generated"]
            core_seconds += res["seconds"]
            results[key] = res
            log.debug("piece %d/%d: %d ops, cost %.4f -> %.4f, %d expanded, %.3fs", k + 1,
                      len(graphs), cg.num_ops, res["initial_cost"], res["best"].cost,
                      res["expanded"], res["seconds"])
        res = results[key]
        best = engine.from_core(res["best"], pg)
        # A device that fuses can run a rewrite slower than its node costs say:
        # keep it only if the model's whole-graph cost agrees (cost/measured.py),
        # by more than the gain the model can resolve; constants it adds count
        # as the core counted them.
        grown = engine.core.byte_cost * (res["best"].const_bytes - cg.const_bytes)
        if res["applied"] and \
                model.graph_cost(best) + grown >= (1 - margin) * model.graph_cost(pg):
            best = pg
        else:
            applied.update(engine.rules[i].id for i in res["applied"])
        optimized.append(best)
    out = join(g, pieces, optimized) if pieces else optimized[0]
    fuses = getattr(model, "fuses", False)
    # On the joined graph: a piece may cut a fusion, or hold one of the nodes a
    # rule matches and not the other.
    step = None if progress is None else (
        lambda n, c: progress(len(graphs), len(graphs), n, c))
    # Judged from the graph the search began with: the pieces may have taken
    # most of a gain (BERT imported from ONNX: 15 of 24 dense layers) and left
    # the joined pass less than the margin of the rest, alone. Its rules are
    # the few listed, each step must lower the cost, and the whole model is
    # timed after.
    out, more = refine_joined(out, model, rule_list, margin,
                              ACROSS_PIECES + (FUSED_GAINS if fuses else ()), progress=step,
                              baseline=model.graph_cost(g))
    applied.update(more)
    return _Found(out, applied, explored, generated, core_seconds, len(graphs), len(results))


def _why_no_rules(rules: Any, unverified: bool) -> str:
    """What to tell a user whose rules came to nothing."""
    if rules is None:
        return " (the shipped sets hold no proved rules: pass rules= or unverified=True)"
    if isinstance(rules, (list, tuple)) and not rules:
        return ""
    if not unverified:
        return " (the rules given hold no proof from today's axioms; taso-verify proves " \
            "them, unverified=True takes them as they are)"
    return ""


def _costs_measured(model: CostModel, before: tuple[int, float]) -> dict[str, Any] | None:
    """What a measured cost model timed during this search (the rest came from
    its memo or cache); None for a model that measures nothing."""
    if not hasattr(model, "measured"):
        return None
    cache = getattr(model, "cache", None)
    return {"new": model.measured - before[0],
            "seconds": round(model.measure_seconds - before[1], 3),
            "cache": str(cache.path) if cache is not None else None}


def refine_joined(graph: Graph, model: CostModel, rules: list[Rule], margin: float,
                  ids: tuple[str, ...], max_steps: int = 4096,
                  progress: Callable[[int, float], None] | None = None,
                  baseline: float | None = None) -> tuple[Graph, Counter[str]]:
    """Apply the rules named in `ids`, one match at a time (the first that lowers
    the graph's cost, `graph_cost`), while the cost falls, for at most
    `max_steps` steps; keep the result if it lies more than `margin` below
    `baseline` (default: the cost of `graph`); `progress(rewrites, cost)` after
    each.
    For rules the search of pieces misses: those whose gain only a fusion-aware
    cost sees (`FUSED_GAINS`; the core ranks graphs by the sum of node costs, to
    which such a rewrite only adds nodes) and those whose matches span pieces
    (`ACROSS_PIECES`)."""
    applied: Counter[str] = Counter()
    chosen = [r for r in rules if r.id in ids]
    if not chosen:
        return graph, applied
    engine = Engine(chosen, model)
    cg = engine.to_core(graph)
    start = cost = model.graph_cost(graph)
    start_bytes = cg.const_bytes  # constants a rewrite adds count as in the core
    best_graph = graph
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
    for _ in range(max_steps):
        found, page = None, 1
        while found is None:
            cands = engine.core.expand(cg, 0, page, passed)
            for ri, key, cand in cands:
                g = engine.from_core(cand, graph)
                c = model.graph_cost(g) + engine.core.byte_cost * (cand.const_bytes - start_bytes)
                if c < cost:
                    found = (ri, cand, g, c)
                    break
                passed.add(key)
            if found is not None or len(cands) < page:
                break
            page = min(2 * page, 64)  # the losers of this page are passed over now
        if found is None:
            if retried or not passed:
                break
            passed.clear()
            retried = True
            continue
        retried = False
        ri, cg, best_graph, cost = found
        applied[engine.rules[ri].id] += 1
        if progress is not None:
            progress(sum(applied.values()), cost)
    if not applied or cost >= (1 - margin) * (start if baseline is None else baseline):
        return graph, Counter()
    log.info("rewrites of the joined graph: %s, cost %.3f -> %.3f", dict(applied), start, cost)
    return best_graph, applied


def optimize(graph: Graph, alpha: float | None = None, budget: int | None = None,
             rules: Any = None, cost_model: str | CostModel | Callable | None = None,
             **options: Any) -> Graph:
    """The optimized graph (weight-only subgraphs folded), checked against
    `graph` in onnxruntime unless check=False (a mismatch raises
    `taso.CheckError`). Options: partition, unverified, fold, time_limit,
    min_gain, timing, check, check_seed (see `run_search`)."""
    return run_search(graph, alpha, budget, rules, cost_model, **options).graph

