"""Verify rule sets: prove each rule, else look for a counterexample, in parallel.

Each rule runs in a worker process with its own Z3 context. Z3's timeout is
set per check; in case a solver overruns it anyway, the parent kills a worker
that passes its deadline, records the rule as unknown and starts a new worker,
so no rule can hang the run.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import wait
from typing import Any

import z3
from taso.rules_db import Rule
from taso.rules_db.pattern import checked

GRACE = 5.0  # seconds past a rule's own limits before its worker is killed


def verify_rule(rule: Rule, timeout: float = 10.0) -> dict[str, Any]:
    """The verification record of one rule: proved (with the axioms used),
    refuted (with a counterexample) or unknown."""
    from .prove import prove
    from .record import axioms_digest
    from .refute import refute

    rule = checked(rule)  # a malformed rule is an error, never a record
    start = time.perf_counter()
    rec: dict[str, Any] = {"z3": z3.get_version_string(), "timeout": timeout,
                           "axioms_hash": axioms_digest()}
    try:
        p = prove(rule, timeout)
    except Exception as e:  # a rule the encoding cannot express is not proved
        p = {"proved": False, "result": "error", "reason": f"{type(e).__name__}: {e}"}
    if p["proved"]:
        rec.update(status="proved", axioms=p["axioms"])
        if p.get("vacuous"):
            rec["vacuous"] = True
    else:
        try:
            cex = refute(rule, time_limit=timeout)
        except Exception as e:  # no counterexample found: say why
            cex, p["reason"] = None, f"refutation failed: {type(e).__name__}: {e}"
        if cex is not None:
            rec.update(status="refuted", counterexample=cex)
        else:
            rec.update(status="unknown", reason=p.get("reason") or p["result"])
    rec["seconds"] = round(time.perf_counter() - start, 3)
    return rec


def _serve(conn, timeout: float) -> None:
    from .prove import encoding
    encoding()  # compile the axioms once, before the first rule's clock starts
    while True:
        msg = conn.recv()
        if msg is None:
            return
        idx, rule_json = msg
        try:
            rec = verify_rule(Rule.from_json(rule_json), timeout)
        except Exception as e:  # recorded, never fatal to the run
            rec = _killed(timeout, f"error: {type(e).__name__}: {e}")
        conn.send((idx, rec))


class _Worker:
    def __init__(self, ctx, timeout: float):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, timeout), daemon=True)
        self.proc.start()
        self.task: int | None = None
        self.since = 0.0

    def give(self, idx: int, rule: Rule) -> None:
        self.task, self.since = idx, time.perf_counter()
        self.conn.send((idx, rule.to_json()))

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(1)
        if self.proc.is_alive():
            self.proc.kill()


def verify_rules(rules: Sequence[Rule], timeout: float = 10.0, workers: int = 2,
                 on_done: Callable[[int, dict], None] | None = None,
                 grace: float = GRACE) -> list[dict[str, Any]]:
    """Verification records for `rules`, in order, computed by `workers` processes.
    A worker still busy `2 * timeout + grace` seconds after it took a rule is
    killed and the rule recorded unknown."""
    # fresh interpreters: no Z3 state shared with the parent, the same on every platform
    ctx = mp.get_context("spawn")
    deadline = 2 * timeout + grace  # proof, then refutation, each within `timeout`
    records: list[dict[str, Any] | None] = [None] * len(rules)
    todo = list(range(len(rules)))[::-1]
    pool = [_Worker(ctx, timeout) for _ in range(max(1, min(workers, len(rules))))]

    def finish(idx: int, rec: dict) -> None:
        records[idx] = rec
        if on_done:
            on_done(idx, rec)

    try:
        while todo or any(w.task is not None for w in pool):
            for w in pool:
                if w.task is None and todo:
                    idx = todo.pop()
                    w.give(idx, rules[idx])
            busy = [w for w in pool if w.task is not None]
            for conn in wait([w.conn for w in busy], timeout=0.2):
                w = next(w for w in busy if w.conn is conn)
                try:
                    idx, rec = conn.recv()
                except (EOFError, OSError):  # the worker died: record, replace
                    idx, rec = w.task, _killed(timeout, "worker died")
                    pool[pool.index(w)] = _Worker(ctx, timeout)
                w.task = None
                finish(idx, rec)
            now = time.perf_counter()
            for i, w in enumerate(pool):
                if w.task is not None and now - w.since > deadline:
                    w.proc.kill()
                    w.proc.join()
                    finish(w.task, _killed(timeout, f"killed after {now - w.since:.1f} s"))
                    pool[i] = _Worker(ctx, timeout)
    finally:
        for w in pool:
            w.stop()
    return [r for r in records if r is not None]


def _killed(timeout: float, why: str) -> dict[str, Any]:
    return {"status": "unknown", "reason": why, "z3": z3.get_version_string(),
            "timeout": timeout, "seconds": None}


def apply_records(rules: Iterable[Rule], records: Iterable[dict[str, Any]]) -> None:
    """Write each record into its rule's verification field."""
    for r, rec in zip(rules, records):
        r.verification = dict(rec)
