"""Verify rule sets: prove each rule, else look for a counterexample, in parallel.

Each rule runs in a worker with its own Z3 context: a local process, or a Ray
actor (a process on some node of a cluster). Z3's timeout is set per check; in
case a solver overruns it anyway, the parent kills a worker that passes its
deadline (the clock starts when a ready worker takes the rule), records the rule
as unknown and starts a new worker, so no rule can hang the run, on any node.
Records are kept by rule index, so the result is in rule order whichever worker
finished first.
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

from taso.executor import sigint_blocked_for_children, signals_deferred

GRACE = 5.0  # seconds past a rule's own limits before its worker is killed


def verify_rule(rule: Rule, timeout: float = 10.0) -> dict[str, Any]:
    """The verification record of one rule: proved (with the axioms used),
    refuted (with a counterexample) or unknown."""
    from .prove import prove
    from .record import record_digest
    from .refute import refute

    rule = checked(rule)  # a malformed rule is an error, never a record
    start = time.perf_counter()
    rec: dict[str, Any] = {"z3": z3.get_version_string(), "timeout": timeout}
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
    z3v, limit = rec.pop("z3"), rec.pop("timeout")
    return {"z3": z3v, "timeout": limit, "axioms_hash": record_digest(rec), **rec}


def _serve(conn, timeout: float) -> None:
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the parent
    from .prove import encoding
    encoding()  # compile the axioms once, before the first rule's clock starts
    conn.send(None)  # ready
    while True:
        msg = conn.recv()
        if msg is None:
            return
        idx, rule_json = msg
        conn.send((idx, _verify_json(rule_json, timeout)))


def _verify_json(rule_json: dict, timeout: float) -> dict[str, Any]:
    try:
        return verify_rule(Rule.from_json(rule_json), timeout)
    except Exception as e:  # recorded, never fatal to the run
        return _killed(timeout, f"error: {type(e).__name__}: {e}")


class _Slot:
    """One worker of a pool: what it is doing and since when."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.ready = False
        self.task: int | None = None
        self.since = 0.0


class _LocalPool:
    """Worker processes, each with its own Z3 context, fed one rule at a time
    through a pipe."""

    def __init__(self, workers: int, timeout: float):
        # fresh interpreters: no Z3 state shared with the parent, the same on every platform
        self.ctx = mp.get_context("spawn")
        self.timeout = timeout
        self.slots: list[_Slot] = []
        try:
            for _ in range(workers):
                self._start()
        except BaseException:  # interrupted while starting them
            self.abort()
            raise

    def _start(self, replacing: _Slot | None = None) -> None:
        """Start a worker in `replacing`'s place, or as one more. It starts with
        SIGINT blocked, and an interruption is held until it is on the list,
        where abort() finds it."""
        conn, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_serve, args=(child, self.timeout), daemon=True)
        with sigint_blocked_for_children(), signals_deferred():
            proc.start()
            child.close()
            slot = _Slot((proc, conn))
            if replacing is None:
                self.slots.append(slot)
            else:
                self.slots[self.slots.index(replacing)] = slot

    def give(self, slot: _Slot, idx: int, rule: Rule) -> None:
        slot.task, slot.since = idx, time.perf_counter()
        slot.handle[1].send((idx, rule.to_json()))

    def events(self, wait_s: float) -> list[tuple[int, dict]]:
        """Wait up to `wait_s` for news; the records of rules that finished (or
        whose worker died, which is then replaced)."""
        done = []
        by_conn = {s.handle[1]: s for s in self.slots}
        for conn in wait(list(by_conn), timeout=wait_s):
            s = by_conn[conn]
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the worker died: record, replace
                if not s.ready:
                    self.abort()
                    raise RuntimeError("a verifier worker died while starting") from None
                if s.task is not None:
                    done.append((s.task, _killed(self.timeout, "worker died")))
                self.replace(s)
                continue
            if msg is None:
                s.ready = True
            else:
                s.task = None
                done.append(msg)
        return done

    def replace(self, slot: _Slot) -> None:
        proc, conn = slot.handle
        proc.kill()
        proc.join()
        conn.close()
        self._start(replacing=slot)

    def close(self) -> None:
        for s in self.slots:
            try:
                s.handle[1].send(None)
            except (BrokenPipeError, OSError):
                pass
        for s in self.slots:
            proc, conn = s.handle
            proc.join(1)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()

    def abort(self) -> None:
        for s in self.slots:
            s.handle[0].kill()
        for s in self.slots:
            s.handle[0].join()
            s.handle[1].close()


class _RayVerifier:
    """A Ray actor: one worker process with its own Z3 context."""

    def __init__(self, timeout: float):
        from .prove import encoding
        self.timeout = timeout
        encoding()

    def ready(self) -> bool:
        return True

    def verify(self, idx: int, rule_json: dict) -> tuple[int, dict[str, Any]]:
        return idx, _verify_json(rule_json, self.timeout)


class _RayPool:
    """Ray actors, one rule at a time each; an actor past its deadline is killed
    (its process ends, wherever it runs) and replaced."""

    def __init__(self, workers: int | None, n_rules: int, timeout: float,
                 address: str | None):
        from taso.executor import connect_ray, ray_cpus
        self._own = connect_ray(address, workers)
        import ray
        self.ray = ray
        self.timeout = timeout
        try:
            n = max(1, min(workers or ray_cpus(), n_rules))
            # One CPU each; no restarts or retries: a killed actor is our decision.
            self.cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayVerifier)
            self.slots = [self._start() for _ in range(n)]
        except BaseException:
            if self._own:
                ray.shutdown()
            raise

    def _start(self) -> _Slot:
        actor = self.cls.remote(self.timeout)
        return _Slot([actor, actor.ready.remote()])  # [actor, the call awaited]

    def give(self, slot: _Slot, idx: int, rule: Rule) -> None:
        slot.task, slot.since = idx, time.perf_counter()
        slot.handle[1] = slot.handle[0].verify.remote(idx, rule.to_json())

    def events(self, wait_s: float) -> list[tuple[int, dict]]:
        ray = self.ray
        by_ref = {s.handle[1]: s for s in self.slots if s.handle[1] is not None}
        if not by_ref:
            time.sleep(wait_s)
            return []
        refs = list(by_ref)
        ready, rest = ray.wait(refs, num_returns=1, timeout=wait_s)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        done = []
        for ref in ready:
            s = by_ref[ref]
            s.handle[1] = None
            try:
                out = ray.get(ref)
            except ray.exceptions.RayActorError:
                if not s.ready:
                    raise RuntimeError("a verifier actor died while starting") from None
                if s.task is not None:
                    done.append((s.task, _killed(self.timeout, "worker died")))
                self.replace(s)
                continue
            if s.ready:
                s.task = None
                done.append(out)
            else:
                s.ready = True
        return done

    def replace(self, slot: _Slot) -> None:
        self.ray.kill(slot.handle[0], no_restart=True)
        self.slots[self.slots.index(slot)] = self._start()

    def close(self) -> None:
        for s in self.slots:
            self.ray.kill(s.handle[0], no_restart=True)
        if self._own:
            self.ray.shutdown()

    def abort(self) -> None:
        if self.ray.is_initialized():
            self.close()


def verify_rules(rules: Sequence[Rule], timeout: float = 10.0, workers: int | None = 2,
                 on_done: Callable[[int, dict], None] | None = None,
                 grace: float = GRACE, executor: str = "local",
                 address: str | None = None) -> list[dict[str, Any]]:
    """Verification records for `rules`, in order, computed by `workers` processes
    (`executor="local"`) or Ray actors (`"ray"`: on the cluster at `address`, or
    a private local one; `workers` None means one per CPU of the cluster). A
    worker still busy `2 * timeout + grace` seconds after it took a rule is killed,
    wherever it runs, and the rule recorded unknown; the records do not depend
    on which worker ran what. An interruption (KeyboardInterrupt) kills the
    workers before it propagates."""
    deadline = 2 * timeout + grace  # proof, then refutation, each within `timeout`
    records: list[dict[str, Any] | None] = [None] * len(rules)
    todo = list(range(len(rules)))[::-1]
    if not rules:
        return []
    if executor == "ray":
        pool: _LocalPool | _RayPool = _RayPool(workers, len(rules), timeout, address)
    elif executor == "local":
        pool = _LocalPool(max(1, min(workers or 2, len(rules))), timeout)
    else:
        raise ValueError(f"unknown executor {executor!r}; choose from local, ray")

    def finish(idx: int, rec: dict) -> None:
        records[idx] = rec
        if on_done:
            on_done(idx, rec)

    try:
        while todo or any(s.task is not None for s in pool.slots):
            for s in pool.slots:
                if s.ready and s.task is None and todo:
                    idx = todo.pop()
                    pool.give(s, idx, rules[idx])
            for idx, rec in pool.events(0.2):
                finish(idx, rec)
            now = time.perf_counter()
            for s in list(pool.slots):
                if s.task is not None and now - s.since > deadline:
                    idx = s.task
                    pool.replace(s)
                    finish(idx, _killed(timeout, f"killed after {now - s.since:.1f} s"))
    except BaseException:
        pool.abort()
        raise
    pool.close()
    return [r for r in records if r is not None]


def _killed(timeout: float, why: str) -> dict[str, Any]:
    return {"status": "unknown", "reason": why, "z3": z3.get_version_string(),
            "timeout": timeout, "seconds": None}


def apply_records(rules: Iterable[Rule], records: Iterable[dict[str, Any]]) -> None:
    """Write each record into its rule's verification field."""
    for r, rec in zip(rules, records):
        r.verification = dict(rec)
