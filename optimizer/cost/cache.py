"""Measured costs on disk, so a second run of the same model measures nothing new.

The cache is one plain JSON file a user can read and edit:

    {"format": "taso-cost-cache", "version": 2,
     "entries": {"<backend>": {"<device>": {"<cost key>": ENTRY}}},
     "quiet": {"<backend>": {"<device>": READING}}}

where an ENTRY says what was measured and how:

    {"ms": milliseconds, "cal": READING, "half": ms, "reps": runs, "at": unix time}

"cal" is the calibration reading of the batch it was timed in (calibrate.py:
each reference program's milliseconds), "half" the half-width of the interval
around its median, "reps" the runs behind it; "quiet" is each device's quietest
reading seen. Only "ms" is required: a version-1 file (bare numbers) is read as
entries with no calibration, which are trusted only where no decision rests
on them.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taso.files import atomic_path

from .calibrate import Reading, quietest, valid_reading

log = logging.getLogger("taso.optimizer")

FORMAT = "taso-cost-cache"
VERSION = 2
READS = (1, 2)  # the versions read; 1 holds bare numbers


def default_cache_path() -> Path:
    """$TASO_COST_CACHE, else taso/costs.json under the user's cache directory
    ($XDG_CACHE_HOME or ~/.cache)."""
    env = os.environ.get("TASO_COST_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "taso" / "costs.json"


Entry = dict[str, Any]  # {"ms": ..., and optionally "cal", "half", "reps", "at"}


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
        self._entries: dict[str, dict[str, dict[str, Entry]]] = {}
        self._new: dict[tuple[str, str, str], Entry] = {}
        self._quiet: dict[str, dict[str, Reading]] = {}
        self._last_save = time.monotonic()
        self._unwritable = False
        self._quiet_new = False
        self._entries, self._quiet = self._read()
        atexit.register(self.save)

    def __len__(self) -> int:
        return sum(len(keys) for devs in self._entries.values() for keys in devs.values())

    def get(self, backend: str, device: str, key: Any) -> float | None:
        """The milliseconds cached for `key` (None: none are)."""
        entry = self.entry(backend, device, key)
        return None if entry is None else entry["ms"]

    def entry(self, backend: str, device: str, key: Any) -> Entry | None:
        """The entry cached for `key`: its "ms" and how it was measured."""
        entry = self._entries.get(backend, {}).get(device, {}).get(key_text(key))
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, backend: str, device: str, key: Any, ms: float,
            cal: Reading | None = None, half: float | None = None,
            reps: int | None = None) -> None:
        entry: Entry = {"ms": float(ms), "at": round(time.time(), 1)}
        if cal:
            entry["cal"] = {k: float(v) for k, v in cal.items()}
        if half is not None:
            entry["half"] = float(half)
        if reps is not None:
            entry["reps"] = int(reps)
        k = key_text(key)
        self._entries.setdefault(backend, {}).setdefault(device, {})[k] = entry
        self._new[(backend, device, k)] = entry
        if cal:
            self.note_reading(backend, device, cal)
        if time.monotonic() - self._last_save > self.save_every:
            self.save()

    def quiet(self, backend: str, device: str) -> Reading | None:
        """The device's quietest reading seen (each reference's least time)."""
        return self._quiet.get(backend, {}).get(device)

    def note_reading(self, backend: str, device: str, reading: Reading) -> None:
        """Take `reading` into the device's quietest one."""
        devs = self._quiet.setdefault(backend, {})
        devs[device] = quietest(devs.get(device), reading)
        self._quiet_new = True

    def devices(self, backend: str) -> list[str]:
        return sorted(self._entries.get(backend, {}))

    def entries(self) -> Iterator[tuple[str, str, str, Entry]]:
        """Every entry: backend, device, key text, entry."""
        for backend, devs in sorted(self._entries.items()):
            for device, keys in sorted(devs.items()):
                for k, e in keys.items():
                    yield backend, device, k, e

    def clear(self) -> int:
        """Remove every entry, from memory and from the file; how many there were."""
        n = len(self)
        with self._locked():
            if self.path.exists():
                self.path.unlink()
        self._entries, self._quiet, self._new = {}, {}, {}
        self._quiet_new = False
        return n

    def save(self) -> None:
        """Merge the entries measured here into the file (others' entries kept).
        A file that cannot be written is said once (a warning) and the costs
        stay in memory: losing a cache never fails a search."""
        self._last_save = time.monotonic()
        if not (self._new or self._quiet_new) or self._unwritable:
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
            merged, quiet = self._read()
            for (backend, device, k), entry in self._new.items():
                merged.setdefault(backend, {}).setdefault(device, {})[k] = entry
            for backend, devs in self._quiet.items():
                for device, reading in devs.items():
                    q = quiet.setdefault(backend, {})
                    q[device] = quietest(q.get(device), reading)
            doc = {"format": FORMAT, "version": VERSION, "entries": merged, "quiet": quiet}
            with atomic_path(self.path) as tmp, open(tmp, "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
        self._entries, self._quiet = merged, quiet
        self._new.clear()
        self._quiet_new = False

    def _read(self) -> tuple[dict[str, dict[str, dict[str, Entry]]],
                             dict[str, dict[str, Reading]]]:
        """The file's entries and quiet readings; ValueError (one line, naming
        the file) for one that is not a cost cache, OSError for one that cannot
        be read."""
        if not self.path.exists():
            return {}, {}
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
        quiet = doc.get("quiet", {}) if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT \
                or doc.get("version") not in READS:
            raise ValueError(f"{self.path} is not a version-{VERSION} taso cost cache; remove it "
                             f"or pass another --cost-cache")
        if doc["version"] == 1 and _valid_entries(entries, _valid_ms):
            entries = {b: {d: {k: {"ms": float(v)} for k, v in keys.items()}
                           for d, keys in devs.items()} for b, devs in entries.items()}
        if not _valid_entries(entries, _valid_entry) or not _valid_entries(quiet, valid_reading):
            raise ValueError(f"{self.path} is a damaged taso cost cache (an entry is not "
                             f"milliseconds); remove it or pass another --cost-cache")
        return entries, quiet

    @contextmanager
    def _locked(self):
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _valid_ms(v: Any) -> bool:
    """A finite, non-negative number of milliseconds."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and v >= 0


def _valid_entry(e: Any) -> bool:
    return isinstance(e, dict) and _valid_ms(e.get("ms")) \
        and ("cal" not in e or valid_reading(e["cal"])) \
        and all(_valid_ms(e[f]) for f in ("half", "reps", "at") if f in e)


def _valid_entries(entries: Any, valid: Callable[[Any], bool]) -> bool:
    """backend -> device -> (key text or reading) -> what `valid` accepts."""
    return isinstance(entries, dict) and all(
        isinstance(devs, dict) and all(
            isinstance(d, str) and isinstance(keys, dict) and (
                valid(keys) if valid is valid_reading else
                all(isinstance(k, str) and valid(v) for k, v in keys.items()))
            for d, keys in devs.items())
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


def describe(cache: CostCache, now: dict[tuple[str, str], Reading] | None = None) -> str:
    """What `cache` holds, per backend and device: its entries, how many carry a
    calibration, when they were timed, the device's quietest reading, and for
    the devices read `now` ((backend, device) -> the reading now), how many
    entries are out of calibration now (calibrate.TOLERANCE either way)."""
    from .calibrate import TOLERANCE, factor

    lines = [f"cost cache {cache.path}: {len(cache)} entries (format version {VERSION})"]
    groups: dict[tuple[str, str], list[Entry]] = {}
    for backend, device, _, e in cache.entries():
        groups.setdefault((backend, device), []).append(e)
    for (backend, device), entries in sorted(groups.items()):
        calibrated = [e for e in entries if "cal" in e]
        times = sorted(e["at"] for e in entries if "at" in e)
        when = (f", timed {time.strftime('%Y-%m-%d %H:%M', time.localtime(times[0]))} to "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(times[-1]))}") if times else ""
        lines.append(f"{backend} | {device}: {len(entries)} entries, {len(calibrated)} "
                     f"calibrated{when}")
        quiet = cache.quiet(backend, device)
        if quiet:
            lines.append("  quietest reading: " + _reading_text(quiet))
        reading = (now or {}).get((backend, device))
        if reading:
            lines.append("  reading now:      " + _reading_text(reading))
            slower = sum(factor(e["cal"], reading, e["ms"]) < 1 - TOLERANCE for e in calibrated)
            faster = sum(factor(e["cal"], reading, e["ms"]) > 1 + TOLERANCE for e in calibrated)
            lines.append(f"  out of calibration now: {slower + faster} ({slower} timed on a busier "
                         f"machine: timed again where a decision rests on them; {faster} on a "
                         f"quieter one: rescaled); {len(entries) - len(calibrated)} without a "
                         f"calibration (timed again where a decision rests on them)")
    return "\n".join(lines)


def _reading_text(r: Reading) -> str:
    return ", ".join(f"{k} {v * 1e3:.1f} us" if v < 1 else f"{k} {v:.3f} ms"
                     for k, v in sorted(r.items(), key=lambda kv: kv[1]))
