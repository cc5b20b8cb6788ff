"""`taso-gen`: generate candidate rewrite rules.

    taso-gen --max-ops 3 --output rules.json [--ops matmul,ewadd,...|transformer] [--workers 2]
             [--seed 0] [--executor local|ray] [--address ADDR]

--ops takes operators (over TASO's input family) or the name of an operator
set, which brings its own family: `transformer` (matmul, transpose, reshape,
scalar_mul, div, ewadd, ewmul, softmax, layernorm, gelu, reduce_mean, concat,
split over (batch, seq, hidden) activations, weights, vectors and a scalar).

SIGINT and SIGTERM end the workers, remove the spill files and exit with 130
and 143 (128 + the signal's number), with one line on stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from taso.cli import (
    Parser,
    Run,
    StatusLine,
    bar,
    check_executor,
    check_output,
    check_workers,
    first_line,
    program,
)
from taso.executor import EXECUTORS, ExecutorError

from .enumerate import RoundStats
from .family import DEFAULT_OPS, NAMED_SETS, GenConfig
from .generate import Report, generate
from .store import SpillError


class Progress:
    """The status line: round, representatives done, graphs, classes, seconds."""

    def __init__(self, max_ops: int, line: StatusLine):
        self.max_ops = max_ops
        self.line = line
        self.t0 = time.perf_counter()

    def __call__(self, st: RoundStats, done: int, total: int) -> None:
        self.line.show(f"round {st.round}/{self.max_ops} {bar(done, total)} {done}/{total} reps"
                       f"  {st.graphs} graphs  {st.classes} classes"
                       f"  {time.perf_counter() - self.t0:.0f}s", last=done >= total)

    def pruning(self, stage: str, done: int, total: int) -> None:
        """Pruning's status line: the stage and its tasks done (buckets or
        batches of classes, then batches of rules)."""
        self.line.show(f"pruning: {stage} {bar(done, total)} {done}/{total}"
                       f"  {time.perf_counter() - self.t0:.0f}s", last=done >= total)


def summary(rep: Report, n_rules: int) -> str:
    lines = ["round  reps in   graphs   classes   seconds"]
    for r in rep.rounds:
        lines.append(f"{r.round:>5} {r.reps_in:>8} {r.graphs:>8} {r.classes:>9} {r.seconds:>9.1f}")
    rate = rep.graphs / rep.enumerate_seconds if rep.enumerate_seconds else 0.0
    lines.append(f"{rep.graphs} graphs in {rep.enumerate_seconds:.1f}s ({rate:.0f}/s); "
                 f"pruning {rep.prune_seconds:.1f}s")
    lines.append("")
    lines.append("pruning stage                        rules")
    for name, n in rep.stages.rows():
        lines.append(f"{name:<34} {n:>8}")
    lines.append(f"rules written: {n_rules}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    with program("taso-gen") as run:
        run(_main(argv, run))
    return run.code


def _main(argv: list[str] | None, run: Run) -> int:
    ap = Parser(prog="taso-gen", description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3, help="operators per graph (default 3)")
    ap.add_argument("--output", required=True, help="rule-set JSON to write")
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS),
                    help="comma-separated operators (default: TASO's generator set), or "
                         f"a named set with its own input family: {', '.join(NAMED_SETS)}")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes (default: all cores; with --executor ray, the cluster's "
                         "CPUs)")
    ap.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="where the work runs: a local process pool (default) or a Ray cluster")
    ap.add_argument("--address", default=None,
                    help="with --executor ray: the cluster to join (host:port, or 'auto' for "
                         "the one `ray start` began here); default: start a private local one")
    ap.add_argument("--seed", type=int, default=0, help="fingerprint and float seed")
    ap.add_argument("--spill-dir", default=None,
                    help="keep enumerated graphs in bucket files here (default: in memory "
                         "up to 3 operators, the temporary folder from 4)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    check_workers(ap, args.workers)
    if args.address is not None and args.executor == "ray" and args.max_ops >= 4 \
            and args.spill_dir is None:
        ap.error("--address with 4 or more operators needs --spill-dir: a folder every node "
                 "of the cluster can read")
    check_executor(ap, args.executor, args.address)
    if args.spill_dir is not None and Path(args.spill_dir).exists() \
            and not Path(args.spill_dir).is_dir():
        ap.error(f"--spill-dir {args.spill_dir!r} is not a folder")
    check_output(ap, args.output)
    try:
        if args.ops.strip() in NAMED_SETS:
            cfg = GenConfig.named(args.ops.strip(), max_ops=args.max_ops, seed=args.seed)
        else:
            cfg = GenConfig(max_ops=args.max_ops, ops=ops, seed=args.seed)
    except ValueError as e:  # max_ops, ops or seed
        ap.error(str(e))
    if args.spill_dir is not None:
        try:
            Path(args.spill_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a parent that is a file, no permission
            ap.error(f"--spill-dir {args.spill_dir!r}: {e.strerror or e}")
        if not os.access(args.spill_dir, os.W_OK):
            ap.error(f"--spill-dir: cannot write in {args.spill_dir!r}")
    if not (args.quiet or args.json):
        run.line = StatusLine()
    try:
        shown = run.line and Progress(cfg.max_ops, run.line)
        rules, rep = generate(cfg, workers=args.workers, executor=args.executor,
                              address=args.address, progress=shown, spill_dir=args.spill_dir,
                              prune_progress=shown and shown.pruning)
    except (ExecutorError, SpillError) as e:
        # a worker's SpillError comes wrapped by Ray, with its traceback
        cause = getattr(e, "cause", None)
        return run.fail(first_line(cause if isinstance(cause, Exception) else e))
    try:
        rules.save(args.output)  # atomic: an interruption leaves what was there
    except OSError as e:
        return run.fail(f"cannot write {args.output}: {e.strerror or e}")
    run.what = f"{args.output} written"
    if args.json:
        print(json.dumps({"rules": len(rules), "graphs": rep.graphs,
                          "enumerate_seconds": rep.enumerate_seconds,
                          "prune_seconds": rep.prune_seconds,
                          "rounds": [vars(r) for r in rep.rounds],
                          "stages": dict(rep.stages.rows())}))
    else:
        print(summary(rep, len(rules)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
