"""taso-opt: optimize an ONNX model with the cost-based search.

    taso-opt (IN.onnx | --example MODEL) -o OUT.onnx [--budget N] [--alpha A] [--rules FILE ...]
             [--unverified] [--cost-model analytic|ort|cupy] [--input-shape NAME=DIMS]
             [--no-partition] [--json] [--report REPORT.html]
    taso-opt --cost-cache-report | --cost-cache-clear  [--cost-cache PATH]

The optimized model is written only after onnxruntime has run it and the
original on the same random inputs and found them equal within the stated
tolerance (optimizer/check.py); otherwise the command fails and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from taso.cli import (
    Parser,
    Run,
    StatusLine,
    bar,
    check_number,
    check_output,
    first_line,
    program,
)


def parse_shape(text: str) -> tuple[str, list[int]]:
    """NAME=DIMS with DIMS like 1x3x224x224 or 1,3,224,224."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=DIMS, got {text!r}")
    try:
        return name, [int(d) for d in dims.replace("x", ",").split(",") if d]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad dimensions in {text!r}") from None


MEASURED = ("ort", "cupy")  # cost models that keep a cache

# The model builders, by name (taso.models.ALL), without importing them to parse.
EXAMPLES = ["bert_base", "inception_v3", "mobilenet_v2", "nasnet_a", "nasrnn", "resnet50",
            "resnext50", "squeezenet"]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="taso-opt", description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", help="the ONNX model to optimize")
    p.add_argument("--example", choices=EXAMPLES, default=None,
                   help="optimize a built-in model (taso.models, batch size 1) instead")
    p.add_argument("-o", "--output", help="where to write the optimized model (required)")
    p.add_argument("--budget", type=int, default=None,
                   help="graphs the search expands per piece (default 1000)")
    p.add_argument("--alpha", type=float, default=None,
                   help="expand graphs up to ALPHA times the best cost (default 1.05)")
    p.add_argument("--rules", action="append", default=None, metavar="FILE",
                   help="a rule set (.json, or TASO's .pb); repeatable; default: the "
                        "shipped sets in rules_db/")
    p.add_argument("--unverified", action="store_true",
                   help="use rules the verifier has not proved too")
    p.add_argument("--cost-model", default="ort",
                   help="ort (default: measured on this CPU in onnxruntime), cupy (a CUDA GPU) "
                        "or analytic (a roofline, no device: for tests and quick looks)")
    p.add_argument("--cost-cache", default=None, help="measured costs cache file")
    p.add_argument("--cost-cache-report", action="store_true",
                   help="say what the cost cache holds (entries, their calibration, which "
                        "are out of calibration on this machine now) and exit")
    p.add_argument("--cost-cache-clear", action="store_true",
                   help="remove every entry of the cost cache and exit")
    p.add_argument("--memory-weight", type=float, default=0.0,
                   help="ms per MiB of peak memory added to the cost (default 0)")
    p.add_argument("--input-shape", action="append", type=parse_shape, default=[],
                   metavar="NAME=DIMS", help="bind a model input's shape, e.g. x=1x3x224x224")
    p.add_argument("--no-partition", action="store_true",
                   help="search the whole graph at once instead of pieces")
    p.add_argument("--time-limit", type=float, default=0.0,
                   help="seconds of search per piece at most (default: no limit)")
    p.add_argument("--min-gain", type=float, default=None, metavar="FRACTION",
                   help="keep a piece's rewrite only if its cost falls by more than this "
                        "(default: 0 for analytic, 0.03 for measured cost models)")
    p.add_argument("--no-timing", "--no-validate", dest="no_timing", action="store_true",
                   help="with a measured cost model, do not time the whole optimized model "
                        "against the original before keeping it")
    p.add_argument("--freeze-initializers", action="store_true",
                   help="treat initializers listed as graph inputs (overridable defaults) as "
                        "constants, which may be folded; by default they stay inputs")
    p.add_argument("--static", action="store_true",
                   help="write the model at the searched binding of its symbolic dims "
                        "(static shapes) instead of keeping them symbolic")
    p.add_argument("--seed", type=int, default=0, help="seed of the check's random inputs")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--report", default=None, metavar="REPORT.html",
                   help="also write one self-contained HTML page on the search: each "
                        "rewrite where it fired (the graph before and after), what was "
                        "refused and why, cost per operator, the search's progress")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before any work, what the search or the write would fail on later."""
    if args.cost_cache_report or args.cost_cache_clear:
        if args.input is not None or args.example is not None or args.output is not None:
            parser.error("--cost-cache-report and --cost-cache-clear take no model or output")
        return
    if args.output is None:
        parser.error("the following arguments are required: -o/--output")
    if (args.input is None) == (args.example is None):
        parser.error("give either an input model or --example MODEL")
    from .search import argument_problem  # the search's own ranges, named as flags

    problem = argument_problem(flags=True, budget=args.budget, alpha=args.alpha,
                               min_gain=args.min_gain, time_limit=args.time_limit)
    if problem:
        parser.error(problem)
    check_number(parser, "--memory-weight", args.memory_weight, positive=False)
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    check_output(parser, args.output)
    if args.report is not None:
        check_output(parser, args.report, "--report")
        if os.path.abspath(args.report) == os.path.abspath(args.output):
            parser.error("--report is the --output model; write the report elsewhere")
    out = Path(args.output)
    if args.input and out.exists() and os.path.exists(args.input) \
            and os.path.samefile(args.input, out):
        parser.error("--output is the input model; write the optimized model elsewhere")
    if args.input and not os.path.isfile(args.input):
        parser.error(f"no such model file: {args.input}" if not os.path.exists(args.input)
                     else f"the input {args.input!r} is not a regular file")
    args.notes = []
    if args.cost_model in MEASURED:
        from .cost.cache import cache_path_problem, default_cache_path

        if args.cost_cache is not None:
            problem = cache_path_problem(args.cost_cache, args.output)
            if problem:
                parser.error(problem)
        else:
            problem = cache_path_problem(default_cache_path(), args.output, "the cost cache")
            if problem:  # not the user's choice: measure, and keep the costs in memory
                args.cost_cache = False
                args.notes.append(f"{problem}; measured costs are kept in memory only "
                                  f"(--cost-cache PATH keeps them)")


def main(argv: list[str] | None = None) -> int:
    with program("taso-opt") as run:
        parser = build_parser()
        args = parser.parse_args(argv)
        check_args(parser, args)
        run(_cache_command(args, run) if args.cost_cache_report or args.cost_cache_clear
            else _optimize(args, run))
    return run.code


def _cache_command(args: argparse.Namespace, run: Run) -> int:
    """--cost-cache-report: what the cache holds, with the reading of this
    machine now for the ort entries of this device; --cost-cache-clear."""
    from .cost.cache import CostCache, describe

    try:
        cache = CostCache(args.cost_cache)
    except (OSError, ValueError) as e:
        return run.fail(first_line(e))
    if args.cost_cache_clear:
        n = cache.clear()
        print(f"removed {n} entries: {cache.path}")
        return 0
    now = {}
    if len(cache):
        from .cost.ort import OrtCostModel

        model = OrtCostModel(cache=False)
        now[(model.name, model.device)] = model.reference_reading()
    print(describe(cache, now))
    return 0


def _optimize(args: argparse.Namespace, run: Run) -> int:
    from taso.errors import CheckError, ModelError, ShapeError
    from taso.onnx_io import export_onnx, load_onnx, read_model, save_model

    from .check import run_onnx
    from .cost import CostModelUnavailable
    from .cost.factory import make_cost_model
    from .report import summary_json, summary_text
    from .search import run_search

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        if args.example:
            from taso.models import ALL
            original = export_onnx(ALL[args.example](batch_size=1))
        else:
            original = read_model(args.input)
        graph = load_onnx(original, dict(args.input_shape) or None,
                          freeze_initializers=args.freeze_initializers, static=args.static)
        problem = inputs_too_large(graph)
        if problem:
            return run.fail(problem)
        model = make_cost_model(args.cost_model, cache_path=args.cost_cache,
                                memory_weight=args.memory_weight)
    except (OSError, ModelError, ShapeError, ValueError, CostModelUnavailable) as e:
        return run.fail(first_line(e))
    for note in [*args.notes, *getattr(graph, "notes", ())]:
        say(f"note: {note}")
    feeds = graph.random_inputs(args.seed)
    try:  # the reference outputs, before any search time is spent
        run_onnx(original, feeds)
    except Exception as e:  # onnxruntime's own failures: not ours to fix, but to name
        # The model may be fine and the random inputs not (a shape fed as data).
        return run.fail(f"onnxruntime cannot run the input model on random inputs "
                        f"(--seed {args.seed}): {first_line(e)}")
    say(f"{args.example or Path(args.input).name}: {graph.summary()}")
    if graph.overridable and not args.quiet:
        say(f"note: {len(graph.overridable)} initializer(s) are also graph inputs "
            f"(overridable defaults); they stay inputs and are never folded "
            f"(--freeze-initializers treats them as constants)")
    if not args.quiet:
        run.line = StatusLine()

    def measuring(done: int, total: int, left: float) -> None:
        run.line.show(f"measuring costs {bar(done, total)} {done}/{total} keys, "
                      f"about {left:.0f} s left", last=done == total)

    measured = getattr(model, "base", model)  # (under a memory weight)
    if run.line and hasattr(measured, "progress"):
        measured.progress = measuring

    def progress(piece: int, pieces: int, expanded: int, best: float) -> None:
        where = (f"searching piece {piece + 1}/{pieces}: {expanded} expanded"
                 if piece < pieces else f"rewriting the joined graph: {expanded} rewrites")
        run.line.show(f"{where}, best cost {best:.4f}")

    try:
        report = run_search(graph, alpha=args.alpha, budget=args.budget, rules=args.rules,
                            cost_model=model, partition=not args.no_partition,
                            unverified=args.unverified, time_limit=args.time_limit,
                            min_gain=args.min_gain, timing=not args.no_timing,
                            progress=None if args.quiet else progress,
                            check=True, check_seed=args.seed, reference=original,
                            report=args.report,
                            report_name=args.example or Path(args.input).name)
    except CheckError as e:
        return run.fail(f"{first_line(e)}; nothing written", 1)
    except (OSError, ModelError, ValueError) as e:  # a bad rule file, an unreadable cache,
        return run.fail(first_line(e))              # a report that cannot be written
    if run.line:
        run.line.end()
    if hasattr(model, "save"):
        model.save()  # the costs measured, kept before the output is written
    for note in report.extra.get("notes", ()):
        say(f"note: {note}")
    try:
        save_model(export_onnx(report.graph), args.output)
    except ModelError as e:
        return run.fail(first_line(e))
    if args.json:
        print(summary_json(report, output=str(args.output)))
    else:
        print(summary_text(report))
        print(f"wrote {args.output}")
        if args.report:
            print(f"wrote {args.report} (the report, in "
                  f"{report.extra.get('report_seconds', 0.0):.2f} s)")
    return 0


def inputs_too_large(graph) -> str | None:
    """Why the graph's inputs cannot even be drawn in this machine's memory, or
    None: a model bound at an absurd size fails here, not in numpy."""
    import numpy as np

    total = 0
    for n in graph.inputs:
        size = 1
        for d in n.shapes[0]:
            size *= int(d)
        itemsize = np.dtype(n.dtypes[0]).itemsize if n.dtypes[0] != "string" else 8
        total += size * itemsize
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if total > memory // 4:
        return (f"the model's inputs take {total / 2**30:.1f} GiB at the shapes given, more "
                f"than this machine can run it with ({memory / 2**30:.0f} GiB of memory); "
                f"bind smaller dims with --input-shape")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
