"""Measured costs on disk, so a second run of the same model measures nothing new.

The cache is one plain JSON file a user can read and edit:

    {"format": "taso-cost-cache", "version": 1,
     "entries": {"<backend>": {"<device>": {"<cost key>": milliseconds}}}}

A cost key is written as the `repr` of the operator's `cost_key` tuple (ints,
strings, floats and tuples of them), which is canonical for equal keys. Several
processes may share one file: each save re-reads the file under an exclusive
lock, merges its own new entries in and replaces the file atomically.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taso.files import atomic_path

FORMAT = "taso-cost-cache"
VERSION = 1


def default_cache_path() -> Path:
    """$TASO_COST_CACHE, else taso/costs.json under the user's cache directory
    ($XDG_CACHE_HOME or ~/.cache)."""
    env = os.environ.get("TASO_COST_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "taso" / "costs.json"


def key_text(key: Any) -> str:
    return repr(key)


class CostCache:
    """Costs keyed by (backend, device, cost key), persisted to `path`.

    `get` and `put` work in memory; new entries reach the file on `save`, which
    also runs at most every `save_every` seconds from `put` and once at exit.
    `hits` and `misses` count lookups, so a caller can tell what was measured."""

    def __init__(self, path: str | os.PathLike | None = None, save_every: float = 5.0):
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.save_every = save_every
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, dict[str, dict[str, float]]] = {}
        self._new: dict[tuple[str, str, str], float] = {}
        self._last_save = time.monotonic()
        self._entries = self._read()
        atexit.register(self.save)

    def __len__(self) -> int:
        return sum(len(keys) for devs in self._entries.values() for keys in devs.values())

    def get(self, backend: str, device: str, key: Any) -> float | None:
        value = self._entries.get(backend, {}).get(device, {}).get(key_text(key))
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, backend: str, device: str, key: Any, ms: float) -> None:
        k = key_text(key)
        self._entries.setdefault(backend, {}).setdefault(device, {})[k] = float(ms)
        self._new[(backend, device, k)] = float(ms)
        if time.monotonic() - self._last_save > self.save_every:
            self.save()

    def devices(self, backend: str) -> list[str]:
        return sorted(self._entries.get(backend, {}))

    def save(self) -> None:
        """Merge the entries measured here into the file (others' entries kept)."""
        self._last_save = time.monotonic()
        if not self._new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            merged = self._read()
            for (backend, device, k), ms in self._new.items():
                merged.setdefault(backend, {}).setdefault(device, {})[k] = ms
            doc = {"format": FORMAT, "version": VERSION, "entries": merged}
            with atomic_path(self.path) as tmp, open(tmp, "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
        self._entries = merged
        self._new.clear()

    def _read(self) -> dict[str, dict[str, dict[str, float]]]:
        if not self.path.exists():
            return {}
        with open(self.path) as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise ValueError(f"{self.path} is not a version-{VERSION} taso cost cache")
        return doc["entries"]

    @contextmanager
    def _locked(self):
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
