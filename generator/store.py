"""Where enumerated graphs wait for pruning, grouped by class.

In memory for small runs; for large ones (4 operators) spilled to bucket files by
class key, so that only one bucket's graphs are in memory at a time: most
graphs are alone in their class and only classes of two or more make rules.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Key = tuple


class ClassStore:
    """Members grouped by class key, as `groups()` yields them (one bucket at a
    time when spilling; insertion order within a class)."""

    def __init__(self, spill_dir: str | Path | None = None, buckets: int = 64,
                 flush_every: int = 20000):
        self._mem: dict[Key, list[Any]] | None = {} if spill_dir is None else None
        self._dir: Path | None = None
        self._own_dir = False
        if spill_dir is not None:
            self._dir = Path(tempfile.mkdtemp(prefix="taso-gen-", dir=spill_dir))
            self._own_dir = True
        self.buckets = buckets
        self._buf: list[list[tuple[Key, Any]]] = [[] for _ in range(buckets)]
        self._buffered = 0
        self._flush_every = flush_every
        self.count = 0

    def add(self, key: Key, member: Any) -> None:
        self.count += 1
        if self._mem is not None:
            self._mem.setdefault(key, []).append(member)
            return
        self._buf[hash(key) % self.buckets].append((key, member))
        self._buffered += 1
        if self._buffered >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        if self._dir is None:
            return
        for b, items in enumerate(self._buf):
            if items:
                with open(self._dir / f"{b}.pkl", "ab") as f:
                    pickle.dump(items, f, protocol=pickle.HIGHEST_PROTOCOL)
                self._buf[b] = []
        self._buffered = 0

    def groups(self) -> Iterator[Iterator[tuple[Key, list[Any]]]]:
        """The classes, bucket by bucket."""
        if self._mem is not None:
            yield iter(self._mem.items())
            return
        self.flush()
        assert self._dir is not None
        for b in range(self.buckets):
            path = self._dir / f"{b}.pkl"
            if not path.exists():
                continue
            classes: dict[Key, list[Any]] = {}
            with open(path, "rb") as f:
                while True:
                    try:
                        chunk = pickle.load(f)
                    except EOFError:
                        break
                    for key, m in chunk:
                        classes.setdefault(key, []).append(m)
            yield iter(classes.items())

    def close(self) -> None:
        if self._own_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
