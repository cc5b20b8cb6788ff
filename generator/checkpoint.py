"""Pruning results kept per bucket, so that a long prune (4 operators: about an
hour on two cores) cut short goes on where it stopped.

A checkpoint folder holds one gzip JSON file per bucket file pruned, named
after it: the task's stage counts and its candidates (rank, canonical form,
variable order, rule, the two graphs, rank vectors), plain data as everything
here is. The folder also records which enumeration it belongs to (the
generator's settings), and a run with other settings refuses it.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from taso.rules_db import Rule

from .family import GenConfig
from .store import Member, _tuples

FORMAT = "taso-prune-checkpoint"
VERSION = 1


def _plain(m: Member) -> list:
    return [m.graph, m.sinks, m.sink_vals, m.vals]


class PruneCheckpoint:
    """The bucket results of the pruning of `cfg`'s enumeration, under `folder`."""

    def __init__(self, folder: str | Path, cfg: GenConfig):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        head = self.folder / "checkpoint.json"
        settings = {"format": FORMAT, "version": VERSION, "settings": cfg.to_json()}
        if head.exists():
            found = json.loads(head.read_text())
            if found != json.loads(json.dumps(settings)):
                raise ValueError(f"{self.folder} holds the pruning of another enumeration "
                                 f"({found.get('settings')}); choose another folder")
        else:
            head.write_text(json.dumps(settings, indent=1))

    def _path(self, bucket: str) -> Path:
        return self.folder / (Path(bucket).stem + ".json.gz")

    def has(self, bucket: str) -> bool:
        """Whether the result of pruning bucket file `bucket` is kept."""
        return self._path(bucket).exists()

    def get(self, bucket: str) -> tuple[list[int], list[tuple]] | None:
        """The kept result of pruning bucket file `bucket`, or None."""
        path = self._path(bucket)
        if not path.exists():
            return None
        with gzip.open(path, "rt") as f:
            counts, out = json.load(f)
        return counts, [(tuple(rank), (_tuples(key), tuple(order), Rule.from_json(rule),
                                       Member(*map(_tuples, a)), Member(*map(_tuples, b))),
                         {tuple(r) for r in vectors})
                        for rank, key, order, rule, a, b, vectors in out]

    def put(self, bucket: str, result: tuple[list[int], list[tuple]]) -> None:
        """Keep the result of pruning bucket file `bucket` (atomically)."""
        counts, out = result
        doc = [counts, [[list(rank), key, list(order), rule.to_json(), _plain(a), _plain(b),
                         sorted(map(list, vectors), key=repr)]
                        for rank, (key, order, rule, a, b), vectors in out]]
        path = self._path(bucket)
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wt", compresslevel=3) as f:
            json.dump(doc, f)
        os.replace(tmp, path)
