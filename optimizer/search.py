"""`optimize`: the cost-based search over a graph, end to end.

The front door: the defaults and their setters, the search's arguments
checked, the rules resolved (only proved ones), the `Runner` run over the
graph (runner.py: the limits, the objective, the passes and why the search
stopped), the result checked against the original in onnxruntime, and the
report a user reads.
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
from taso.rules_db.pattern import reads_dims
from taso.verifier.record import is_current

from taso.ir import Graph

from .cost import CostModel, get_cost_model
from .runner import Limits, Runner, RunReport
from .trace import Trace

log = logging.getLogger("taso.optimizer")

# The cost model: times measured on this machine's CPU in onnxruntime, where
# the optimized model will run; "analytic" (a roofline, no device) is for
# tests and quick looks, and its choices can run slower here.
DEFAULTS: dict[str, Any] = {"budget": 1000, "alpha": 1.05, "cost_model": "ort"}


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
    # Why the search stopped (runner.STOPS: the most limited piece's reason):
    # "saturated", "exhausted" (of candidates within alpha), "budget", "time_limit".
    stop_reason: str = ""
    # What each of the runner's passes did (runner.PassReport), in order.
    pass_reports: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("graph", "extra")}
        d["ops_before"] = self.extra.get("ops_before")
        d["core_counters"] = self.extra.get("core")
        d["ops_after"] = self.graph.num_ops()
        d["timed"] = self.extra.get("timed")  # the whole-model verdict, where one was asked
        d["costs_measured"] = self.extra.get("costs_measured")
        d["passes"] = self.extra.get("passes", 1)  # rounds: 1, more on timed guesses
        if "report_seconds" in self.extra:  # writing the HTML report (--report)
            d["report_seconds"] = self.extra["report_seconds"]
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
               validate: bool | None = None, report: str | os.PathLike | None = None,
               report_name: str = "", _trace: Trace | None = None) -> SearchReport:
    """Optimize `graph`; returns the report with the optimized graph.
    `cost_model`: a name, a CostModel or a function (op, attrs, shapes) -> ms;
    None takes the default (`set_cost_model`; at first "ort", measured on this
    CPU). A piece's rewrite is kept when its whole-graph cost falls by more than
    `min_gain` (a fraction; default: the cost model's own `min_gain`). With a
    model that can time whole graphs (`compare_models` or `time_models`) and
    `timing`, the result is kept only if it also measures faster, by more than
    the model's `measured_gain`: the verdict is "faster", "not faster",
    "undecided" or "unchanged" (nothing to time), in the report's `timed`
    (`validate` is the old name of `timing`).
    With `check` (the default) the result is then compared with `graph` (or
    with `reference`, the ONNX model it was loaded from) in onnxruntime on
    seeded random inputs (`check_seed`; see `check.check_result`): a mismatch
    raises `taso.CheckError`, and the report's `max_error` is the largest
    difference.
    `progress(piece, pieces, expanded, best_cost)` is called while searching;
    piece == pieces is the pass over the joined graph (`Runner.joined_pass`),
    with `expanded` the rewrites it has applied. The report says why the search
    stopped (`stop_reason`) and what each pass did (`pass_reports`).
    `report`: also write an HTML report there (report_html.py: where each rule
    fired, the regions before and after, what was refused and why), titled
    `report_name`."""
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
    timed_before = (getattr(model, "measured", 0), getattr(model, "measure_seconds", 0.0),
                    Counter(getattr(model, "counts", ())))
    g = graph.pruned()
    model.price_within(g)  # its pieces and rewrites are priced as parts of it
    limits = Limits(budget=budget, alpha=alpha, time_limit=float(time_limit), min_gain=margin)
    trace = _trace if _trace is not None else Trace() if report is not None else None
    run = Runner(rule_list, model, limits, partition=partition, fold=fold, timing=timing,
                 progress=progress, trace=trace).run(g)
    out, applied = run.graph, run.applied
    out.dim_params = dict(g.dim_params)
    out.output_dim_params = dict(g.output_dim_params)
    max_error = None
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
            if trace is not None:
                trace = Trace(refusals=[{
                    "reason": "check failed", "where": "whole model", "round": None,
                    "rules": {r: n for r, n in applied.items()
                              if r not in {s.id for s in safe}},
                    "error": f"the result held at the searched binding only ({e})"}])
            try:
                again = run_search(graph, alpha, budget, safe, model, partition, True, fold,
                                   time_limit, min_gain, timing, progress, True, check_seed,
                                   reference, None, report, report_name, trace)
            except BindingError as e2:
                raise _one_binding(e2, g) from None
            again.extra["notes"] = [f"rules that size by a dim were left out: with them the "
                                    f"result held at the searched binding only ({e})"]
            return again
    result = _report(run, g, model, len(rule_list), time.perf_counter() - t0, max_error,
                     timed_before)
    if report is not None and trace is not None:
        from .report_html import write_report

        t1 = time.perf_counter()
        write_report(report, result, trace, g, model, rule_list, name=report_name)
        result.extra["report_seconds"] = time.perf_counter() - t1
    return result


def _report(run: RunReport, g: Graph, model: CostModel, num_rules: int, seconds: float,
            max_error: float | None, timed_before: tuple[int, float]) -> SearchReport:
    return SearchReport(
        graph=run.graph, cost_before=run.cost_before, cost_after=run.cost_after,
        rules_applied=dict(sorted(run.applied.items())), explored=run.explored,
        generated=run.generated, seconds=seconds, search_seconds=run.search_seconds,
        core_seconds=run.core_seconds, fold_seconds=run.fold_seconds, pieces=run.pieces,
        distinct_pieces=run.distinct_pieces, num_rules=num_rules, cost_model=model.name,
        max_error=max_error, stop_reason=run.stop_reason,
        pass_reports=[p.to_json() for p in run.passes],
        extra={"ops_before": g.num_ops(), "core": run.core_counters, "notes": [],
               "timed": run.timed, "costs_measured": _costs_measured(model, timed_before),
               "passes": run.rounds})


def binding_free(rule: Rule) -> bool:
    """Whether no attribute of the rule's target side is read off a dim (a
    split's sizes, a reshape's target), which would bake one binding of a
    symbolic dim into the result."""
    return not any(reads_dims(n.attrs) for n in rule.dst)


def _one_binding(e: Exception, g: Graph) -> Exception:
    from taso.errors import CheckError

    at = ", ".join(f"{p}={d}" for n in g.inputs
                   for d, p in zip(n.shapes[0], g.dim_params.get(n.name, ())) if p)
    return CheckError(f"the result holds at the searched binding ({at}) only: {e}; pass "
                      f"static=True (taso-opt --static) to write it at that binding")


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


def _costs_measured(model: CostModel, before: tuple[int, float, Counter]
                    ) -> dict[str, Any] | None:
    """What a measured cost model timed during this search and where the rest
    of its prices came from; None for a model that measures nothing.
      new         keys timed for the first time
      remeasured  cached keys timed again: a decision rested on them and the
                  machine is quieter now than when they were timed
      beside      the searched graph's keys timed again in one batch with the
                  winner's new keys they compete with (once each)
      cached      keys read from the cache as they were
      rescaled    cached keys carried to the quiet state by more than the
                  calibration tolerance (timed under another load)
      guessed     keys the search met and priced by the analytic guess, never
                  timed: no decision rested on them
      fallback    keys the device cannot run alone, priced by the analytic model
      busy        1 where the machine was seen busy while measuring"""
    if not hasattr(model, "measured"):
        return None
    cache = getattr(model, "cache", None)
    counts = Counter(getattr(model, "counts", ())) - before[2]
    guessed = len(getattr(model, "_guessed", ()))
    return {"new": counts["measured"],
            "seconds": round(model.measure_seconds - before[1], 3),
            "cache": str(cache.path) if cache is not None else None,
            **{k: counts[k] for k in ("remeasured", "beside", "cached", "rescaled", "fallback",
                                    "busy")},
            "guessed": guessed}


def optimize(graph: Graph, alpha: float | None = None, budget: int | None = None,
             rules: Any = None, cost_model: str | CostModel | Callable | None = None,
             **options: Any) -> Graph:
    """The optimized graph (weight-only subgraphs folded), checked against
    `graph` in onnxruntime unless check=False (a mismatch raises
    `taso.CheckError`). Options: partition, unverified, fold, time_limit,
    min_gain, timing, check, check_seed, report (a path: an HTML report of the
    search is written there), report_name (see `run_search`)."""
    return run_search(graph, alpha, budget, rules, cost_model, **options).graph

