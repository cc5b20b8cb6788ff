"""The generator end to end: enumerate, prune, emit a rule set."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from taso.rules_db import RuleSet

from taso.executor import Executor, make_executor

from .checkpoint import PruneCheckpoint
from .enumerate import Enumeration, RoundStats, enumerate_graphs
from .family import GenConfig
from .prune import PruneProgress, Stages, prune
from .store import ClassStore


@dataclass
class Report:
    rounds: list[RoundStats] = field(default_factory=list)
    stages: Stages = field(default_factory=Stages)
    enumerate_seconds: float = 0.0
    prune_seconds: float = 0.0

    @property
    def graphs(self) -> int:
        return sum(r.graphs for r in self.rounds)


def generate(cfg: GenConfig, workers: int | None = None,
             executor: Executor | str | None = None,
             progress: Callable[[RoundStats, int, int], None] | None = None,
             spill_dir: str | None = None, address: str | None = None,
             prune_progress: PruneProgress | None = None) -> tuple[RuleSet, Report]:
    """Generate the rule set of `cfg` on `workers` local processes (default: all
    cores), or on `executor`: an `Executor`, or "local" / "ray" (a Ray cluster at
    `address`, or a private local one). Graphs wait for pruning in memory, or in
    bucket files under `spill_dir` (by default the system's temporary folder from
    4 operators up; on a cluster it must be a folder every node can read).
    `progress` hears of each representative extended, `prune_progress` of each
    pruning task done (stage, done, tasks). An
    interruption (KeyboardInterrupt) kills the workers and removes the spill
    files before it propagates."""
    own = executor is None or isinstance(executor, str)
    if spill_dir is None and cfg.max_ops >= 4:
        spill_dir = tempfile.gettempdir()
    ex: Executor | None = None
    store: ClassStore | None = None
    try:
        ex = make_executor(executor or "local", workers, address) if own else executor
        store = ClassStore(spill_dir)
        t0 = time.perf_counter()
        enum: Enumeration = enumerate_graphs(cfg, ex, progress, store)
        t1 = time.perf_counter()
        rules, stages = prune(enum, ex, prune_progress)
        t2 = time.perf_counter()
    except BaseException:
        if own and ex is not None:
            ex.abort()
            ex = None
        raise
    finally:
        if store is not None:
            store.close()
        if own and ex is not None:
            ex.close()
    return _rule_set(cfg, rules), Report(enum.rounds, stages, t1 - t0, t2 - t1)


def prune_spilled(cfg: GenConfig, folder: str, workers: int | None = None,
                  progress: PruneProgress | None = None, checkpoint: str | None = None
                  ) -> tuple[RuleSet, Report]:
    """The rule set of a finished enumeration of `cfg` kept in spill `folder`
    (a run cut short while pruning: its bucket files, linked elsewhere before
    the run removed them), pruned on `workers` local processes. The folder is
    read, never changed; the report has no rounds. With a `checkpoint` folder,
    each bucket's result is kept there, and a run cut short goes on from it."""
    ex = make_executor("local", workers)
    try:
        t0 = time.perf_counter()
        kept = None if checkpoint is None else PruneCheckpoint(checkpoint, cfg)
        rules, stages = prune(Enumeration(cfg, ClassStore.reopen(folder)), ex, progress, kept)
    except BaseException:
        ex.abort()
        raise
    ex.close()
    return _rule_set(cfg, rules), Report([], stages, 0.0, time.perf_counter() - t0)


def _rule_set(cfg: GenConfig, rules: list) -> RuleSet:
    name = f"taso-gen-{cfg.opset}-n{cfg.max_ops}" if cfg.opset else f"taso-gen-n{cfg.max_ops}"
    return RuleSet(rules, name=name,
                   provenance={"generator": "taso-gen", "settings": cfg.to_json(),
                               "direction": "both: each rule holds read either way"})
