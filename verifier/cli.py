"""`taso-verify RULES`: prove or refute every rule of a rule set and record it.

RULES is a taso rule-set JSON or TASO's `.pb`. Each rule's verification record
(status, axioms used, seconds, z3 version, counterexample) is written into the
rule set: to --output if given (it may be RULES itself, for in place), else to
a new file beside RULES named <stem>.verified.json.

SIGINT and SIGTERM end the workers and exit with 130 and 143 (128 + the
signal's number), with one line on stderr; the output is not written, except
with --resume, which saves the records so far to the output every minute and,
run again, proves only the rules still without a current record there.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import z3
from taso.rules_db import RuleSet, load

from taso.cli import (
    Parser,
    Run,
    StatusLine,
    bar,
    check_executor,
    check_number,
    check_output,
    check_workers,
    program,
)
from taso.executor import EXECUTORS, ExecutorError

from .record import is_settled
from .report import axiom_report, format_axiom_report
from .run import apply_records, verify_rules

# Seconds between two saves of the records so far (--resume).
CHECKPOINT = 60.0


def _progress(total: int, line: StatusLine):
    """Rules done, with the count of each status, on the status line."""
    counts = {"proved": 0, "refuted": 0, "unknown": 0}
    done = [0]

    def on_done(idx: int, rec: dict) -> None:
        done[0] += 1
        counts[rec["status"]] += 1
        n = done[0]
        line.show(f"{bar(n, total, 30)} {n}/{total}  proved {counts['proved']}  refuted "
                  f"{counts['refuted']}  unknown {counts['unknown']}", last=n == total)
    return on_done


def _steps(what: str, line: StatusLine):
    def on_done(n: int, total: int) -> None:
        line.show(f"{what}: {n}/{total}", last=n == total)
    return on_done


def resumed(rs: RuleSet, earlier: RuleSet) -> set[str]:
    """Ids of the rules of `rs` whose record in `earlier` (the output of a run
    cut short) is settled; those records are copied into `rs`. `earlier` must
    hold the same rules, records aside."""
    def bare(r) -> str:
        return json.dumps({**r.to_json(), "verification": None}, sort_keys=True)
    if [bare(r) for r in earlier.rules] != [bare(r) for r in rs.rules]:
        raise ValueError("the output holds other rules than RULES; remove it or choose "
                         "another --output")
    kept = set()
    for r, e in zip(rs.rules, earlier.rules):
        if is_settled(e.verification):
            r.verification = dict(e.verification)
            kept.add(r.id)
    return kept


def checkpoints(todo: list, rs: RuleSet, out: Path, on_done=None, every: float = CHECKPOINT):
    """An on_done that also writes each record into its rule and saves `rs` to
    `out` (atomic) once `every` seconds, or ten times the last save's, have
    passed since the last save: 185k rules take some 30 s to write, which
    every minute took half the driver's time from the workers."""
    last, wait = [time.monotonic()], [every]

    def done(idx: int, rec: dict) -> None:
        todo[idx].verification = dict(rec)
        if on_done:
            on_done(idx, rec)
        if time.monotonic() - last[0] >= wait[0]:
            start = time.monotonic()
            rs.save(out)
            last[0] = time.monotonic()
            wait[0] = max(every, 10 * (last[0] - start))
    return done


def constrain(rs: RuleSet, args, workers: int | None, only: set[str] | None = None
              ) -> int | str:
    """Replace each refuted rule of `rs` (of the ids `only`, where given) that
    size constraints make provable by its constrained form
    (`constrain_refuted`); how many were, or an error."""
    from .constrain import constrain_refuted

    at = [k for k, r in enumerate(rs.rules) if only is None or r.id in only]
    refuted = sum(rs.rules[k].status == "refuted" for k in at)
    print(f"looking for size constraints for {refuted} refuted rules", file=sys.stderr)
    try:
        done = constrain_refuted([rs.rules[k] for k in at], lambda batch: verify_rules(
            batch, args.timeout, workers, executor=args.executor, address=args.address))
    except ExecutorError as e:
        return str(e)
    for k, rule in done.items():
        rs.rules[at[k]] = rule
    return len(done)


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
    with program("taso-verify") as run:
        run(_main(argv, run))
    return run.code


def _main(argv: list[str] | None, run: Run) -> int:
    ap = Parser(prog="taso-verify", description=__doc__.split("\n\n")[0])
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
    ap.add_argument("--report", default=None, metavar="REPORT.html",
                    help="also write one self-contained HTML page: counts by status, the "
                         "slowest rules, axioms by use, each refuted rule's counterexample")
    ap.add_argument("--axiom-report", action="store_true",
                    help="also report axioms no proof used and axioms the others imply")
    ap.add_argument("--resume", action="store_true",
                    help="keep the current records the output already holds (or RULES, "
                         "when the output does not exist yet), prove only the other rules, "
                         "and save the records so far to the output every minute: a long "
                         "run can be stopped and continued")
    ap.add_argument("--constrain", action="store_true",
                    help="for each refuted generated rule, look for size constraints "
                         "(same_dim) under which it is proved, and keep the constrained rule "
                         "in its place (see verifier/constrain.py)")
    ap.add_argument("--only", default=None, metavar="IDS",
                    help="prove (and with --constrain, constrain) only the rules of these "
                         "comma-separated ids; the others keep their records: a few rules "
                         "of a large set repaired without proving it all again")
    args = ap.parse_args(argv)
    if args.only is not None and args.resume:
        ap.error("--only names the rules to prove; --resume finds them itself: use one")
    if args.constrain and args.resume:
        ap.error("--constrain changes rules, which --resume would then not recognise: "
                 "run --resume to the end, then --constrain on its output")
    check_number(ap, "--timeout", args.timeout)
    check_workers(ap, args.workers)
    check_executor(ap, args.executor, args.address)
    path = Path(args.rules)
    out = Path(args.output) if args.output else path.with_name(path.stem + ".verified.json")
    try:
        rs = load(path)
    except ValueError as e:  # unreadable, not a rule set, or a malformed rule
        return run.fail(str(e))
    check_output(ap, out, "--output" if args.output else "the default output (see --output)")
    if args.report is not None:
        check_output(ap, args.report, "--report")
    run.what = f"{out} not written"
    start = time.perf_counter()
    if not args.json:
        run.line = StatusLine()
    workers = args.workers if args.workers or args.executor == "ray" else 2
    todo = list(rs.rules)
    only = None
    if args.only is not None:
        only = {i.strip() for i in args.only.split(",") if i.strip()}
        unknown = sorted(only - {r.id for r in rs.rules})
        if not only or unknown:
            return run.fail(f"--only: no rule {', '.join(unknown[:10]) or '(none named)'} "
                            f"in {path}")
        todo = [r for r in rs.rules if r.id in only]
    if args.resume:
        try:
            kept = resumed(rs, load(out) if out.exists() else rs)
        except ValueError as e:
            return run.fail(f"--resume: {e}")
        todo = [r for r in rs.rules if r.id not in kept]
        print(f"resuming: {len(kept)} rules keep their current records, {len(todo)} to prove",
              file=sys.stderr)
    on_done = run.line and _progress(len(todo), run.line)
    if args.resume:
        on_done = checkpoints(todo, rs, out, on_done)
        run.what = (f"records are saved to {out} every minute or more (none before the "
                    f"first save); run again with --resume to go on from the last save")
    try:
        records = verify_rules(todo, args.timeout, workers, on_done=on_done,
                               executor=args.executor, address=args.address)
    except ExecutorError as e:
        return run.fail(str(e))
    apply_records(todo, records)
    if args.constrain:
        n = constrain(rs, args, workers, only)
        if isinstance(n, str):
            return run.fail(n)
        print(f"constrained {n} refuted rules: proved under size constraints", file=sys.stderr)
    try:
        rs.save(out)  # atomic: an interruption leaves what was there
    except OSError as e:
        return run.fail(f"cannot write {out}: {e.strerror or e}")
    run.what = f"records written to {out}, no axiom report"
    s = summary(rs.rules, time.perf_counter() - start)
    s["output"] = str(out)
    if args.axiom_report:
        s["axiom_report"] = axiom_report(
            rs.rules, workers=workers or 2,
            on_done=run.line and _steps("axioms checked for implication", run.line))
    if args.report is not None:
        from .report_html import write_report
        try:
            write_report(args.report, rs.rules, rs.name or path.name, s)
        except OSError as e:
            return run.fail(f"cannot write {args.report}: {e.strerror or e}")
        s["report"] = args.report
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(format_summary(rs.rules, s))
        if args.axiom_report:
            print(format_axiom_report(s["axiom_report"]))
        print(f"records written to {out}")
        if args.report is not None:
            print(f"report written to {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
