"""taso-opt: optimize an ONNX model with the cost-based search.

    taso-opt (IN.onnx | --example MODEL) -o OUT.onnx [--budget N] [--alpha A] [--rules FILE ...]
             [--unverified] [--cost-model analytic|ort|cupy] [--input-shape NAME=DIMS]
             [--no-partition] [--json]

The optimized model is written only after onnxruntime has run it and the
original on the same random inputs and found them equal within the stated
tolerance (optimizer/check.py); otherwise the command fails and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import onnx


def parse_shape(text: str) -> tuple[str, list[int]]:
    """NAME=DIMS with DIMS like 1x3x224x224 or 1,3,224,224."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=DIMS, got {text!r}")
    try:
        return name, [int(d) for d in dims.replace("x", ",").split(",") if d]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad dimensions in {text!r}") from None


# The model builders, by name (taso.models.ALL), without importing them to parse.
EXAMPLES = ["bert_base", "inception_v3", "mobilenet_v2", "nasnet_a", "nasrnn", "resnet50",
            "resnext50", "squeezenet"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taso-opt", description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", help="the ONNX model to optimize")
    p.add_argument("--example", choices=EXAMPLES, default=None,
                   help="optimize a built-in model (taso.models, batch size 1) instead")
    p.add_argument("-o", "--output", required=True, help="where to write the optimized model")
    p.add_argument("--budget", type=int, default=None,
                   help="graphs the search expands per piece (default 1000)")
    p.add_argument("--alpha", type=float, default=None,
                   help="expand graphs up to ALPHA times the best cost (default 1.05)")
    p.add_argument("--rules", action="append", default=None, metavar="FILE",
                   help="a rule set (.json, or TASO's .pb); repeatable; default: the "
                        "shipped sets in rules_db/")
    p.add_argument("--unverified", action="store_true",
                   help="use rules the verifier has not proved too")
    p.add_argument("--cost-model", default="analytic", help="analytic, ort or cupy")
    p.add_argument("--cost-cache", default=None, help="measured costs cache file")
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
    p.add_argument("--no-validate", action="store_true",
                   help="with a measured cost model, do not time the whole optimized model "
                        "against the original before keeping it")
    p.add_argument("--seed", type=int, default=0, help="seed of the check's random inputs")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.input is None) == (args.example is None):
        parser.error("give either an input model or --example MODEL")
    import taso
    from taso.errors import ModelError

    from .check import EquivalenceError, check_equivalence
    from .cost.factory import make_cost_model
    from .report import summary_json, summary_text
    from .search import run_search

    def say(msg: str, end: str = "\n") -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, end=end, flush=True)

    try:
        if args.example:
            from taso.models import ALL
            original = taso.export_onnx(ALL[args.example](batch_size=1))
        else:
            original = onnx.load(args.input)
        graph = taso.load_onnx(original, dict(args.input_shape) or None)
        model = make_cost_model(args.cost_model, cache_path=args.cost_cache,
                                memory_weight=args.memory_weight)
    except (OSError, ModelError, ValueError) as e:
        print(f"taso-opt: {e}", file=sys.stderr)
        return 2
    say(f"{args.example or Path(args.input).name}: {graph.summary()}")
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(piece: int, pieces: int, expanded: int, best: float) -> None:
        now = time.monotonic()
        if now - last[0] >= (0.2 if tty else 2.0):
            last[0] = now
            where = (f"searching piece {piece + 1}/{pieces}: {expanded} expanded"
                     if piece < pieces else f"rewriting the joined graph: {expanded} rewrites")
            say(f"\r{where}, best cost {best:.4f}", end="" if tty else "\n")

    report = run_search(graph, alpha=args.alpha, budget=args.budget, rules=args.rules,
                        cost_model=model, partition=not args.no_partition,
                        unverified=args.unverified, time_limit=args.time_limit,
                        min_gain=args.min_gain, validate=not args.no_validate,
                        progress=None if args.quiet else progress)
    if tty:
        say("")
    try:
        optimized = taso.export_onnx(report.graph)
        report.max_error = check_equivalence(original, optimized,
                                             feeds=graph.random_inputs(args.seed))
    except EquivalenceError as e:
        print(f"taso-opt: the optimized model differs from the original: {e}; "
              f"nothing written", file=sys.stderr)
        return 1
    onnx.save(optimized, args.output)
    if args.json:
        print(summary_json(report, output=str(args.output)))
    else:
        print(summary_text(report))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
