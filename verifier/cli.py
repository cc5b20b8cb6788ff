"""`taso-verify RULES`: prove or refute every rule of a rule set and record it.

RULES is a taso rule-set JSON or TASO's `.pb`. Each rule's verification record
(status, axioms used, seconds, z3 version, counterexample) is written into the
rule set: to --output if given (it may be RULES itself, for in place), else to
a new file beside RULES named <stem>.verified.json.

SIGINT and SIGTERM end the workers and exit with 130 and 143 (128 + the
signal's number), with one line on stderr; the output is not written.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import z3
from taso.rules_db import load

from taso.executor import EXECUTORS, ExecutorError, interruption, signals_as_interrupts
from taso.files import output_path_problem

from .report import axiom_report, format_axiom_report
from .run import apply_records, verify_rules


def _show(stream, tty: bool, line: str, last: bool) -> None:
    """One progress line: redrawn in place on a terminal, appended otherwise."""
    stream.write(("\r" + line if tty else line + "\n") + ("\n" if tty and last else ""))
    stream.flush()


def _progress(total: int, stream=sys.stderr):
    counts = {"proved": 0, "refuted": 0, "unknown": 0}
    done = [0]
    tty = stream.isatty()
    step = max(1, total // 10)

    def on_done(idx: int, rec: dict) -> None:
        done[0] += 1
        counts[rec["status"]] += 1
        n = done[0]
        if tty or n % step == 0 or n == total:
            bar = "#" * (30 * n // total) + "." * (30 - 30 * n // total)
            _show(stream, tty, f"[{bar}] {n}/{total}  proved {counts['proved']}  refuted "
                               f"{counts['refuted']}  unknown {counts['unknown']}", n == total)
        on_done.open = tty and n < total  # a line redrawn in place, not yet ended
    on_done.open = False
    return on_done


def _steps(what: str, stream=sys.stderr):
    """A progress line every tenth of the work (every step on a terminal)."""
    tty = stream.isatty()

    def on_done(n: int, total: int) -> None:
        if tty or n % max(1, total // 10) == 0 or n == total:
            _show(stream, tty, f"{what}: {n}/{total}", n == total)
    return on_done


def summary(rules, wall: float) -> dict:
    counts = {"proved": 0, "refuted": 0, "unknown": 0}
    for r in rules:
        counts[r.verification["status"]] += 1
    secs = [r.verification.get("seconds") or 0.0 for r in rules]
    return {"rules": len(rules), **counts, "total_seconds": round(sum(secs), 3),
            "wall_seconds": round(wall, 3), "max_seconds": round(max(secs, default=0.0), 3),
            "z3": z3.get_version_string()}


def format_summary(rules, s: dict) -> str:
    lines = ["", f"{'status':<10}{'rules':>7}", "-" * 17]
    for k in ("proved", "refuted", "unknown"):
        lines.append(f"{k:<10}{s[k]:>7}")
    lines += ["-" * 17, f"{'total':<10}{s['rules']:>7}",
              f"solver seconds {s['total_seconds']:.1f} (slowest rule {s['max_seconds']:.2f}), "
              f"wall {s['wall_seconds']:.1f}, z3 {s['z3']}"]
    for status in ("refuted", "unknown"):
        ids = [r.id for r in rules if r.verification["status"] == status]
        if ids:
            lines.append(f"{status}: " + ", ".join(ids[:20]) + (" ..." if len(ids) > 20 else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="taso-verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("rules", help="rule set: taso JSON or TASO graph_subst.pb")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per rule (default 10)")
    ap.add_argument("--workers", type=int, default=None,
                    help="worker processes (default 2; with --executor ray, the cluster's CPUs)")
    ap.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="where rules are proved: local processes (default) or Ray actors")
    ap.add_argument("--address", default=None,
                    help="with --executor ray: the cluster to join (host:port, or 'auto' for "
                         "the one `ray start` began here); default: start a private local one")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--output", help="where to write the rule set with its records")
    ap.add_argument("--axiom-report", action="store_true",
                    help="also report axioms no proof used and axioms the others imply")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        ap.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.workers is not None and args.workers < 1:
        ap.error(f"--workers must be at least 1, got {args.workers}")
    if args.address is not None and args.executor != "ray":
        ap.error("--address needs --executor ray")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        ap.error("--executor ray needs Ray: pip install 'taso[cluster]'")
    path = Path(args.rules)
    out = Path(args.output) if args.output else path.with_name(path.stem + ".verified.json")
    try:
        rs = load(path)
    except ValueError as e:  # unreadable, not a rule set, or a malformed rule
        print(f"taso-verify: {e}", file=sys.stderr)
        return 2
    problem = output_path_problem(
        out, "--output" if args.output else "the default output (see --output)")
    if problem:
        ap.error(problem)
    start = time.perf_counter()
    progress = None if args.json else _progress(len(rs.rules))
    workers = args.workers if args.workers or args.executor == "ray" else 2
    saved = False
    with signals_as_interrupts():
        try:
            try:
                records = verify_rules(rs.rules, args.timeout, workers, on_done=progress,
                                       executor=args.executor, address=args.address)
            except ExecutorError as e:
                print(f"taso-verify: {e}", file=sys.stderr)
                return 2
            apply_records(rs.rules, records)
            try:
                rs.save(out)  # atomic: an interruption leaves what was there
            except OSError as e:
                print(f"taso-verify: cannot write {out}: {e.strerror or e}", file=sys.stderr)
                return 2
            saved = True
            s = summary(rs.rules, time.perf_counter() - start)
            s["output"] = str(out)
            if args.axiom_report:
                s["axiom_report"] = axiom_report(
                    rs.rules, workers=workers or 2,
                    on_done=None if args.json else _steps("axioms checked for implication"))
        except KeyboardInterrupt as e:  # SIGINT or SIGTERM: the workers are gone
            name, status = interruption(e)
            what = f"records written to {out}, no axiom report" if saved else \
                f"{out} not written"
            line_open = progress is not None and getattr(progress, "open", False)
            print(("\n" if line_open else "") + f"taso-verify: interrupted by {name}; {what}",
                  file=sys.stderr)
            return status
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(format_summary(rs.rules, s))
        if args.axiom_report:
            print(format_axiom_report(s["axiom_report"]))
        print(f"records written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
