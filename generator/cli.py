"""`taso-gen`: generate candidate rewrite rules.

    taso-gen --max-ops 3 --output rules.json [--ops matmul,ewadd,...] [--workers 2] [--seed 0]
             [--executor local|ray] [--address ADDR]

SIGINT and SIGTERM end the workers, remove the spill files and exit with 130
and 143 (128 + the signal's number), with one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from taso.executor import EXECUTORS, ExecutorError, interruption, signals_as_interrupts
from taso.files import output_path_problem

from .enumerate import RoundStats
from .family import DEFAULT_OPS, GenConfig
from .generate import Report, generate
from .store import SpillError


class Progress:
    """One status line on stderr: round, representatives done, graphs, classes."""

    def __init__(self, max_ops: int, stream=sys.stderr):
        self.max_ops = max_ops
        self.stream = stream
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.open = False  # a status line is drawn and not yet ended

    def __call__(self, st: RoundStats, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        width = 24
        fill = int(width * done / max(total, 1))
        self.stream.write(f"\rround {st.round}/{self.max_ops} [{'#' * fill}{'.' * (width - fill)}]"
                          f" {done}/{total} reps  {st.graphs} graphs  {st.classes} classes"
                          f"  {now - self.t0:.0f}s ")
        self.open = done < total
        if not self.open:
            self.stream.write("\n")
        self.stream.flush()


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
    ap = argparse.ArgumentParser(prog="taso-gen", description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3, help="operators per graph (default 3)")
    ap.add_argument("--output", required=True, help="rule-set JSON to write")
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS),
                    help="comma-separated operators (default: TASO's generator set)")
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
    if args.workers is not None and args.workers < 1:
        ap.error(f"--workers must be at least 1, got {args.workers}")
    if args.address is not None and args.executor != "ray":
        ap.error("--address needs --executor ray")
    if args.address is not None and args.max_ops >= 4 and args.spill_dir is None:
        ap.error("--address with 4 or more operators needs --spill-dir: a folder every node "
                 "of the cluster can read")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        ap.error("--executor ray needs Ray: pip install 'taso[cluster]'")
    if args.spill_dir is not None and Path(args.spill_dir).exists() \
            and not Path(args.spill_dir).is_dir():
        ap.error(f"--spill-dir {args.spill_dir!r} is not a folder")
    problem = output_path_problem(args.output)
    if problem:
        ap.error(problem)
    try:
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
    progress = None if args.quiet or args.json else Progress(cfg.max_ops)
    saved = False
    with signals_as_interrupts():
        try:
            try:
                rules, rep = generate(cfg, workers=args.workers, executor=args.executor,
                                      address=args.address, progress=progress,
                                      spill_dir=args.spill_dir)
            except (ExecutorError, SpillError) as e:
                # a worker's SpillError comes wrapped by Ray, with its traceback
                cause = getattr(e, "cause", None)
                msg = str(cause if isinstance(cause, Exception) else e).strip()
                print(f"taso-gen: {msg.splitlines()[0] if msg else type(e).__name__}",
                      file=sys.stderr)
                return 2
            try:
                rules.save(args.output)  # atomic: an interruption leaves what was there
            except OSError as e:
                print(f"taso-gen: cannot write {args.output}: {e.strerror or e}",
                      file=sys.stderr)
                return 2
            saved = True
        except KeyboardInterrupt as e:  # SIGINT or SIGTERM: workers and spill files are gone
            name, status = interruption(e)
            what = f"{args.output} written" if saved else "nothing written"
            print(("\n" if progress and progress.open else "") +
                  f"taso-gen: interrupted by {name}; {what}", file=sys.stderr)
            return status
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
