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
import logging
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taso.files import atomic_path

log = logging.getLogger("taso.optimizer")

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
        self._unwritable = False
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
        """Merge the entries measured here into the file (others' entries kept).
        A file that cannot be written is said once (a warning) and the costs
        stay in memory: losing a cache never fails a search."""
        self._last_save = time.monotonic()
        if not self._new or self._unwritable:
            return
        try:
            self._save()
        except (OSError, ValueError) as e:
            self._unwritable = True
            log.warning("cannot write the cost cache %s (%s); costs stay in memory",
                        self.path, e)

    def _save(self) -> None:
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
        """The file's entries; ValueError (one line, naming the file) for one
        that is not a cost cache, OSError for one that cannot be read."""
        if not self.path.exists():
            return {}
        if not self.path.is_file():
            raise ValueError(f"the cost cache {self.path} is not a regular file")
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except UnicodeDecodeError:
            raise ValueError(f"the cost cache {self.path} is not text (not a taso cost "
                             f"cache; remove it or pass another --cost-cache)") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"the cost cache {self.path} is not valid JSON ({e.msg} at line "
                             f"{e.lineno}); remove it or pass another --cost-cache") from None
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT \
                or doc.get("version") != VERSION or not _valid_entries(entries):
            raise ValueError(f"{self.path} is not a version-{VERSION} taso cost cache; remove it "
                             f"or pass another --cost-cache")
        return entries

    @contextmanager
    def _locked(self):
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _valid_entries(entries: Any) -> bool:
    """backend -> device -> key text -> a finite, non-negative number of ms."""
    return isinstance(entries, dict) and all(
        isinstance(devs, dict) and all(
            isinstance(keys, dict) and all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and v >= 0 for k, v in keys.items())
            for keys in devs.values())
        for devs in entries.values())


def cache_path_problem(path: str | os.PathLike, output: str | os.PathLike | None = None,
                       flag: str = "--cost-cache") -> str | None:
    """Why a cost cache cannot be kept at `path`, or None: checked before a
    search, so that the costs it measures are not lost at the end. `output`:
    the run's output file, which the cache must not be."""
    p = Path(path).expanduser()
    if output is not None and os.path.abspath(p) == os.path.abspath(output) or (
            output is not None and p.exists() and os.path.exists(output)
            and os.path.samefile(p, output)):
        return f"{flag} is the output model; keep costs in another file"
    if p.exists():
        if not p.is_file():
            return f"{flag} {str(p)!r} is not a regular file"
        if not os.access(p, os.R_OK):
            return f"{flag}: cannot read {str(p)!r}"
    for above in p.absolute().parents:
        if above.exists():
            if not above.is_dir():
                return f"{flag}: {str(above)!r} is a file, not a folder"
            if not os.access(above, os.W_OK | os.X_OK):
                return f"{flag}: cannot write in {str(above)!r}"
            break
    return None
