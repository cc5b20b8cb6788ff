"""Where enumerated graphs wait for pruning, grouped by class.

In memory for small runs; for large ones (4 operators) spilled to bucket files by
class key, so that only one bucket's graphs are in memory at a time: most
graphs are alone in their class and only classes of two or more make rules.

Spill format (plain text, read by any worker on any node that sees the folder,
so the folder must be one every node can read: a shared file system for a
cluster). A run's folder holds:

- ``format.json``: ``{"format": "taso-gen-spill", "version": 1, "buckets": B}``;
- ``nodes.json``: the node types, a JSON list of ``[op, [[attr, value], ...]]``
  (tuples written as lists; every list in an attribute value reads back as a
  tuple);
- ``bucket-NNN.jsonl``: one graph per line, in the order enumerated,
  ``[[[type, input, ...], ...], [sinks], [sink values], [all values]]``: each
  node is its index in ``nodes.json`` followed by its input tensor ids; values
  are the 64-bit fingerprint digests as JSON integers (exact: read them with a
  parser that keeps 64-bit integers, as Python's does).

JSON lines rather than numpy arrays because a graph is a short variable-length
record (1 to 4 nodes of 0 to 2 inputs, 1 to 2 sinks) and because a line can be
read by eye; with node types interned in ``nodes.json`` it is as compact as and
no slower than pickle was (measured: 6 us per graph written, 8 read). The
bucket of a class is the sum of its key's digests modulo B: digests are already
uniform BLAKE2b values, and the sum is the same in every process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taso.files import atomic_path

from .fingerprint import Digest

# A generator graph: nodes (op, attrs, input tensor ids) over the family tensors
# 0 .. I-1 and then each node's outputs (see `enumerate`).
Node = tuple[str, tuple, tuple[int, ...]]
GraphT = tuple[Node, ...]


@dataclass
class Member:
    """One enumerated graph: its nodes, sink tensor ids and their fingerprints."""

    graph: GraphT
    sinks: tuple[int, ...]
    sink_vals: tuple[Digest, ...]
    vals: tuple[Digest, ...] = ()  # every node output, in tensor-id order

Key = tuple
FORMAT = "taso-gen-spill"
VERSION = 1


class SpillError(RuntimeError):
    """A worker cannot read a spill file (not on a folder every node can read)."""


@dataclass(frozen=True)
class SpillBucket:
    """A task's handle on one bucket file: its path and the node table's."""

    path: str
    nodes: str


def _tuples(v: Any) -> Any:
    return tuple(_tuples(u) for u in v) if isinstance(v, list) else v


def read_bucket(ref: SpillBucket) -> dict[Key, list[Any]]:
    """The classes of one bucket file, in the order written."""
    try:
        with open(ref.nodes) as f:
            table = [(op, tuple((k, _tuples(v)) for k, v in attrs)) for op, attrs in json.load(f)]
        f = open(ref.path)
    except FileNotFoundError as e:
        raise SpillError(f"spill file {e.filename} is not readable on this node: --spill-dir "
                         "must be a folder every node of the cluster can read") from None
    classes: dict[Key, list[Any]] = {}
    with f:
        for line in f:
            nodes, sinks, sink_vals, vals = json.loads(line)
            m = Member(tuple((*table[n[0]], tuple(n[1:])) for n in nodes), tuple(sinks),
                       tuple(sink_vals), tuple(vals))
            classes.setdefault(tuple(sorted(m.sink_vals)), []).append(m)
    return classes


class ClassStore:
    """Members grouped by class key, as `groups()` yields them (one bucket at a
    time when spilling; insertion order within a class)."""

    def __init__(self, spill_dir: str | Path | None = None, buckets: int = 64,
                 flush_every: int = 20000):
        self._mem: dict[Key, list[Any]] | None = {} if spill_dir is None else None
        self._dir: Path | None = None
        if spill_dir is not None:
            # absolute: tasks read it from other working directories (other nodes)
            base = os.path.abspath(spill_dir)
            os.makedirs(base, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix="taso-gen-", dir=base))
            (self._dir / "format.json").write_text(json.dumps(
                {"format": FORMAT, "version": VERSION, "buckets": buckets}) + "\n")
        self.buckets = buckets
        self._buf: list[list[str]] = [[] for _ in range(buckets)]
        self._types: dict[tuple, int] = {}  # (op, attrs) -> index in nodes.json
        self._types_written = -1
        self._buffered = 0
        self._flush_every = flush_every
        self._kept = False  # a reopened folder: read, never written or removed
        self.count = 0

    @classmethod
    def reopen(cls, folder: str | Path) -> ClassStore:
        """The classes of a finished enumeration's spill folder (kept, say, from a
        run cut short while pruning), read-only: closing it leaves the folder."""
        folder = Path(folder).absolute()
        try:
            fmt = json.loads((folder / "format.json").read_text())
        except (OSError, ValueError) as e:
            raise SpillError(f"{folder} is not a taso-gen spill folder: {e}") from None
        if fmt.get("format") != FORMAT or fmt.get("version") != VERSION:
            raise SpillError(f"{folder}: spill format {fmt.get('format')!r} version "
                             f"{fmt.get('version')!r}, this taso-gen reads {FORMAT!r} {VERSION}")
        store = cls(None, buckets=fmt["buckets"])
        store._mem, store._dir, store._kept = None, folder, True
        return store

    @property
    def spill_folder(self) -> Path | None:
        return self._dir

    def add(self, key: Key, member: Any) -> None:
        self.count += 1
        if self._mem is not None:
            self._mem.setdefault(key, []).append(member)
            return
        types = self._types
        nodes = []
        for op, attrs, ins in member.graph:
            t = types.get((op, attrs))
            if t is None:
                t = types[(op, attrs)] = len(types)
            nodes.append([t, *ins])
        self._buf[sum(key) % self.buckets].append(json.dumps(
            [nodes, member.sinks, member.sink_vals, member.vals], separators=(",", ":")))
        self._buffered += 1
        if self._buffered >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        if self._dir is None or self._kept:
            return
        if len(self._types) != self._types_written:  # the table first: lines index it
            with atomic_path(self._dir / "nodes.json") as tmp, open(tmp, "w") as f:
                json.dump([[op, attrs] for op, attrs in self._types], f)
            self._types_written = len(self._types)
        for b, lines in enumerate(self._buf):
            if lines:
                with open(self._bucket_path(b), "a") as f:
                    f.write("\n".join(lines) + "\n")
                self._buf[b] = []
        self._buffered = 0

    def _bucket_path(self, b: int) -> Path:
        assert self._dir is not None
        return self._dir / f"bucket-{b:03d}.jsonl"

    def bucket_files(self) -> list[SpillBucket]:
        """Handles on the non-empty bucket files, in bucket order (after a flush)."""
        self.flush()
        assert self._dir is not None
        return [SpillBucket(str(self._bucket_path(b)), str(self._dir / "nodes.json"))
                for b in range(self.buckets) if self._bucket_path(b).exists()]

    @property
    def spilled(self) -> bool:
        return self._dir is not None

    def groups(self) -> Iterator[Iterator[tuple[Key, list[Any]]]]:
        """The classes, bucket by bucket."""
        if self._mem is not None:
            yield iter(self._mem.items())
            return
        for ref in self.bucket_files():
            yield iter(read_bucket(ref).items())

    def close(self) -> None:
        if self._dir is not None and not self._kept:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
